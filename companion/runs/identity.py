"""A run's data: what they are (per-split hashes, so that ``--resume`` refuses other data), the tokenizers
(trained on rank 0 and broadcast) and the batches."""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import json
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch.distributed as dist

from .._version import __version__
from ..data import (
    DATA_DIR_ENV,
    HeldOutCorpus,
    ParallelCorpus,
    StoredBatches,
    SubwordTokenizer,
    WordTokenizer,
    disk_corpus,
    encode_pairs,
    files_corpus,
    folder_corpus,
    hub_corpus,
    json_corpus,
    load_multi30k,
    make_batches,
    prepare_store,
    synthetic_pairs,
    tokenizer_from_dict,
    tsv_corpus,
)
from ..data.corpus import HUB_SPLIT_NAMES, MULTI30K_SPLIT_STEMS
from ..data.store import default_cache_dir
from ..errors import CompanionError, DataError, RunError
from .config import DataConfig, RunConfig
from .sections import TRANSLATION

__all__ = [
    "RunData",
    "data_identity",
    "check_same_data",
    "build_tokenizers",
    "build_run_data",
    "open_corpus",
    "evaluation_pairs",
]


class RunData(NamedTuple):
    """What :func:`build_run_data` returns: tokenizers (None for synthetic tasks), vocabulary sizes, batches."""

    tokenizers: dict[str, Any] | None
    vocab_sizes: tuple[int, int]
    train_batches: Sequence[Any]  # a list, or StoredBatches read from a token store
    valid_batches: list[Any]
    identity: dict[str, Any] | None = None  # what the data are (see data_identity); None for synthetic tasks


def data_identity(splits: Mapping[str, Sequence[tuple[str, str]]]) -> dict[str, Any]:
    """What exact resume depends on in the data: per split the number of sentence pairs and the SHA-256 of
    their text. Recorded in ``run.json`` and every checkpoint; ``--resume`` refuses data that differ."""
    identity = {}
    for split, pairs in splits.items():
        sha = hashlib.sha256()
        for source, target in pairs:
            sha.update(
                source.encode("utf-8", "surrogatepass") + b"\t" + target.encode("utf-8", "surrogatepass") + b"\n"
            )
        identity[split] = {"pairs": len(pairs), "sha256": sha.hexdigest()}
    return identity


def check_same_data(
    recorded: Mapping[str, Any] | None, current: Mapping[str, Any] | None, data: DataConfig | str | None
) -> None:
    """RunError if a resumed run's data (``data`` names where they come from: the run's DataConfig, or, as before
    0.3, its data folder) differ from the data its checkpoint recorded."""
    if not recorded or current is None:
        return  # a run recorded before data identities were kept, or a synthetic task (drawn from the seed)
    differing = [
        f"{split}: the run used {recorded[split]['pairs']} pairs (sha256 {recorded[split]['sha256'][:12]}), "
        f"now {current[split]['pairs']} pairs (sha256 {current[split]['sha256'][:12]})"
        for split in sorted(set(recorded) | set(current))
        if recorded.get(split) != current.get(split) and split in recorded and split in current
    ]
    if differing:
        raise RunError(
            f"--resume: the data in {data_source(data) if isinstance(data, DataConfig) else _folder_words(data)} "
            "are not the data this run was trained on ("
            + "; ".join(differing)
            + "). Resuming would not continue the same run: restore the data the run used, or start a new run."
        )


def _folder_words(folder: str | None) -> str:
    return folder or os.environ.get(DATA_DIR_ENV) or "the Hugging Face hub (bentrevett/multi30k)"


def data_source(data: DataConfig) -> str:
    """Where a run's data come from, in words for a message."""
    if data.train_files:
        return "the --train files (" + " and ".join(data.train_files) + ")"
    if data.hf_dataset:
        return f"the dataset {data.hf_dataset}" + (f" ({data.hf_config})" if data.hf_config else "")
    return _folder_words(data.data_dir)


