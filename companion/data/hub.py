"""Parallel corpora held by Hugging Face ``datasets``: a dataset on the hub (``wmt14``/``de-en``, ``iwslt2017``,
``opus_books``, ...), one saved with ``save_to_disk``, or local JSON files; each a
:class:`~companion.data.corpus.ParallelCorpus` like the file sources of :mod:`companion.data.corpus`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import DataError, DataUnavailableError
from .corpus import (
    _DATA_EXTRA,
    HUB_SPLIT_NAMES,
    ParallelCorpus,
    _check_pair_of_languages,
    _check_split_map,
    _existing_file,
    file_identity,
)
from .multi30k import _env_flag, _hub_address, _reachable

__all__ = ["DatasetCorpus", "hub_corpus", "disk_corpus", "json_corpus"]

# -- Hugging Face datasets ---------------------------------------------------------------------------------


def _import_datasets():
    try:
        import datasets
    except ImportError as error:
        raise ImportError(f"reading a Hugging Face dataset needs the `datasets` package: {_DATA_EXTRA}") from error
    return datasets


class DatasetCorpus(ParallelCorpus):
    """A corpus held by a Hugging Face ``datasets.DatasetDict`` (Arrow files, memory-mapped: iterating holds one
    batch of rows in memory).

    Two layouts work: a ``translation`` column of ``{lang: text}`` dicts (``wmt14``, ``iwslt2017``,
    ``opus_books``), or one column per language (``bentrevett/multi30k``). Build one with :func:`hub_corpus`,
    :func:`disk_corpus` or :func:`json_corpus`.
    """

    def __init__(
        self,
        dataset: Any,
        src: str,
        tgt: str,
        splits: Mapping[str, str],
        description: dict[str, Any],
        local_files: Mapping[str, list[Path]] | None = None,
    ) -> None:
        self.src, self.tgt = src, tgt
        self._dataset = dataset
        self._description = dict(description)
        self._split_names = {ours: theirs for ours, theirs in splits.items() if theirs in dataset}
        self._local_files = dict(local_files or {})
        if not self._split_names:
            raise DataError(
                f"{self._where()} has none of the splits {sorted(set(splits.values()))}; it has {sorted(dataset)}"
            )
        for theirs in self._split_names.values():
            self._check_languages(theirs)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self._split_names)

    def _where(self, split: str | None = None) -> str:
        what = ", ".join(f"{k}={v!r}" for k, v in self._description.items() if v is not None and k != "kind")
        where = f"dataset {self._description['kind']}({what})"
        return where if split is None else f"{where} split {self._split_names.get(split, split)!r}"

    def _table(self, split: str):
        if split not in self._split_names:
            raise self._unknown_split(split)
        return self._dataset[self._split_names[split]]

    def _layout(self, hf_split: str) -> tuple[str, list[str]]:
        """("translation", languages) or ("columns", column names)."""
        table = self._dataset[hf_split]
        if "translation" in table.column_names:
            feature = table.features["translation"]
            languages = getattr(feature, "languages", None) or (list(feature) if isinstance(feature, dict) else [])
            return "translation", sorted(languages)
        return "columns", list(table.column_names)

    def _check_languages(self, hf_split: str) -> None:
        layout, languages = self._layout(hf_split)
        absent = [lang for lang in (self.src, self.tgt) if lang not in languages]
        if absent:
            holds = "its translation column holds the languages" if layout == "translation" else "its columns are"
            raise DataError(
                f"{self._where()} split {hf_split!r} has no {' and no '.join(repr(a) for a in absent)}: "
                f"{holds} {languages}"
            )

    def _raw_pairs(self, split: str) -> Iterator[tuple[str, str]]:
        table = self._table(split)
        layout, _ = self._layout(self._split_names[split])
        columns = ["translation"] if layout == "translation" else [self.src, self.tgt]
        for rows in table.select_columns(columns).iter(batch_size=1000):
            if layout == "translation":
                for item in rows["translation"]:
                    yield _as_text(item.get(self.src)), _as_text(item.get(self.tgt))
            else:
                for source, target in zip(rows[self.src], rows[self.tgt]):
                    yield _as_text(source), _as_text(target)

    def _split_identity(self, split: str) -> dict[str, Any]:
        table = self._table(split)
        files = [file_identity(path) for path in self._local_files.get(split, [])]
        return {
            "dataset": self._description,
            "dataset_split": self._split_names[split],
            "fingerprint": getattr(table, "_fingerprint", None),
            "rows": table.num_rows,
        } | ({"files": files} if files else {})

    def describe(self, split: str) -> str:
        return self._where(split)

    def __repr__(self) -> str:
        return f"DatasetCorpus({self._where()}, src={self.src!r}, tgt={self.tgt!r}, splits={list(self.splits)})"


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def hub_corpus(
    name: str,
    config: str | None = None,
    *,
    src: str,
    tgt: str,
    splits: Mapping[str, str] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetCorpus:
    """A dataset from the Hugging Face hub, ``datasets.load_dataset(name, config)`` (e.g. ``"wmt14", "de-en"``).

    ``splits`` maps our names to the dataset's (default ``train``/``validation``/``test`` as
    ``train``/``valid``/``test``). Offline (the hub unreachable, or ``HF_DATASETS_OFFLINE=1`` with no cached
    copy) this raises :class:`~companion.errors.DataUnavailableError` within seconds.
    """
    src, tgt = _check_pair_of_languages(src, tgt, distinct=True)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a dataset name such as 'wmt14', got {name!r}")
    split_map = _check_split_map("splits", HUB_SPLIT_NAMES if splits is None else splits)
    datasets = _import_datasets()
    offline = _env_flag("HF_DATASETS_OFFLINE") or _env_flag("HF_HUB_OFFLINE")
    label = name if config is None else f"{name} ({config})"
    if not offline:
        host, port = _hub_address()
        if not _reachable(host, port):
            raise DataUnavailableError(
                f"dataset {label}: there is no folder {str(Path(name).absolute())!r} (a dataset saved with "
                f"save_to_disk), and the Hugging Face hub ({host}:{port}) cannot be reached to fetch {name!r} from "
                "it. Check the folder's path, go online, or use a local copy (--hf-dataset FOLDER or disk_corpus "
                "for a save_to_disk folder; --data-dir or --train, folder_corpus or files_corpus for text files); "
                "if the dataset is already in your Hugging Face cache, set HF_DATASETS_OFFLINE=1 to use it."
            )
    try:
        dataset = datasets.load_dataset(name, config, cache_dir=None if cache_dir is None else str(cache_dir))
    except Exception as error:  # network, cache, unknown names: all mean no data
        mode = "offline mode (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE) and no cached copy" if offline else "hub error"
        raise DataUnavailableError(
            f"dataset {label}: loading failed ({mode}: {type(error).__name__}: {error})"
        ) from error
    return DatasetCorpus(
        _as_dict(datasets, dataset), src, tgt, split_map, {"kind": "hub", "name": name, "config": config}
    )


def disk_corpus(
    path: str | os.PathLike, *, src: str, tgt: str, splits: Mapping[str, str] | None = None
) -> DatasetCorpus:
    """A dataset saved with ``save_to_disk`` (``datasets.load_from_disk``); a single ``Dataset`` is ``train``."""
    src, tgt = _check_pair_of_languages(src, tgt, distinct=True)
    split_map = _check_split_map("splits", HUB_SPLIT_NAMES if splits is None else splits)
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"dataset folder {str(folder)!r} is not a folder")
    datasets = _import_datasets()
    try:
        dataset = datasets.load_from_disk(str(folder))
    except FileNotFoundError as error:
        raise DataError(f"{folder} is not a dataset saved with save_to_disk ({error})") from None
    dataset = _as_dict(datasets, dataset, single_split=split_map.get("train", "train"))
    arrow = {
        ours: sorted(Path(f["filename"]) for f in dataset[theirs].cache_files)
        for ours, theirs in split_map.items()
        if theirs in dataset
    }
    return DatasetCorpus(dataset, src, tgt, split_map, {"kind": "disk", "path": str(folder.resolve())}, arrow)


def json_corpus(
    src: str,
    tgt: str,
    *,
    train: str | os.PathLike | list | None = None,
    valid: str | os.PathLike | list | None = None,
    test: str | os.PathLike | list | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> DatasetCorpus:
    """Local JSON / JSON-lines files per split (``load_dataset("json", data_files=...)``), one object per pair:
    ``{"translation": {"de": ..., "en": ...}}`` or ``{"de": ..., "en": ...}``. Works offline."""
    src, tgt = _check_pair_of_languages(src, tgt, distinct=True)
    files: dict[str, list[Path]] = {}
    for split, given in (("train", train), ("valid", valid), ("test", test)):
        if given is not None:
            given_paths = [given] if isinstance(given, (str, os.PathLike)) else list(given)
            files[split] = [_existing_file(split, p).resolve() for p in given_paths]
    if not files:
        raise ValueError("json_corpus needs at least one of train=, valid=, test= (JSON or JSON-lines files)")
    datasets = _import_datasets()
    tables = {}
    for split, paths in files.items():  # one split at a time: each may have its own layout
        try:
            tables[split] = datasets.load_dataset(
                "json",
                data_files=[str(p) for p in paths],
                split="train",
                cache_dir=None if cache_dir is None else str(cache_dir),
            )
        except Exception as error:  # malformed JSON surfaces as various datasets/pyarrow errors
            cause = f" ({error.__cause__})" if error.__cause__ else ""
            raise DataError(f"JSON data files {[str(p) for p in paths]} of split {split!r}: {error}{cause}") from error
    dataset = datasets.DatasetDict(tables)
    description = {"kind": "json", "files": {split: [str(p) for p in paths] for split, paths in files.items()}}
    return DatasetCorpus(dataset, src, tgt, {s: s for s in files}, description, files)


def _as_dict(datasets: Any, dataset: Any, single_split: str = "train") -> Any:
    """A DatasetDict (a single Dataset becomes the split ``single_split``)."""
    if isinstance(dataset, datasets.Dataset):
        return datasets.DatasetDict({single_split: dataset})
    return dataset
