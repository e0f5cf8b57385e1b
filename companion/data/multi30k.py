"""Multi30k (English-German image captions): the splits from a local folder of the raw ``.gz`` files or from
the Hugging Face hub, with a fast and helpful failure when neither is available.

:func:`load_multi30k` drops pairs with an empty side (with a warning; the real Multi30k files have none), so it
never yields empty pairs.
"""

from __future__ import annotations

import os
import socket
import threading
import warnings
from pathlib import Path
from urllib.parse import urlparse

# DataUnavailableError is importable from here too; it is documented in companion.errors
__all__ = ["MULTI30K_LANGUAGES", "MULTI30K_HUB_NAME", "DATA_DIR_ENV", "load_multi30k"]

# -- Multi30k ----------------------------------------------------------------------------------------------

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


from ..errors import DataError, DataUnavailableError  # noqa: E402


def load_multi30k(
    src: str = "en",
    tgt: str = "de",
    data_dir: str | os.PathLike | None = None,
    *,
    splits: tuple[str, ...] | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """Multi30k (task 1) sentence pairs ``(source, target)`` for the splits ``train``, ``valid``, ``test``.

    ``test`` is test_2016_flickr. Where the data comes from, in order: ``data_dir`` (a folder of the raw files
    ``train.en.gz``, ``val.de.gz``, ..., plain ``.en``/``.de`` files also work), the folder named by the
    environment variable ``COMPANION_DATA_DIR``, the Hugging Face hub (``bentrevett/multi30k``). Offline
    without a local copy this raises :class:`~companion.errors.DataUnavailableError` within seconds.

    Sizes of the real data: 29,000 / 1,014 / 1,000 pairs. Pairs with an empty side are dropped with a warning.
    ``splits`` (e.g. ``("test",)``) reads only those splits of a local folder (the others' files need not exist).
    """
    _check_language_pair(src, tgt)
    wanted = tuple(_SPLIT_FILES) if splits is None else splits
    for split in wanted:
        if split not in _SPLIT_FILES:
            raise ValueError(f"splits must name some of {list(_SPLIT_FILES)}, got {split!r}")
    if data_dir is None and os.environ.get(DATA_DIR_ENV):
        data_dir = os.environ[DATA_DIR_ENV]
    if data_dir is not None:
        return {split: _read_local_split(Path(data_dir), _SPLIT_FILES[split], src, tgt) for split in wanted}
    hub = _load_from_hub(src, tgt)
    return {split: hub[split] for split in wanted}


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
    """The lines of a UTF-8 text file, gzip-compressed if its name ends in ``.gz``, without line ends (the
    reading rules of :func:`companion.data.corpus.read_lines`: lines end at ``\n`` only, a trailing ``\r`` and
    a byte-order mark are dropped, undecodable bytes or corrupt gzip are a DataError naming the file and line)."""
    from .corpus import read_lines  # corpus imports this module's hub helpers

    return list(read_lines(path))


def _read_local_split(folder: Path, stem: str, src: str, tgt: str) -> list[tuple[str, str]]:
    if not folder.is_dir():
        raise FileNotFoundError(f"data_dir {str(folder)!r} is not a folder. {_HOW_TO_GET}")
    paths = {lang: _find_file(folder, stem, lang) for lang in (src, tgt)}
    missing = [f"{stem}.{lang}.gz" for lang, path in paths.items() if path is None]
    if missing:
        raise FileNotFoundError(f"data_dir {str(folder)!r} lacks {', '.join(missing)}. {_HOW_TO_GET}")
    src_path, tgt_path = paths[src], paths[tgt]
    assert src_path is not None and tgt_path is not None
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise DataError(
            f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}; "
            "source and target files must be line-aligned (one sentence pair per line)"
        )
    pairs = _drop_empty_pairs(list(zip(src_lines, tgt_lines)), f"{src_path.name}/{tgt_path.name}")
    if not pairs:
        raise DataError(
            f"{src_path} and {tgt_path} hold no sentence pair ({len(src_lines)} line(s), none with text on both sides)"
        )
    return pairs


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
    """Multi30k from the Hugging Face hub, or :class:`~companion.errors.DataUnavailableError` within seconds."""
    offline = _env_flag("HF_DATASETS_OFFLINE") or _env_flag("HF_HUB_OFFLINE")
    if not offline:
        host, port = _hub_address()
        if not _reachable(host, port):
            raise DataUnavailableError(
                f"Multi30k: no local folder given ({DATA_DIR_ENV} is not set) and the Hugging Face hub "
                f"({host}:{port}) cannot be reached. {_HOW_TO_GET} (If the dataset is already in your Hugging "
                "Face cache, set HF_DATASETS_OFFLINE=1 to use the cached copy.)"
            )
    try:
        import datasets

        dataset = datasets.load_dataset(MULTI30K_HUB_NAME)
    except Exception as error:  # network, cache and format errors all mean: no data
        mode = "offline mode (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE) and no cached copy" if offline else "hub error"
        raise DataUnavailableError(
            f"Multi30k: no local folder given ({DATA_DIR_ENV} is not set) and loading {MULTI30K_HUB_NAME} "
            f"failed ({mode}: {type(error).__name__}: {error}). {_HOW_TO_GET}"
        ) from error
    return {
        split: _drop_empty_pairs(list(zip(dataset[hub][src], dataset[hub][tgt])), f"{MULTI30K_HUB_NAME}/{hub}")
        for split, hub in _HUB_SPLITS.items()
    }
