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
__all__ = ["MULTI30K_LANGUAGES", "MULTI30K_HUB_NAME", "MULTI30K_UNSEEN_TESTS", "DATA_DIR_ENV", "load_multi30k"]

# -- Multi30k ----------------------------------------------------------------------------------------------

MULTI30K_LANGUAGES = ("en", "de")
MULTI30K_HUB_NAME = "bentrevett/multi30k"
DATA_DIR_ENV = "COMPANION_DATA_DIR"
_SPLIT_FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # our name -> file stem
_HUB_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
# The later test sets of Multi30k task 1 (shared tasks of 2017 and 2018): neither the Hugging Face copy nor the
# book's runs use them, so they measure how a model does on captions that played no part in training or in
# choosing its settings. Each split's name is its file stem in data/task1/raw of the multi30k/dataset repository.
MULTI30K_UNSEEN_TESTS = ("test_2017_flickr", "test_2018_flickr", "test_2017_mscoco")
_SACREBLEU_SETS = {"test_2017_flickr": "multi30k/2017", "test_2018_flickr": "multi30k/2018"}  # what sacreBLEU fetches
_SACREBLEU_HOST = ("raw.githubusercontent.com", 443)  # where sacreBLEU downloads these two from
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

    ``splits`` may also name the later test sets (``MULTI30K_UNSEEN_TESTS``: ``test_2017_flickr``,
    ``test_2018_flickr``, ``test_2017_mscoco``), which are never loaded unless named. Each is read from the
    folder when it holds the set's files (``test_2017_flickr.en.gz``, ...); otherwise the two Flickr sets are
    fetched once through sacreBLEU's test-set downloader (its ``multi30k/2017`` and ``multi30k/2018``, cached in
    ``~/.sacrebleu`` or ``$SACREBLEU``), and offline, or for the MSCOCO set, which sacreBLEU has no entry for, a
    :class:`~companion.errors.DataUnavailableError` says where to download the files.
    """
    _check_language_pair(src, tgt)
    wanted = tuple(_SPLIT_FILES) if splits is None else splits
    for split in wanted:
        if split not in _SPLIT_FILES and split not in MULTI30K_UNSEEN_TESTS:
            raise ValueError(f"splits must name some of {[*_SPLIT_FILES, *MULTI30K_UNSEEN_TESTS]}, got {split!r}")
    if data_dir is None and os.environ.get(DATA_DIR_ENV):
        data_dir = os.environ[DATA_DIR_ENV]
    folder = None if data_dir is None else Path(data_dir)
    standard = [split for split in wanted if split in _SPLIT_FILES]
    if folder is not None:
        loaded = {split: _read_local_split(folder, _SPLIT_FILES[split], src, tgt) for split in standard}
    else:
        hub = _load_from_hub(src, tgt) if standard else {}
        loaded = {split: hub[split] for split in standard}
    for split in wanted:
        if split in MULTI30K_UNSEEN_TESTS:
            loaded[split] = _load_unseen_test(split, src, tgt, folder)
    return {split: loaded[split] for split in wanted}


def _check_language_pair(src: object, tgt: object) -> None:
    for name, value in (("src", src), ("tgt", tgt)):
        if value not in MULTI30K_LANGUAGES:
            raise ValueError(f"{name} must be one of {list(MULTI30K_LANGUAGES)} for Multi30k, got {value!r}")
    if src == tgt:
        raise ValueError(f"src and tgt must be different languages, got {src!r} for both")


def is_multi30k_folder(folder: str | os.PathLike, src: str, tgt: str) -> bool:
    """Whether ``folder`` is read as Multi30k for ``src``/``tgt``: the languages are en and de, and the folder is not
    a training corpus of one's own, i.e. one that holds training files (``train.en``, ``train.de``, plain or
    ``.gz``) and no validation file of Multi30k's (``val.en``, ``val.de``: one of the two is enough to make it
    Multi30k, whose reading then names the other as missing); of such a corpus only the training split is needed.
    A missing folder is Multi30k (reading it says where to get the data), and so is a folder of test sets alone
    (e.g. the later ones, ``MULTI30K_UNSEEN_TESTS``, to score a Multi30k model on)."""
    if {src, tgt} != set(MULTI30K_LANGUAGES):
        return False
    path = Path(folder)
    if not path.is_dir():
        return True
    holds_train = all(_find_file(path, _SPLIT_FILES["train"], lang) for lang in (src, tgt))
    return not holds_train or any(_find_file(path, _SPLIT_FILES["valid"], lang) for lang in (src, tgt))


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


def _load_unseen_test(name: str, src: str, tgt: str, folder: Path | None) -> list[tuple[str, str]]:
    """One of ``MULTI30K_UNSEEN_TESTS``: from ``folder`` when it holds both files, else through sacreBLEU."""
    if folder is not None and (not folder.is_dir() or all(_find_file(folder, name, lang) for lang in (src, tgt))):
        return _read_local_split(folder, name, src, tgt)  # (a missing folder: the usual FileNotFoundError)
    where = "no local folder given" if folder is None else f"data_dir {str(folder)!r} lacks {name}.{{en,de}}.gz"
    how = (
        f"Download {name}.en.gz and {name}.de.gz from data/task1/raw of the multi30k/dataset repository on GitHub "
        f"into a folder and pass it as --data-dir FOLDER (or data_dir=FOLDER, or {DATA_DIR_ENV}=FOLDER)."
    )
    if name not in _SACREBLEU_SETS:
        raise DataUnavailableError(f"Multi30k {name}: {where}, and sacreBLEU has no entry for this test set. {how}")
    return _fetch_with_sacrebleu(name, src, tgt, f"Multi30k {name}: {where}", how)


def _fetch_with_sacrebleu(name: str, src: str, tgt: str, where: str, how: str) -> list[tuple[str, str]]:
    """A Flickr test set through sacreBLEU's downloader (English source, German reference; either direction),
    or :class:`~companion.errors.DataUnavailableError` within seconds when its host cannot be reached."""
    host, port = _SACREBLEU_HOST
    if not _reachable(host, port):
        raise DataUnavailableError(f"{where}, and sacreBLEU cannot fetch it: {host}:{port} cannot be reached. {how}")
    from sacrebleu.dataset import DATASETS

    dataset = DATASETS[_SACREBLEU_SETS[name]]
    try:
        english_file, german_file = dataset.get_files("en-de")
    except (Exception, SystemExit) as error:  # sacreBLEU exits on a checksum mismatch
        raise DataUnavailableError(
            f"{where}, and sacreBLEU's download of {dataset.name} failed ({type(error).__name__}: {error}). {how}"
        ) from error
    lines = {"en": _read_lines(Path(english_file)), "de": _read_lines(Path(german_file))}
    if len(lines["en"]) != len(lines["de"]):
        raise DataError(
            f"sacreBLEU's {dataset.name} files {english_file} and {german_file} have {len(lines['en'])} and "
            f"{len(lines['de'])} lines; they must be line-aligned"
        )
    return _drop_empty_pairs(list(zip(lines[src], lines[tgt])), f"sacreBLEU {dataset.name}")


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
