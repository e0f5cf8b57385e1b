"""Parallel corpora from anywhere, read as a stream: a folder of ``{split}.{lang}`` files, explicit files per
split or a TSV per split; :mod:`companion.data.hub` adds Hugging Face datasets (from the hub, saved with
``save_to_disk``, or local JSON) behind the same interface.

Every source is a :class:`ParallelCorpus`: its languages ``src``/``tgt`` (any codes), the ``splits`` it has,
``pairs(split)``, an *iterator* of ``(source, target)`` strings that holds one line at a time in memory, and
``identity(split)``, a JSON-able description of exactly which data that is (file paths, sizes and SHA-256 of
their bytes; a dataset's fingerprint), which keys the token caches of :mod:`companion.data.store`.

Reading rules (the same as :func:`companion.data.multi30k.load_multi30k`): files are UTF-8, gzip-compressed if the name
ends in ``.gz``; a byte-order mark at the start is dropped; lines end at ``\\n`` only (a trailing ``\\r`` is
dropped); each sentence is stripped and pairs with an empty side are dropped with one warning giving the count.
Undecodable bytes, corrupt gzip, files that are not line-aligned (the first line where one file has a line and
the other has none) and a corpus without a single pair are :class:`~companion.errors.DataError` s naming the
files and, where there is one, the line.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

from ..errors import DataError
from .multi30k import _find_file

__all__ = [
    "ParallelCorpus",
    "FileCorpus",
    "HeldOutCorpus",
    "MULTI30K_SPLIT_STEMS",
    "HUB_SPLIT_NAMES",
    "folder_corpus",
    "files_corpus",
    "tsv_corpus",
    "read_lines",
    "file_identity",
]

MULTI30K_SPLIT_STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # our name -> file stem
HUB_SPLIT_NAMES = {"train": "train", "valid": "validation", "test": "test"}  # our name -> Hugging Face split
_DATA_EXTRA = 'pip install "attention-executed[data]"'
_LANGUAGE_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,34}")
_HASH_CHUNK = 1 << 20

# -- reading files -----------------------------------------------------------------------------------------


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """The lines of a UTF-8 text file (gzip-compressed if its name ends in ``.gz``), one at a time, without
    line ends.

    Lines end at ``\\n`` only (a trailing ``\\r`` is dropped); a byte-order mark at the start is dropped.
    Undecodable bytes are a :class:`~companion.errors.DataError` naming the file, the line and the bytes; so
    are corrupt, truncated or mislabelled gzip files.
    """
    path = Path(path)
    offset = 0
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                yield _decode_line(raw, path, number, offset)
                offset += len(raw)
    except gzip.BadGzipFile as error:
        problem = (
            "is not gzip-compressed (no gzip header); rename it without .gz if it is plain text"
            if "Not a gzipped file" in str(error)
            else f"is a corrupt gzip file ({error})"
        )
        raise DataError(f"data file {path} {problem}") from None
    except EOFError:
        raise DataError(
            f"data file {path} is truncated: its gzip stream ends before the end marker "
            "(an interrupted download or copy?); fetch it again"
        ) from None
    except zlib.error as error:
        raise DataError(
            f"data file {path} is a corrupt gzip file (the compressed data is damaged: {error}); fetch it again"
        ) from None
    except OSError as error:
        raise DataError(f"data file {path} cannot be read: {error.strerror or error}") from None


def _decode_line(raw: bytes, path: Path, number: int, offset: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"data file {path}, line {number}: not UTF-8 text (byte(s) "
            f"{raw[error.start : error.end]!r} at byte offset {offset + error.start})"
        ) from None
    if number == 1:
        text = text.removeprefix("\ufeff")
    return text.removesuffix("\n").rstrip("\r")


def _aligned_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """Raw line pairs of two line-aligned files; a DataError at the first line only one of them has."""
    missing = object()
    for number, (source, target) in enumerate(
        zip_longest(read_lines(src_path), read_lines(tgt_path), fillvalue=missing), start=1
    ):
        if source is missing or target is missing:
            longer, shorter = (tgt_path, src_path) if source is missing else (src_path, tgt_path)
            raise DataError(
                f"{src_path} and {tgt_path} are not line-aligned: {longer} has a line {number} but {shorter} "
                f"ends after {number - 1} line(s); source and target files must hold one sentence pair per line"
            )
        yield source, target  # type: ignore[misc]


def _tsv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(
                f"data file {path}, line {number}: expected source TAB target (exactly one tab), "
                f"found {len(fields) - 1} tab(s)"
            )
        yield fields[0], fields[1]


def _clean_pairs(raw: Iterator[tuple[str, str]], where: str) -> Iterator[tuple[str, str]]:
    """Strip each sentence, drop pairs with an empty side (one warning with the count at the end) and raise a
    DataError naming ``where`` if not a single pair is left."""
    kept = dropped = 0
    for source, target in raw:
        source, target = source.strip(), target.strip()
        if source and target:
            kept += 1
            yield source, target
        else:
            dropped += 1
    if dropped:
        # stacklevel 1: one place, so that Python's default filter shows it once although a run reads the corpus
        # more than once (vocabularies, then token ids); a generator's caller differs between those readings
        warnings.warn(f"{where}: dropped {dropped} pair(s) with an empty side", stacklevel=1)
    if not kept:
        raise DataError(f"{where} hold(s) no sentence pair ({dropped} pair(s), none with text on both sides)")


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> SHA-256, for this process


def file_identity(path: Path) -> dict[str, Any]:
    """Absolute path, size and streamed SHA-256 of the file's bytes (memoised per size and modification time)."""
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except OSError as error:
        raise DataError(f"data file {path} cannot be read: {error.strerror or error}") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
        _DIGESTS[key] = digest.hexdigest()
    return {"path": str(path), "bytes": stat.st_size, "sha256": _DIGESTS[key]}