def build_tokenizers(
    config: DataConfig,
    train_pairs: Sequence[tuple[str, str]] | ParallelCorpus,
    rank: int = 0,
    world_size: int = 1,
    log: Callable[[str], None] | None = None,
) -> tuple[Any, Any]:
    """``(src_tokenizer, tgt_tokenizer)`` trained on ``train_pairs`` as ``config`` says (one shared BPE, or
    one word vocabulary per language). ``train_pairs`` may be a :class:`~companion.data.corpus.ParallelCorpus`, whose
    training split is then streamed (never held in memory), and whose vocabularies are kept in the cache
    (``config.cache_dir``, beside the token stores; keyed by the data's content, the settings and the library
    versions): learning them again from the same data gives the same vocabularies, and takes minutes on a corpus of
    millions of pairs. ``log`` (e.g. ``print``) hears which, and how long learning took.

    Under ``torchrun`` rank 0 trains them and broadcasts them, so every rank holds identical vocabularies.
    """
    dicts = [_on_rank_zero(lambda: _vocabularies(config, train_pairs, log), rank, world_size)]
    if world_size > 1:
        dist.broadcast_object_list(dicts, src=0)
    return tokenizer_from_dict(dicts[0]["src"]), tokenizer_from_dict(dicts[0]["tgt"])


def _on_rank_zero(work: Callable[[], Any], rank: int, world_size: int) -> Any:
    """``work()`` on rank 0 (None on the others). Under ``torchrun`` the outcome reaches every rank: a failure of
    rank 0 (bad data) is said once, by rank 0, before any process stops (torchrun ends the others as soon as one
    exits), then raised on every rank as a RunError marked ``reported``; before, the other ranks died in their
    next collective operation with a transport error (a gloo traceback) that buried it."""
    result: Any = None
    failure: list[str | None] = [None]
    if rank == 0:
        try:
            result = work()
        except (CompanionError, FileNotFoundError) as error:
            if world_size == 1:
                raise
            failure = [str(error)]
            print(f"companion train: error: {error}", file=sys.stderr, flush=True)
        except Exception as error:  # a bug or an OS failure: its traceback, then every rank stops
            if world_size == 1:
                raise
            traceback.print_exc()
            failure = [f"rank 0 failed ({type(error).__name__}: {error})"]
            print(f"companion train: error: {failure[0]}", file=sys.stderr, flush=True)
    if world_size > 1:
        dist.broadcast_object_list(failure, src=0)
        if failure[0] is not None:
            reported = RunError(failure[0])
            reported.reported = True  # type: ignore[attr-defined]
            raise reported
    return result


def _vocabularies(
    config: DataConfig, train_pairs: Sequence[tuple[str, str]] | ParallelCorpus, log: Callable[[str], None] | None
) -> dict:
    """The vocabularies' dicts, from the cache (corpora of one's own) or learned now."""
    cached = _vocabulary_file(config, train_pairs) if isinstance(train_pairs, ParallelCorpus) else None
    values = _read_vocabularies(cached)
    if values is not None:
        if log is not None:
            log(f"vocabularies from the cache: {cached}")
    else:
        started = time.perf_counter()
        if log is not None:
            log(f"learning the vocabularies ({_vocabulary_kind(config)}) from the training split")
        values = _learn_vocabularies(config, train_pairs)
        if log is not None:
            log(f"learned the vocabularies in {time.perf_counter() - started:.1f} s")
        if cached is not None:
            try:
                _write_atomically(cached, json.dumps(values, ensure_ascii=False))
            except OSError as error:  # a cache that cannot be written costs the next run time, not this one its data
                warnings.warn(f"the vocabularies could not be kept in the cache ({error})", stacklevel=2)
    _warn_small_vocabulary(config, values)
    return values


def _vocabulary_kind(config: DataConfig) -> str:
    if config.tokenizer == "bpe":
        return f"one byte-pair vocabulary of --vocab-size {config.vocab_size}"
    return f"word vocabularies of the words seen at least --min-freq {config.min_freq} times"


