"""Data for translation: Multi30k loading, tokenizers, token-count batches and synthetic tasks.

Read top to bottom:

1. Special tokens with fixed ids shared by every tokenizer (``<pad>=0, <unk>=1, <bos>=2, <eos>=3``).
2. Tokenizers. :class:`WordTokenizer` splits text with spaCy's rule-based tokenizer (``spacy.blank``,
   no model download) and keeps a word vocabulary built from the training texts only. :class:`SubwordTokenizer`
   trains a byte-pair-encoding (or unigram) model with Hugging Face ``tokenizers``, meant to be shared by
   source and target as in the paper. Both turn text into ids and ids back into detokenized text (for
   sacreBLEU), and both serialise to a JSON-friendly dict so a checkpoint can carry its vocabulary.
3. :func:`load_multi30k`: the English-German Multi30k splits from a local folder of the raw ``.gz`` files or
   from the Hugging Face hub, with a fast and helpful failure when neither is available.
4. :func:`encode_pairs` and :func:`make_batches`: id pairs, then right-padded :class:`Batch` tensors grouped by
   length so that each batch holds about ``max_tokens`` tokens (the paper: ~25,000 per side).
5. :func:`synthetic_pairs`: copy / reverse / sort tasks that need no data at all.

Empty text: ``encode("")`` is ``[]``. :func:`load_multi30k` drops pairs with an empty side (with a warning;
the real Multi30k files have none), so it never yields empty pairs.
"""

from __future__ import annotations

import gzip
import os
import random
import socket
import threading
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlparse

import torch

from ._validation import check_positive_int

__all__ = [
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "PAD_ID",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "SPECIAL_TOKENS",
    "Tokenizer",
    "WordTokenizer",
    "SubwordTokenizer",
    "tokenizer_from_dict",
    "DataUnavailableError",
    "MULTI30K_LANGUAGES",
    "load_multi30k",
    "encode_pairs",
    "Batch",
    "make_batches",
    "SYNTHETIC_TASKS",
    "synthetic_pairs",
]

# -- 1. special tokens ----------------------------------------------------------------------------------------

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # position in this tuple == id

# -- 2. tokenizers --------------------------------------------------------------------------------------------


class Tokenizer:
    """Common interface: text <-> ids, with the special ids fixed to ``PAD_ID, UNK_ID, BOS_ID, EOS_ID``.

    ``encode`` never adds ``<bos>``/``<eos>`` (batching does that). ``decode`` stops at the first ``<eos>``,
    skips ``<pad>`` and ``<bos>``, and writes ``<unk>`` for unknown tokens.
    """

    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (no ``<bos>``/``<eos>``); ``""`` gives ``[]``."""
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Many texts at once (faster than calling :meth:`encode` in a loop)."""
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> detokenized text (stops at ``<eos>``, skips ``<pad>``/``<bos>``)."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description from which :func:`tokenizer_from_dict` rebuilds this tokenizer."""
        raise NotImplementedError

    def _content_ids(self, ids: Sequence[int]) -> list[int]:
        """The ids up to the first ``<eos>``, without ``<pad>``/``<bos>``; checks the id range."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        kept = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must be integers, got {i!r} of type {type(i).__name__}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"ids holds {i}, outside the vocabulary [0, {self.vocab_size})")
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                kept.append(i)
        return kept


def _check_texts(name: str, texts: object) -> list[str]:
    """A list of strings (any iterable of ``str``), or a TypeError naming the argument."""
    if isinstance(texts, str):
        raise TypeError(f"{name} must be an iterable of strings, got a single string")
    texts = list(texts)  # type: ignore[arg-type]
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(text).__name__}")
    return texts


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text


@lru_cache(maxsize=None)
def _spacy_tokenizer(language: str):
    """spaCy's rule-based tokenizer for ``language`` (``spacy.blank``: no trained model, no download)."""
    import spacy

    try:
        return spacy.blank(language).tokenizer
    except Exception as error:  # spaCy raises ImportError or its own errors for unknown codes
        raise ValueError(f"language must be a language code spaCy knows (e.g. 'en', 'de'), got {language!r}") from error


