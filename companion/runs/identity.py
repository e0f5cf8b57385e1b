"""A run's data: what they are (per-split hashes, so that ``--resume`` refuses other data), the tokenizers
(trained on rank 0 and broadcast) and the batches."""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch.distributed as dist

from ..data import (
    DATA_DIR_ENV,
    SubwordTokenizer,
    WordTokenizer,
    encode_pairs,
    load_multi30k,
    make_batches,
    synthetic_pairs,
    tokenizer_from_dict,
)
from ..errors import RunError
from .config import DataConfig, RunConfig

__all__ = ["RunData", "data_identity", "check_same_data", "build_tokenizers", "build_run_data"]


class RunData(NamedTuple):
    """What :func:`build_run_data` returns: tokenizers (None for synthetic tasks), vocabulary sizes, batches."""

    tokenizers: dict[str, Any] | None
    vocab_sizes: tuple[int, int]
    train_batches: list[Any]
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
    recorded: Mapping[str, Any] | None, current: Mapping[str, Any] | None, data_dir: str | None
) -> None:
    """RunError if a resumed run's data differ from the data its checkpoint recorded."""
    if not recorded or current is None:
        return  # a run recorded before data identities were kept, or a synthetic task (drawn from the seed)
    differing = [
        f"{split}: the run used {recorded[split]['pairs']} pairs (sha256 {recorded[split]['sha256'][:12]}), "
        f"now {current[split]['pairs']} pairs (sha256 {current[split]['sha256'][:12]})"
        for split in sorted(set(recorded) | set(current))
        if recorded.get(split) != current.get(split) and split in recorded and split in current
    ]
    if differing:
        source = data_dir or os.environ.get(DATA_DIR_ENV) or "the Hugging Face hub"
        raise RunError(
            f"--resume: the data in {source} are not the data this run was trained on ("
            + "; ".join(differing)
            + "). Resuming would not continue the same run; pass the "
            "--data-dir the run used, or start a new run."
        )


def build_tokenizers(
    config: DataConfig, train_pairs: Sequence[tuple[str, str]], rank: int = 0, world_size: int = 1
) -> tuple[Any, Any]:
    """``(src_tokenizer, tgt_tokenizer)`` trained on ``train_pairs`` as ``config`` says (one shared BPE, or
    one word vocabulary per language).

    Under ``torchrun`` rank 0 trains them and broadcasts them, so every rank holds identical vocabularies.
    """
    dicts: list[Any] = [None]
    if rank == 0:
        src_texts, tgt_texts = [s for s, _ in train_pairs], [t for _, t in train_pairs]
        if config.tokenizer == "bpe":
            shared = SubwordTokenizer.train(src_texts + tgt_texts, vocab_size=config.vocab_size)
            if shared.vocab_size > config.vocab_size:
                warnings.warn(
                    f"--vocab-size {config.vocab_size}: the BPE vocabulary has {shared.vocab_size} "
                    "entries, because it keeps every character of the training text (plus the 4 "
                    "special tokens); ask for more than that to get merges",
                    stacklevel=2,
                )
            dicts = [{"src": shared.to_dict(), "tgt": shared.to_dict()}]
        else:
            dicts = [
                {
                    "src": WordTokenizer.build(src_texts, config.src, min_freq=config.min_freq).to_dict(),
                    "tgt": WordTokenizer.build(tgt_texts, config.tgt, min_freq=config.min_freq).to_dict(),
                }
            ]
    if world_size > 1:
        dist.broadcast_object_list(dicts, src=0)
    return tokenizer_from_dict(dicts[0]["src"]), tokenizer_from_dict(dicts[0]["tgt"])


def build_run_data(
    config: RunConfig, saved_tokenizers: Mapping[str, Any] | None = None, rank: int = 0, world_size: int = 1
) -> RunData:
    """Tokenizers and training/validation batches of a run (the tokenizers of a checkpoint when resuming).

    Synthetic tasks draw their pairs from the run's seed (``config.train.seed``); Multi30k is read from
    ``config.data.data_dir`` (a missing folder or file is a :class:`~companion.errors.RunError`). Sentences are
    cut to the model's ``max_len``; batches hold ``config.data.max_tokens`` tokens.
    """
    data, seed, max_len = config.data, config.train.seed, config.model.max_len
    identity = None
    if data.task != "multi30k":
        train, valid = _synthetic_splits(data, seed)
        tokenizers, vocab_sizes = None, (data.synthetic_vocab, data.synthetic_vocab)
    else:
        try:
            splits = load_multi30k(data.src, data.tgt, data.data_dir)
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