def _learn_vocabularies(config: DataConfig, train_pairs: Sequence[tuple[str, str]] | ParallelCorpus) -> dict:
    """``{"src": dict, "tgt": dict}`` (``Tokenizer.to_dict()``) learned from the training pairs."""
    src_texts: Iterable[str]
    tgt_texts: Iterable[str]
    if isinstance(train_pairs, ParallelCorpus):
        corpus = train_pairs
        both: Iterable[str] = corpus.texts("train", "both")
        src_texts, tgt_texts = corpus.texts("train", "src"), corpus.texts("train", "tgt")
    else:
        src_texts, tgt_texts = [s for s, _ in train_pairs], [t for _, t in train_pairs]
        both = list(src_texts) + list(tgt_texts)
    if config.tokenizer == "bpe":
        shared = SubwordTokenizer.train(both, vocab_size=config.vocab_size).to_dict()
        return {"src": shared, "tgt": shared}
    return {
        "src": WordTokenizer.build(src_texts, config.src, min_freq=config.min_freq).to_dict(),
        "tgt": WordTokenizer.build(tgt_texts, config.tgt, min_freq=config.min_freq).to_dict(),
    }


def _warn_small_vocabulary(config: DataConfig, dicts: Mapping[str, Any]) -> None:
    size = tokenizer_from_dict(dicts["src"]).vocab_size
    if config.tokenizer == "bpe" and size > config.vocab_size:
        warnings.warn(
            f"--vocab-size {config.vocab_size}: the BPE vocabulary has {size} entries, because it keeps every "
            "character of the training text (plus the 4 special tokens); ask for more than that to get merges",
            stacklevel=3,
        )