class WordTokenizer(Tokenizer):
    """Word-level tokenizer: spaCy's rule-based tokenizer plus a vocabulary from the training texts.

    Detokenization. Token ids do not record the spaces between tokens, so the tokenizer learns, from the
    training texts, which tokens usually stick to their left neighbour (``.``, ``,``, ``'s``, ``n't``) and
    which to their right one (``(``, ``„``), and joins with a space everywhere else. Measured on the Multi30k
    validation set: rebuilding each sentence from its spaCy tokens reproduces 99.9% (English) and 99.8%
    (German) of the sentences exactly; the rest differ only in spacing, which sacreBLEU's tokenizer ignores.
    """

    def __init__(self, language: str, itos: Sequence[str], glue_left: Iterable[str] = (),
                 glue_right: Iterable[str] = (), min_freq: int = 1) -> None:
        """Use :meth:`build` to create one from texts; this constructor takes a finished vocabulary.

        ``itos`` lists the tokens by id and must start with ``<pad> <unk> <bos> <eos>``.
        """
        if not isinstance(language, str):
            raise TypeError(f"language must be a str, got {type(language).__name__}")
        itos = list(itos)
        if tuple(itos[:4]) != SPECIAL_TOKENS:
            raise ValueError(f"itos must start with the special tokens {list(SPECIAL_TOKENS)}, got {itos[:4]}")
        if len(set(itos)) != len(itos):
            raise ValueError("itos must not hold the same token twice")
        self.language = language
        self.itos = itos
        self.stoi = {token: i for i, token in enumerate(itos)}
        self.glue_left = frozenset(glue_left)
        self.glue_right = frozenset(glue_right)
        self.min_freq = min_freq
        self._tokenizer = _spacy_tokenizer(language)

    # -- building -------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, texts: Iterable[str], language: str, min_freq: int = 1,
              max_size: int | None = None) -> "WordTokenizer":
        """Build the vocabulary from ``texts`` (the training split only).

        Tokens seen fewer than ``min_freq`` times are left out (they become ``<unk>``). ``max_size`` caps the
        vocabulary size, specials included, keeping the most frequent tokens. Ids are assigned by decreasing
        frequency, ties broken alphabetically, so the same texts always give the same ids.
        """
        texts = _check_texts("texts", texts)
        check_positive_int("min_freq", min_freq)
        if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int)
                                     or max_size <= len(SPECIAL_TOKENS)):
            raise ValueError(f"max_size must be None or an integer > {len(SPECIAL_TOKENS)}, got {max_size!r}")
        counts, neighbours, touching = _count_tokens_and_glue(_spacy_tokenizer(language), texts)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq and t not in SPECIAL_TOKENS),
                        key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIAL_TOKENS)]
        glue_left, glue_right = _learn_glue(neighbours, touching)
        kept = set(ranked)
        return cls(language, list(SPECIAL_TOKENS) + ranked, glue_left & kept, glue_right & kept, min_freq)

    # -- the interface --------------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def tokenize(self, text: str) -> list[str]:
        """Text -> spaCy token strings (whitespace tokens dropped)."""
        return [t.text for t in self._tokenizer(_check_text(text)) if not t.is_space]

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(token, UNK_ID) for token in self.tokenize(text)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = _check_texts("texts", texts)
        return [[self.stoi.get(t.text, UNK_ID) for t in doc if not t.is_space]
                for doc in self._tokenizer.pipe(texts, batch_size=1000)]

    def decode(self, ids: Sequence[int]) -> str:
        tokens = [self.itos[i] for i in self._content_ids(ids)]
        return self.detokenize(tokens)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Join tokens with spaces, except where the learned glue says they touch.

        A straight double quote ``"`` alternates: the first of a pair sticks to the token after it, the
        second to the token before it.
        """
        pieces: list[str] = []
        quote_open = False
        previous_glues_right = False
        for i, token in enumerate(tokens):
            if token == _STRAIGHT_QUOTE:
                quote_open = not quote_open
                glues_left, glues_right = not quote_open, quote_open
            else:
                glues_left, glues_right = token in self.glue_left, token in self.glue_right
            if i and not (glues_left or previous_glues_right):
                pieces.append(" ")
            pieces.append(token)
            previous_glues_right = glues_right
        return "".join(pieces)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "word", "language": self.language, "itos": list(self.itos),
                "glue_left": sorted(self.glue_left), "glue_right": sorted(self.glue_right),
                "min_freq": self.min_freq}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "WordTokenizer":
        return cls(values["language"], values["itos"], values.get("glue_left", ()),
                   values.get("glue_right", ()), values.get("min_freq", 1))

    def __repr__(self) -> str:
        return f"WordTokenizer(language={self.language!r}, vocab_size={self.vocab_size})"


def _count_tokens_and_glue(tokenizer, texts: list[str]) -> tuple[Counter, Counter, Counter]:
    """Token counts, and for neighbouring tokens ``(a, b)`` how often they occur and how often they touch
    (no space between them), from the offsets spaCy records."""
    counts: Counter[str] = Counter()
    neighbours: Counter[tuple[str, str]] = Counter()
    touching: Counter[tuple[str, str]] = Counter()
    for doc in tokenizer.pipe(texts, batch_size=1000):
        tokens = [(t.text, t.idx) for t in doc if not t.is_space]
        words = [text for text, _ in tokens]
        counts.update(words)
        neighbours.update(zip(words, words[1:]))
        touching.update((a, b) for (a, start), (b, next_start) in zip(tokens, tokens[1:])
                        if next_start == start + len(a))
    return counts, neighbours, touching


def _learn_glue(neighbours: Counter, touching: Counter) -> tuple[set[str], set[str]]:
    """Tokens that mostly touch their left neighbour, then (among the remaining neighbours) their right one.

    The right side is measured only next to tokens that do not glue left, so that a word usually followed by
    ``.`` is not mistaken for a word that sticks to what follows it.
    """
    def majority(side: int, skip: set[str]) -> set[str]:
        tally: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
        for pair, total in neighbours.items():
            if pair[1 - side] in skip:
                continue
            tally[pair[side]][0] += touching[pair]
            tally[pair[side]][1] += total
        return {token for token, (touch, total) in tally.items() if 2 * touch > total}

    glue_left = majority(1, set())
    glue_right = majority(0, glue_left)
    return glue_left, glue_right


class SubwordTokenizer(Tokenizer):
    """Subword tokenizer (byte-pair encoding or unigram) from Hugging Face ``tokenizers``.

    Spaces are kept inside the tokens as ``▁`` (as in SentencePiece) and punctuation is split off, so
    ``decode(encode(text)) == text`` for any text made of characters seen in training (the text is first
    normalised: Unicode NFC, each run of whitespace becomes one space, no leading or trailing spaces).
    Unseen characters become ``<unk>``. Train one tokenizer on source and target texts together to get the
    paper's shared vocabulary.
    """

    def __init__(self, tokenizer) -> None:
        """Wrap a trained ``tokenizers.Tokenizer`` whose ids 0-3 are ``<pad> <unk> <bos> <eos>``."""
        from tokenizers import Tokenizer as HFTokenizer

        if not isinstance(tokenizer, HFTokenizer):
            raise TypeError(f"tokenizer must be a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        ids = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
        if ids != [PAD_ID, UNK_ID, BOS_ID, EOS_ID]:
            raise ValueError(f"the special tokens {list(SPECIAL_TOKENS)} must have ids 0-3, got {ids}")
        self._tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, model: str = "bpe",
              min_frequency: int = 2) -> "SubwordTokenizer":
        """Learn a ``model`` ("bpe" or "unigram") vocabulary of ``vocab_size`` ids (specials included)."""
        from tokenizers import Regex
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

        texts = _check_texts("texts", texts)
        check_positive_int("vocab_size", vocab_size)
        if vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must be larger than {len(SPECIAL_TOKENS)}, got {vocab_size}")
        specials = list(SPECIAL_TOKENS)
        if model == "bpe":
            tokenizer = HFTokenizer(models.BPE(unk_token=UNK))
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                          special_tokens=specials, show_progress=False)
        elif model == "unigram":
            tokenizer = HFTokenizer(models.Unigram())
            trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token=UNK,
                                              show_progress=False)
        else:
            raise ValueError(f"model must be 'bpe' or 'unigram', got {model!r}")
        tokenizer.normalizer = normalizers.Sequence(  # NFC, runs of whitespace -> one space, no outer spaces
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
        tokenizer.decoder = decoders.Metaspace()
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def tokenize(self, text: str) -> list[str]:
        """Text -> subword strings (``▁`` marks a preceding space)."""
        return self._tokenizer.encode(_check_text(text)).tokens

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(_check_text(text)).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(_check_texts("texts", texts))]

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(self._content_ids(ids), skip_special_tokens=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "subword", "tokenizer": self._tokenizer.to_str()}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "SubwordTokenizer":
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_str(values["tokenizer"]))

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self.vocab_size})"


_STRAIGHT_QUOTE = '"'  # opens and closes alike, so glue alternates (see WordTokenizer.detokenize)

_TOKENIZER_TYPES = {"word": WordTokenizer, "subword": SubwordTokenizer}


def tokenizer_from_dict(values: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from :meth:`Tokenizer.to_dict` output (e.g. stored in a checkpoint)."""
    if not isinstance(values, dict):
        raise TypeError(f"values must be a dict from Tokenizer.to_dict(), got {type(values).__name__}")
    kind = values.get("type")
    if kind not in _TOKENIZER_TYPES:
        raise ValueError(f"values['type'] must be one of {sorted(_TOKENIZER_TYPES)}, got {kind!r}")
    try:
        return _TOKENIZER_TYPES[kind].from_dict(values)
    except KeyError as missing:
        raise ValueError(f"tokenizer dict of type {kind!r} lacks the key {missing}") from None