# -- the abstraction ---------------------------------------------------------------------------------------


class ParallelCorpus:
    """A parallel corpus: languages ``src`` and ``tgt``, named ``splits``, streamed sentence pairs.

    Subclasses implement ``_raw_pairs``, ``_split_identity``, :meth:`describe` and ``splits``.
    """

    src: str
    tgt: str

    @property
    def splits(self) -> tuple[str, ...]:
        """The names of the splits this corpus has (e.g. ``("train", "valid")``)."""
        raise NotImplementedError

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        """The ``(source, target)`` pairs of ``split``, stripped, none with an empty side, one at a time."""
        return _clean_pairs(self._raw_pairs(split), self.describe(split))

    def texts(self, split: str, side: str = "both") -> Iterator[str]:
        """The sentences of ``split``: ``side`` "src", "tgt" or "both" (source then target of each pair), to
        train a tokenizer without holding the corpus in memory."""
        if side not in ("src", "tgt", "both"):
            raise ValueError(f"side must be 'src', 'tgt' or 'both', got {side!r}")
        pairs = self.pairs(split)
        if side == "both":
            return (text for pair in pairs for text in pair)
        return (pair[0 if side == "src" else 1] for pair in pairs)

    def identity(self, split: str) -> dict[str, Any]:
        """A JSON-able dict that identifies the data of ``split`` (what the token cache is keyed by)."""
        return {"kind": type(self).__name__, "src": self.src, "tgt": self.tgt, "split": split} | (
            self._split_identity(split)
        )

    def describe(self, split: str) -> str:
        """Where ``split`` comes from, for messages."""
        raise NotImplementedError

    def _raw_pairs(self, split: str) -> Iterator[tuple[str, str]]:
        raise NotImplementedError

    def _split_identity(self, split: str) -> dict[str, Any]:
        raise NotImplementedError

    def _unknown_split(self, split: str) -> DataError:
        return DataError(f"{self!r} has no split {split!r}; it has {list(self.splits)}")