def _vocabulary_file(config: DataConfig, corpus: ParallelCorpus) -> Path:
    """Where the vocabularies of ``corpus``'s training split with ``config``'s settings are kept."""
    description = {
        "data": _content_identity(corpus.identity("train")),
        "languages": [config.src, config.tgt],
        "tokenizer": config.tokenizer,
        "settings": {"vocab_size": config.vocab_size} if config.tokenizer == "bpe" else {"min_freq": config.min_freq},
        "versions": {"companion": __version__} | {name: _installed_version(name) for name in ("tokenizers", "spacy")},
    }
    key = hashlib.sha256(json.dumps(description, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    root = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    return root / "vocabularies" / f"{key[:32]}.json"


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _read_vocabularies(path: Path | None) -> dict | None:
    """The kept vocabularies at ``path``, or None when there are none (or they cannot be read: learned again)."""
    if path is None or not path.is_file():
        return None
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
        for side in ("src", "tgt"):
            tokenizer_from_dict(values[side])
        return values
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def build_run_data(
    config: RunConfig,
    saved_tokenizers: Mapping[str, Any] | None = None,
    rank: int = 0,
    world_size: int = 1,
    log: Callable[[str], None] | None = None,
) -> RunData:
    """Tokenizers and training/validation batches of a run (the tokenizers of a checkpoint when resuming).

    Synthetic tasks draw their pairs from the run's seed (``config.train.seed``); Multi30k is read from
    ``config.data.data_dir`` (a missing folder or file is a :class:`~companion.errors.RunError`). Sentences are
    cut to the model's ``max_len``; batches hold ``config.data.max_tokens`` tokens. ``log`` hears the steps of
    preparing a corpus of one's own that can take minutes (learning vocabularies, tokenizing into the cache).
    """
    data, seed, max_len = config.data, config.train.seed, config.model.max_len
    identity = None
    if data.task == TRANSLATION and not data.is_multi30k():
        return _stored_run_data(config, saved_tokenizers, rank, world_size, log)
    if data.task != TRANSLATION:
        train, valid = _synthetic_splits(data, seed)
        tokenizers, vocab_sizes = None, (data.synthetic_vocab, data.synthetic_vocab)
    else:
        try:
            splits = load_multi30k(data.src, data.tgt, data.data_dir, splits=("train", "valid"))
        except FileNotFoundError as error:
            raise RunError(str(error)) from None
        if data.limit_train:
            splits["train"] = splits["train"][: data.limit_train]
        identity = data_identity({name: splits[name] for name in ("train", "valid")})
        if saved_tokenizers is not None:
            src_tok, tgt_tok = (tokenizer_from_dict(saved_tokenizers[side]) for side in ("src", "tgt"))
        else:
            src_tok, tgt_tok = build_tokenizers(data, splits["train"], rank, world_size)
        train = encode_pairs(splits["train"], src_tok, tgt_tok, max_len=max_len)
        valid = encode_pairs(splits["valid"], src_tok, tgt_tok, max_len=max_len)
        tokenizers, vocab_sizes = {"src": src_tok, "tgt": tgt_tok}, (src_tok.vocab_size, tgt_tok.vocab_size)
    assert data.max_tokens is not None  # filled from the preset when the config was built
    train_batches = make_batches(train, data.max_tokens, seed=seed)
    valid_batches = make_batches(valid, data.max_tokens, shuffle=False)
    return RunData(tokenizers, vocab_sizes, train_batches, valid_batches, identity)


def _synthetic_splits(data: DataConfig, seed: int) -> tuple[list[Any], list[Any]]:
    """Training and validation pairs of a synthetic task, drawn from ``seed`` and ``seed + 1``."""
    settings = dict(max_len=data.synthetic_max_len, vocab_size=data.synthetic_vocab)
    train = synthetic_pairs(data.task, data.num_examples, seed=seed, **settings)
    valid = synthetic_pairs(data.task, max(200, data.num_examples // 50), seed=seed + 1, **settings)
    return train, valid


# -- corpora given by the user: streamed into token stores ------------------------------------------------


def open_corpus(data: DataConfig) -> ParallelCorpus:
    """The :class:`~companion.data.corpus.ParallelCorpus` that ``data`` names (``--data-dir``, ``--train``/``--valid``/
    ``--test`` files or ``--hf-dataset``), with ``--hold-out`` training pairs as its validation split
    (:class:`~companion.data.corpus.HeldOutCorpus`); a :class:`~companion.errors.RunError` when it cannot be opened."""
    corpus = _source_corpus(data)
    if not data.hold_out:
        return corpus
    try:
        return HeldOutCorpus(corpus, data.hold_out)
    except DataError as error:
        raise RunError(f"--hold-out {data.hold_out}: {error}") from None


def _source_corpus(data: DataConfig) -> ParallelCorpus:
    """The corpus as the data source gives it (see :func:`open_corpus`)."""
    src, tgt = data.src, data.tgt
    try:
        if data.hf_dataset:
            splits = _split_names(data, HUB_SPLIT_NAMES)
            if Path(data.hf_dataset).is_dir():
                return disk_corpus(data.hf_dataset, src=src, tgt=tgt, splits=splits)
            return hub_corpus(data.hf_dataset, data.hf_config, src=src, tgt=tgt, splits=splits)
        if data.train_files:
            return _files_corpus(data)
        folder = data.data_dir or os.environ.get(DATA_DIR_ENV)
        if not folder:
            raise RunError("no data: give --data-dir DIR, --train SRC_FILE TGT_FILE or --hf-dataset NAME")
        return folder_corpus(folder, src, tgt, _split_names(data, MULTI30K_SPLIT_STEMS))
    except (FileNotFoundError, ValueError, TypeError) as error:
        raise RunError(_with_flag_names(str(error))) from None


def _with_flag_names(message: str) -> str:
    """A corpus message in the command line's words: ``train[0]`` (the first file of the training split) reads
    ``--train (its first file)``."""
    order = {"0": "first", "1": "second"}
    message = re.sub(r"\b(train|valid|test)\[([01])\]", lambda m: f"--{m[1]} (its {order[m[2]]} file)", message)
    return re.sub(r"^(train|valid|test):", r"--\1:", message)  # one file holding both sides (.tsv, .jsonl)


def _split_names(data: DataConfig, defaults: Mapping[str, str]) -> dict[str, str]:
    given = {"train": data.train_split, "valid": data.valid_split, "test": data.test_split}
    return {split: given[split] or defaults[split] for split in ("train", "valid", "test")}


def _files_corpus(data: DataConfig) -> ParallelCorpus:
    """The ``--train``/``--valid``/``--test`` files: pairs of aligned files, or one TSV or JSON file each."""
    given = {split: files for split in ("train", "valid", "test") if (files := getattr(data, f"{split}_files"))}
    kinds = {_file_kind(files) for files in given.values()}
    if len(kinds) > 1:
        raise RunError(
            "--train, --valid and --test must be files of one kind (all SRC_FILE TGT_FILE pairs, all .tsv or all "
            f".json/.jsonl), got {sorted(kinds)}"
        )
    kind = kinds.pop()
    if kind == "aligned":
        return files_corpus(data.src, data.tgt, **{split: tuple(files) for split, files in given.items()})
    if kind == "tsv":
        return tsv_corpus(data.src, data.tgt, **{split: files[0] for split, files in given.items()})
    return json_corpus(data.src, data.tgt, **{split: files[0] for split, files in given.items()})


def _file_kind(files: Sequence[str]) -> str:
    if len(files) == 2:
        return "aligned"
    return "tsv" if files[0].endswith((".tsv", ".tsv.gz")) else "json"


class _FirstPairs(ParallelCorpus):
    """A corpus whose training split is cut to its first ``limit`` pairs (``--limit-train``)."""

    def __init__(self, corpus: ParallelCorpus, limit: int) -> None:
        self.src, self.tgt = corpus.src, corpus.tgt
        self._corpus, self._limit = corpus, limit

    @property
    def splits(self) -> tuple[str, ...]:
        return self._corpus.splits

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        pairs = self._corpus.pairs(split)
        return itertools.islice(pairs, self._limit) if split == "train" else pairs

    def identity(self, split: str) -> dict[str, Any]:
        inner = self._corpus.identity(split)
        return inner | {"first_pairs": self._limit} if split == "train" else inner

    def describe(self, split: str) -> str:
        return self._corpus.describe(split)


def _content_identity(identity: Any) -> Any:
    """A corpus identity without its file paths (moving the files keeps the data the same)."""
    if isinstance(identity, Mapping):
        return {k: _content_identity(v) for k, v in identity.items() if k != "path"}
    if isinstance(identity, list):
        return [_content_identity(v) for v in identity]
    return identity


def _stored_identity(corpus: ParallelCorpus, split: str, pairs: int) -> dict[str, Any]:
    """``{"pairs", "sha256"}`` of a split kept in a token store: the digest of what the data are (the files'
    SHA-256, a dataset's fingerprint), comparable to the record of a resumed run."""
    described = json.dumps(_content_identity(corpus.identity(split)), sort_keys=True, default=str)
    return {"pairs": pairs, "sha256": hashlib.sha256(described.encode("utf-8")).hexdigest()}


def _stored_run_data(
    config: RunConfig,
    saved_tokenizers: Mapping[str, Any] | None,
    rank: int,
    world_size: int,
    log: Callable[[str], None] | None = None,
) -> RunData:
    """Tokenizers (streamed from the corpus, or the checkpoint's) and token-store batches of a user's corpus.

    Rank 0 tokenizes each split into ``--cache-dir`` (``--workers`` processes) while the other ranks wait; then
    every rank opens the same store and reads batches lazily (under torchrun only its share of each batch)."""
    data, seed = config.data, config.train.seed
    corpus = open_corpus(data)
    if data.limit_train:
        corpus = _FirstPairs(corpus, data.limit_train)
    try:
        if saved_tokenizers is not None:
            src_tok, tgt_tok = (tokenizer_from_dict(saved_tokenizers[side]) for side in ("src", "tgt"))
        else:
            src_tok, tgt_tok = build_tokenizers(data, corpus, rank, world_size, log)
        splits = ["train"] + (["valid"] if "valid" in corpus.splits else [])
        stores = {split: _prepared(config, corpus, split, src_tok, tgt_tok, rank, world_size, log) for split in splits}
    except (DataError, FileNotFoundError) as error:
        raise RunError(str(error)) from None
    assert data.max_tokens is not None
    train_batches = StoredBatches(stores["train"], data.max_tokens, seed=seed)
    valid_batches = list(StoredBatches(stores["valid"], data.max_tokens, shuffle=False)) if "valid" in stores else []
    identity = {split: _stored_identity(corpus, split, store.num_pairs) for split, store in stores.items()}
    tokenizers = {"src": src_tok, "tgt": tgt_tok}
    return RunData(tokenizers, (src_tok.vocab_size, tgt_tok.vocab_size), train_batches, valid_batches, identity)


def _prepared(
    config: RunConfig,
    corpus: ParallelCorpus,
    split: str,
    src_tok: Any,
    tgt_tok: Any,
    rank: int,
    world_size: int,
    log: Callable[[str], None] | None = None,
) -> Any:
    """The token store of ``split``: built by rank 0 first (``log`` hears how), then opened (found in the cache) by
    the others."""

    def prepare(log: Callable[[str], None] | None = None) -> Any:
        return prepare_store(
            corpus,
            split,
            src_tok,
            tgt_tok,
            cache_dir=config.data.cache_dir,
            max_len=config.model.max_len,
            workers=config.data.workers,
            log=log,
        )

    store = _on_rank_zero(lambda: prepare(log), rank, world_size)  # the others wait, then open what it built
    if store is not None:
        return store
    with warnings.catch_warnings():  # rank 0 has said what the store's build says (its truncation), once
        warnings.simplefilter("ignore")
        return prepare()


def evaluation_pairs(data: DataConfig, split: str, data_dir: str | None = None) -> list[tuple[str, str]]:
    """The sentence pairs of ``split`` ("train", "valid" or "test"; for Multi30k also one of
    ``companion.data.MULTI30K_UNSEEN_TESTS``) of the corpus a run recorded (``data``); ``data_dir`` replaces
    the recorded folder. Multi30k is read as :func:`~companion.data.load_multi30k` reads it."""
    if data_dir is not None:
        data = _with_folder(data, data_dir)
    if data.is_multi30k():
        try:
            return load_multi30k(data.src, data.tgt, data.data_dir, splits=(split,))[split]
        except FileNotFoundError as error:
            raise RunError(str(error)) from None
    corpus = open_corpus(data)
    if split not in corpus.splits:
        reason = ""
        try:
            corpus.identity(split)
        except FileNotFoundError as error:  # a folder without the split's files: name them
            reason = f"{error}: "
        except DataError:
            pass
        raise RunError(
            f"{reason}the run's data ({_corpus_words(corpus)}) have no {split} split; score other data with "
            "--src-file F --ref-file R"
        )
    try:
        return list(corpus.pairs(split))
    except (DataError, FileNotFoundError) as error:
        raise RunError(str(error)) from None


def _with_folder(data: DataConfig, data_dir: str) -> DataConfig:
    import dataclasses

    return dataclasses.replace(
        data, data_dir=data_dir, train_files=None, valid_files=None, test_files=None, hf_dataset=None, hf_config=None
    )


def _corpus_words(corpus: ParallelCorpus) -> str:
    """A corpus in words for a message: where its training data come from and which splits it has."""
    splits = ", ".join(corpus.splits) or "none"
    try:
        return f"{corpus.describe('train')}; its splits: {splits}"
    except (KeyError, ValueError, FileNotFoundError, DataError):  # no training split to describe
        return f"splits: {splits}"