# -- 3. Multi30k ----------------------------------------------------------------------------------------------

MULTI30K_LANGUAGES = ("en", "de")
MULTI30K_HUB_NAME = "bentrevett/multi30k"
DATA_DIR_ENV = "COMPANION_DATA_DIR"
_SPLIT_FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # our name -> file stem
_HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
_HOW_TO_GET = (
    "To get the data: download train.{en,de}.gz, val.{en,de}.gz and test_2016_flickr.{en,de}.gz from "
    "data/task1/raw of the multi30k/dataset repository on GitHub into one folder, then pass "
    f"--data-dir FOLDER (or data_dir=FOLDER) or set {DATA_DIR_ENV}=FOLDER; or go online so that the "
    f"Hugging Face `datasets` library can fetch {MULTI30K_HUB_NAME}."
)


from .errors import DataUnavailableError  # noqa: E402  (re-exported: its home was this module)


def load_multi30k(src: str = "en", tgt: str = "de",
                  data_dir: str | os.PathLike | None = None) -> dict[str, list[tuple[str, str]]]:
    """Multi30k (task 1) sentence pairs ``(source, target)`` for the splits ``train``, ``valid``, ``test``.

    ``test`` is test_2016_flickr. Where the data comes from, in order: ``data_dir`` (a folder of the raw files
    ``train.en.gz``, ``val.de.gz``, ..., plain ``.en``/``.de`` files also work), the folder named by the
    environment variable ``COMPANION_DATA_DIR``, the Hugging Face hub (``bentrevett/multi30k``). Offline
    without a local copy this raises :class:`DataUnavailableError` within seconds.

    Sizes of the real data: 29,000 / 1,014 / 1,000 pairs. Pairs with an empty side are dropped with a warning.
    """
    _check_language_pair(src, tgt)
    if data_dir is None and os.environ.get(DATA_DIR_ENV):
        data_dir = os.environ[DATA_DIR_ENV]
    if data_dir is not None:
        return {split: _read_local_split(Path(data_dir), stem, src, tgt) for split, stem in _SPLIT_FILES.items()}
    return _load_from_hub(src, tgt)