def _check_language(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a language code (str), got {type(value).__name__}")
    if not _LANGUAGE_CODE.fullmatch(value):
        raise ValueError(
            f"{name} must be a language code such as 'en', 'fr' or 'zh' (letters, digits, - or _), got {value!r}"
        )
    return value


def _check_pair_of_languages(src: object, tgt: object, *, distinct: bool) -> tuple[str, str]:
    src, tgt = _check_language("src", src), _check_language("tgt", tgt)
    if distinct and src == tgt:
        raise ValueError(f"src and tgt must be different languages, got {src!r} for both")
    return src, tgt


# -- files ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AlignedFiles:
    src_path: Path
    tgt_path: Path

    def raw_pairs(self) -> Iterator[tuple[str, str]]:
        return _aligned_pairs(self.src_path, self.tgt_path)

    def identity(self) -> dict[str, Any]:
        return {"format": "aligned", "src_file": file_identity(self.src_path), "tgt_file": file_identity(self.tgt_path)}

    def describe(self) -> str:
        return f"{self.src_path} and {self.tgt_path}"


@dataclass(frozen=True)
class _TsvFile:
    path: Path

    def raw_pairs(self) -> Iterator[tuple[str, str]]:
        return _tsv_pairs(self.path)

    def identity(self) -> dict[str, Any]:
        return {"format": "tsv", "file": file_identity(self.path)}

    def describe(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class _MissingSplit:
    reason: str


_SplitSource = _AlignedFiles | _TsvFile | _MissingSplit


class FileCorpus(ParallelCorpus):
    """A corpus of local text files, per split two line-aligned files or one TSV file.

    Build one with :func:`folder_corpus`, :func:`files_corpus` or :func:`tsv_corpus`.
    """

    def __init__(self, src: str, tgt: str, sources: Mapping[str, _SplitSource]) -> None:
        self.src, self.tgt = src, tgt
        self._sources = dict(sources)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(name for name, source in self._sources.items() if not isinstance(source, _MissingSplit))

    def _source(self, split: str) -> _AlignedFiles | _TsvFile:
        source = self._sources.get(split)
        if source is None:
            raise self._unknown_split(split)
        if isinstance(source, _MissingSplit):
            raise FileNotFoundError(source.reason)
        return source

    def _raw_pairs(self, split: str) -> Iterator[tuple[str, str]]:
        return self._source(split).raw_pairs()

    def _split_identity(self, split: str) -> dict[str, Any]:
        return self._source(split).identity()

    def describe(self, split: str) -> str:
        return self._source(split).describe()

    def __repr__(self) -> str:
        return f"FileCorpus(src={self.src!r}, tgt={self.tgt!r}, splits={list(self.splits)})"


class HeldOutCorpus(ParallelCorpus):
    """``corpus`` with a validation split made of ``count`` of its training pairs, spread evenly through them.

    For data that come without a validation split (one pair of files, a dataset with only ``train``): the pairs
    at positions ``(2j + 1) * T // (2 * count)``, ``j = 0 .. count - 1``, of the ``T`` training pairs (after
    empty pairs are dropped) become ``valid``, and ``train`` is the rest, in order; other splits are the corpus's
    own. The choice depends only on ``T`` and ``count``, so every process and every later run (``--resume``,
    ``companion evaluate --split valid``) finds the same pairs. Counting ``T`` reads the training split once,
    streamed. Both splits' identities name the training data, ``held_out`` and which part they are, so the
    token stores of the two parts and of the whole corpus never mix.

    Raises ValueError when ``count`` is not a positive integer, :class:`~companion.errors.DataError` when the
    corpus already has a validation split or has no more than ``count`` training pairs.
    """

    def __init__(self, corpus: ParallelCorpus, count: int) -> None:
        if not isinstance(corpus, ParallelCorpus):
            raise TypeError(f"corpus must be a ParallelCorpus, got {type(corpus).__name__}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive integer (pairs to hold out), got {count!r}")
        if "valid" in corpus.splits:
            raise DataError(
                f"{corpus!r} has a validation split already ({corpus.describe('valid')}); hold out training pairs "
                "only from data that have none"
            )
        self.src, self.tgt = corpus.src, corpus.tgt
        self._corpus, self._count = corpus, count
        self._positions: frozenset[int] | None = None

    @property
    def splits(self) -> tuple[str, ...]:
        return (*self._corpus.splits, "valid")

    def held_out_positions(self) -> frozenset[int]:
        """The positions, among the training pairs, of the pairs held out (read once, then kept)."""
        if self._positions is None:
            total = sum(1 for _ in self._corpus.pairs("train"))
            if total <= self._count:
                raise DataError(
                    f"cannot hold out {self._count:,} pairs as a validation split: {self._corpus.describe('train')} "
                    f"has {total:,} training pairs, and at least one must stay for training"
                )
            self._positions = frozenset((2 * j + 1) * total // (2 * self._count) for j in range(self._count))
        return self._positions

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        if split not in ("train", "valid"):
            return self._corpus.pairs(split)
        held, keep = self.held_out_positions(), split == "valid"
        return (pair for i, pair in enumerate(self._corpus.pairs("train")) if (i in held) == keep)

    def identity(self, split: str) -> dict[str, Any]:
        if split not in ("train", "valid"):
            return self._corpus.identity(split)
        return self._corpus.identity("train") | {"held_out": self._count, "part": split}

    def describe(self, split: str) -> str:
        if split not in ("train", "valid"):
            return self._corpus.describe(split)
        whole = self._corpus.describe("train")
        if split == "valid":
            return f"{_pairs(self._count)} held out from {whole}"
        return f"{whole} without the {_pairs(self._count)} held out for validation"

    def __repr__(self) -> str:
        return f"HeldOutCorpus({self._corpus!r}, count={self._count})"


def folder_corpus(folder: str | os.PathLike, src: str, tgt: str, splits: Mapping[str, str] | None = None) -> FileCorpus:
    """A folder of ``{stem}.{lang}`` files (plain or ``.gz``) for any language codes ``src`` and ``tgt``.

    ``splits`` maps our split names to file stems; the default is Multi30k's
    ``{"train": "train", "valid": "val", "test": "test_2016_flickr"}``. A split whose files are missing is only
    an error (FileNotFoundError naming the file) when it is read, so a folder without a test split trains.
    """
    src, tgt = _check_pair_of_languages(src, tgt, distinct=True)
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"data folder {str(folder)!r} is not a folder")
    stems = _check_split_map("splits", MULTI30K_SPLIT_STEMS if splits is None else splits)
    sources: dict[str, _SplitSource] = {}
    for split, stem in stems.items():
        paths = {lang: _find_file(folder, stem, lang) for lang in (src, tgt)}
        missing = [f"{stem}.{lang} (or {stem}.{lang}.gz)" for lang, path in paths.items() if path is None]
        if missing:
            sources[split] = _MissingSplit(
                f"data folder {str(folder)!r} lacks {' and '.join(missing)} for split {split!r}"
            )
        else:
            sources[split] = _AlignedFiles(paths[src], paths[tgt])  # type: ignore[arg-type]
    return FileCorpus(src, tgt, sources)


def files_corpus(
    src: str,
    tgt: str,
    *,
    train: tuple[str | os.PathLike, str | os.PathLike] | None = None,
    valid: tuple[str | os.PathLike, str | os.PathLike] | None = None,
    test: tuple[str | os.PathLike, str | os.PathLike] | None = None,
) -> FileCorpus:
    """Explicit ``(source_file, target_file)`` pairs per split (plain or ``.gz``, line-aligned); at least one."""
    src, tgt = _check_pair_of_languages(src, tgt, distinct=False)
    sources: dict[str, _SplitSource] = {}
    for split, files in (("train", train), ("valid", valid), ("test", test)):
        if files is None:
            continue
        if isinstance(files, (str, os.PathLike)) or len(files) != 2:
            raise TypeError(f"{split} must be a (source_file, target_file) pair, got {files!r}")
        sources[split] = _AlignedFiles(_existing_file(f"{split}[0]", files[0]), _existing_file(f"{split}[1]", files[1]))
    if not sources:
        raise ValueError("files_corpus needs at least one of train=, valid=, test= (a (source, target) pair of files)")
    return FileCorpus(src, tgt, sources)


def tsv_corpus(
    src: str,
    tgt: str,
    *,
    train: str | os.PathLike | None = None,
    valid: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
) -> FileCorpus:
    """One TSV file per split (plain or ``.gz``): ``source TAB target`` on each line; at least one split."""
    src, tgt = _check_pair_of_languages(src, tgt, distinct=False)
    sources: dict[str, _SplitSource] = {
        split: _TsvFile(_existing_file(split, path))
        for split, path in (("train", train), ("valid", valid), ("test", test))
        if path is not None
    }
    if not sources:
        raise ValueError("tsv_corpus needs at least one of train=, valid=, test= (a TSV file)")
    return FileCorpus(src, tgt, sources)


def _pairs(count: int) -> str:
    return f"{count:,} pair" + ("" if count == 1 else "s")


def _existing_file(name: str, path: object) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path, got {type(path).__name__}")
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"{name}: {str(path)!r} is a folder, not a data file")
    if not path.is_file():
        raise FileNotFoundError(f"{name}: data file {str(path)!r} does not exist")
    return path


def _check_split_map(name: str, splits: object) -> dict[str, str]:
    if not isinstance(splits, Mapping) or not splits:
        raise TypeError(f"{name} must be a non-empty dict of split name -> name in the source, got {splits!r}")
    for key, value in splits.items():
        if not (isinstance(key, str) and isinstance(value, str) and key and value):
            raise TypeError(f"{name} must map split names (str) to names in the source (str), got {key!r}: {value!r}")
    return dict(splits)