def _check_language_pair(src: object, tgt: object) -> None:
    for name, value in (("src", src), ("tgt", tgt)):
        if value not in MULTI30K_LANGUAGES:
            raise ValueError(f"{name} must be one of {list(MULTI30K_LANGUAGES)} for Multi30k, got {value!r}")
    if src == tgt:
        raise ValueError(f"src and tgt must be different languages, got {src!r} for both")


def _find_file(folder: Path, stem: str, language: str) -> Path | None:
    for name in (f"{stem}.{language}.gz", f"{stem}.{language}"):
        if (folder / name).is_file():
            return folder / name
    return None


def _read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, gzip-compressed if its name ends in ``.gz``, without line ends."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as handle:
        text = handle.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline at the end of the last line
    return [line.rstrip("\r") for line in lines]


def _read_local_split(folder: Path, stem: str, src: str, tgt: str) -> list[tuple[str, str]]:
    if not folder.is_dir():
        raise FileNotFoundError(f"data_dir {str(folder)!r} is not a folder. {_HOW_TO_GET}")
    paths = {lang: _find_file(folder, stem, lang) for lang in (src, tgt)}
    missing = [f"{stem}.{lang}.gz" for lang, path in paths.items() if path is None]
    if missing:
        raise FileNotFoundError(f"data_dir {str(folder)!r} lacks {', '.join(missing)}. {_HOW_TO_GET}")
    src_lines, tgt_lines = _read_lines(paths[src]), _read_lines(paths[tgt])
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"{paths[src]} has {len(src_lines)} lines but {paths[tgt]} has {len(tgt_lines)}; "
            "source and target files must be line-aligned (one sentence pair per line)")
    return _drop_empty_pairs(list(zip(src_lines, tgt_lines)), f"{paths[src].name}/{paths[tgt].name}")


def _drop_empty_pairs(pairs: list[tuple[str, str]], where: str) -> list[tuple[str, str]]:
    """Strip each sentence and drop pairs where either side is empty (warning with the count)."""
    stripped = [(s.strip(), t.strip()) for s, t in pairs]
    kept = [(s, t) for s, t in stripped if s and t]
    if len(kept) < len(stripped):
        warnings.warn(f"{where}: dropped {len(stripped) - len(kept)} pair(s) with an empty side", stacklevel=3)
    return kept


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _hub_address() -> tuple[str, int]:
    """Host and port of the Hugging Face hub (``HF_ENDPOINT`` if set)."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    default_port = 80 if url.scheme == "http" else 443
    return url.hostname or "huggingface.co", url.port or default_port


def _reachable(host: str, port: int, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout`` seconds.

    Runs in a daemon thread because name resolution ignores socket timeouts and may hang much longer.
    """
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _load_from_hub(src: str, tgt: str) -> dict[str, list[tuple[str, str]]]:
    """Multi30k from the Hugging Face hub, or :class:`DataUnavailableError` within seconds."""
    offline = _env_flag("HF_DATASETS_OFFLINE") or _env_flag("HF_HUB_OFFLINE")
    if not offline:
        host, port = _hub_address()
        if not _reachable(host, port):
            raise DataUnavailableError(
                f"Multi30k: no local folder given ({DATA_DIR_ENV} is not set) and the Hugging Face hub "
                f"({host}:{port}) cannot be reached. {_HOW_TO_GET} (If the dataset is already in your Hugging "
                "Face cache, set HF_DATASETS_OFFLINE=1 to use the cached copy.)")
    try:
        import datasets

        dataset = datasets.load_dataset(MULTI30K_HUB_NAME)
    except Exception as error:  # network, cache and format errors all mean: no data
        mode = "offline mode (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE) and no cached copy" if offline else "hub error"
        raise DataUnavailableError(
            f"Multi30k: no local folder given ({DATA_DIR_ENV} is not set) and loading {MULTI30K_HUB_NAME} "
            f"failed ({mode}: {type(error).__name__}: {error}). {_HOW_TO_GET}") from error
    return {split: _drop_empty_pairs(list(zip(dataset[hub][src], dataset[hub][tgt])), f"{MULTI30K_HUB_NAME}/{hub}")
            for split, hub in _HUB_SPLITS.items()}


# -- 4. id pairs and batches ----------------------------------------------------------------------------------


def encode_pairs(pairs: Sequence[tuple[str, str]], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer,
                 max_len: int | None = None) -> list[tuple[list[int], list[int]]]:
    """Text pairs -> id pairs ``(src_ids, tgt_ids)`` (no ``<bos>``/``<eos>``; batching adds them).

    Length limit: with ``max_len`` (the model's ``config.max_len``), each side is **truncated** to
    ``max_len - 1`` ids, so that with the ``<eos>`` (source, target output) or ``<bos>`` (target input) that
    :func:`make_batches` adds every row fits the model. A warning reports how many pairs were cut.
    """
    for name, tok in (("src_tokenizer", src_tokenizer), ("tgt_tokenizer", tgt_tokenizer)):
        if not isinstance(tok, Tokenizer):
            raise TypeError(f"{name} must be a companion Tokenizer, got {type(tok).__name__}")
    if max_len is not None:
        check_positive_int("max_len", max_len)
        if max_len < 2:
            raise ValueError(f"max_len must be at least 2 (one token plus <eos>), got {max_len}")
    pairs = list(pairs)
    for i, pair in enumerate(pairs[:1]):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"pairs[{i}] must be a (source, target) pair of strings, got {pair!r}")
    src_ids = src_tokenizer.encode_batch([s for s, _ in pairs])
    tgt_ids = tgt_tokenizer.encode_batch([t for _, t in pairs])
    encoded = list(zip(src_ids, tgt_ids))
    if max_len is not None:
        limit = max_len - 1
        cut = sum(len(s) > limit or len(t) > limit for s, t in encoded)
        if cut:
            warnings.warn(f"encode_pairs: truncated {cut} of {len(encoded)} pairs to max_len - 1 = {limit} "
                          "tokens per side", stacklevel=2)
            encoded = [(s[:limit], t[:limit]) for s, t in encoded]
    return encoded


@dataclass
class Batch:
    """One training batch, right-padded with ``pad_id``.

    Attributes:
        src: ``[batch, src_len]`` long, source ids + ``<eos>`` then padding.
        tgt_in: ``[batch, tgt_len]`` long, ``<bos>`` + target ids (the decoder input, teacher forcing).
        tgt_out: ``[batch, tgt_len]`` long, target ids + ``<eos>`` (what the decoder must predict).
        num_src_tokens, num_tgt_tokens: non-padding tokens in ``src`` and ``tgt_out``.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    num_src_tokens: int
    num_tgt_tokens: int

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        """A copy with every tensor on ``device``."""
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), self.num_src_tokens, self.num_tgt_tokens)

    def pin_memory(self) -> "Batch":
        """A copy in page-locked memory, for faster asynchronous copies to a GPU."""
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(),
                     self.num_src_tokens, self.num_tgt_tokens)


def make_batches(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int, *, pad_id: int = PAD_ID,
                 bos_id: int = BOS_ID, eos_id: int = EOS_ID, shuffle: bool = True, seed: int = 0) -> list[Batch]:
    """Group id pairs into :class:`Batch` es of similar length holding at most ``max_tokens`` tokens per side.

    Length bucketing: pairs are sorted by the length of their longer side (then by source length) and cut
    greedily into batches whose padded size ``batch * max(src_len, tgt_len)`` (lengths with the added
    ``<eos>``/``<bos>``) stays within ``max_tokens``; a single pair longer than that gets a batch of its own.
    On Multi30k about 90% of the padded positions hold real tokens. With ``shuffle`` the pairs of equal
    length and the order of the batches are shuffled with ``seed``; the result depends only on the arguments.
    Without ``shuffle`` the batches come from shortest to longest.
    """
    check_positive_int("max_tokens", max_tokens)
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"pairs[{i}] must be a (src_ids, tgt_ids) pair, got {type(pair).__name__}")
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    if shuffle:
        rng.shuffle(order)  # random order among pairs of equal length
    order.sort(key=lambda i: (max(len(pairs[i][0]), len(pairs[i][1])), len(pairs[i][0])))  # stable sort
    batches = [_collate([pairs[i] for i in chunk], pad_id, bos_id, eos_id)
               for chunk in _chunk_by_tokens(order, pairs, max_tokens)]
    if shuffle:
        rng.shuffle(batches)
    return batches


def _chunk_by_tokens(order: list[int], pairs: list, max_tokens: int) -> list[list[int]]:
    """Cut the sorted indices ``order`` into runs whose padded size stays within ``max_tokens``."""
    chunks: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = max(len(pairs[i][0]), len(pairs[i][1])) + 1  # + <eos> / <bos>
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            chunks.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        chunks.append(current)
    return chunks


def _pad(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad ``rows`` to one length -> ``[len(rows), longest]`` long tensor."""
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], dtype=torch.long)


def _collate(pairs: list, pad_id: int, bos_id: int, eos_id: int) -> Batch:
    src = _pad([list(s) + [eos_id] for s, _ in pairs], pad_id)
    tgt_in = _pad([[bos_id] + list(t) for _, t in pairs], pad_id)
    tgt_out = _pad([list(t) + [eos_id] for _, t in pairs], pad_id)
    return Batch(src, tgt_in, tgt_out, int((src != pad_id).sum()), int((tgt_out != pad_id).sum()))


# -- 5. synthetic tasks ---------------------------------------------------------------------------------------

SYNTHETIC_TASKS = ("copy", "reverse", "sort")


def synthetic_pairs(task: str, num_examples: int, *, min_len: int = 1, max_len: int = 10, vocab_size: int = 20,
                    seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Id pairs for a toy task: the target is the source copied, reversed or sorted.

    Source ids are drawn uniformly from ``range(4, vocab_size)`` (ids 0-3 are the specials) and lengths
    uniformly from ``[min_len, max_len]``; the same ``seed`` gives the same pairs.
    """
    transforms = {"copy": list, "reverse": lambda s: s[::-1], "sort": sorted}
    if task not in transforms:
        raise ValueError(f"task must be one of {list(SYNTHETIC_TASKS)}, got {task!r}")
    check_positive_int("num_examples", num_examples)
    check_positive_int("min_len", min_len)
    check_positive_int("max_len", max_len)
    if min_len > max_len:
        raise ValueError(f"min_len must be <= max_len, got min_len={min_len} and max_len={max_len}")
    check_positive_int("vocab_size", vocab_size)
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be larger than {len(SPECIAL_TOKENS)} (ids 0-3 are specials), "
                         f"got {vocab_size}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(num_examples):
        source = [rng.randrange(len(SPECIAL_TOKENS), vocab_size) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((source, list(transforms[task](source))))
    return pairs
