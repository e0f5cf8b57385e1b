"""The book's own trained models, ready to translate without training first.

The book ships two small models on Multi30k: German -> English (``direction="de-en"``, the default) and
English -> German (``direction="en-de"``). Both are the ``small`` preset with one shared BPE vocabulary of 8,000
tokens (the setting chosen on each direction's validation split), made by ``tools/make_pretrained.py`` with the
command recorded in each model card (``pretrained/de-en-small.json``, ``pretrained/en-de-small.json``: data, size,
command, hardware, scores). They translate with beam search of ``SHIPPED_BEAM_SIZE`` beams and the length
penalty ``SHIPPED_ALPHA``, chosen on the validation split too (``bench/decoding_select.py``). A registered model
whose file is missing raises :class:`~companion.errors.PretrainedUnavailableError`, which says how to make it.
:func:`load_pretrained` finds the file

1. at ``path`` when one is given;
2. in the folder named by the environment variable ``COMPANION_PRETRAINED_DIR``;
3. in the ``pretrained/`` folder of a repository checkout (an editable install, or the book's chapters);
4. in the user cache (``~/.cache/companion``), where an earlier download left it;
5. otherwise it downloads the file from the repository on GitHub into that cache (online only).

Whatever the place it finds the file in (1. excepted: a file you name is loaded as it is), the file must be the
shipped one: its SHA-256 is compared with the one recorded in ``PRETRAINED_MODELS``, so a modified copy
(vocabulary entries swapped and the checkpoint's own content digest recomputed, say) is refused with a
:class:`~companion.errors.PretrainedUnavailableError` that names it.

Offline and without a copy, it stops at once with a :class:`~companion.errors.PretrainedUnavailableError` that
says where to put the file.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import torch

from ._version import __version__
from .checkpoint import (
    follow_umask,
    load_checkpoint,
    model_from_checkpoint,
    run_weights,
    tokenizers_from_checkpoint,
)
from .data import Tokenizer
from .decode import PAPER_ALPHA, PAPER_BEAM_SIZE, translate
from .devices import resolve_device
from .errors import PretrainedUnavailableError
from .model import Transformer

__all__ = [
    "PRETRAINED_MODELS",
    "DIRECTIONS",
    "SHIPPED_BEAM_SIZE",
    "SHIPPED_ALPHA",
    "PretrainedModel",
    "load_pretrained",
    "pretrained_path",
    "shipped_direction",
    "default_decoding",
]

PRETRAINED_DIR_ENV = "COMPANION_PRETRAINED_DIR"
_REPOSITORY_RAW = "https://github.com/attention-executed/attention-executed/raw/main/pretrained"

# name -> direction, file name and SHA-256 of the shipped file (checked wherever the file is found)
PRETRAINED_MODELS: dict[str, dict[str, str]] = {
    "multi30k-de-en-small": {  # sha256 written by tools/make_pretrained.py
        "direction": "de-en",
        "file": "de-en-small.pt",
        "sha256": "c70955a7db1e001596d5369273b7ffe46f7806cb0080af543fde665f5acb71a6",
        "description": "German -> English, Multi30k, small preset (d_model 128, 2+2 layers), one shared BPE vocabulary",
    },
    "multi30k-en-de-small": {  # sha256 written by tools/make_pretrained.py
        "direction": "en-de",
        "file": "en-de-small.pt",
        "sha256": "0b6cb43ae85d066bc0b17f2c2f8bae80269dae564f85ecb393e0e9364cd11d95",
        "description": "English -> German, Multi30k, small preset (d_model 128, 2+2 layers), one shared BPE vocabulary",
    },
}
# direction ("src-tgt") -> the name of the shipped model for it
DIRECTIONS: dict[str, str] = {entry["direction"]: name for name, entry in PRETRAINED_MODELS.items()}

# How the shipped models translate by default: beam search with 4 beams (the in-page translator's default, whose
# latency the browser tests measure) and GNMT's length penalty with this alpha. bench/decoding_select.py chose it on
# the validation split (the grid 0.6 to 3.0, the highest mean BLEU over both directions:
# bench/results/decoding_select_2026-12-06.json): with the paper's 0.6 the models' outputs are shorter than the
# references (length ratio 0.96 de-en, 0.94 en-de), and a larger alpha favours the longer finished hypotheses.
# tools/make_pretrained.py scores the model cards and tools/build_translator.py sets the page's default with it.
SHIPPED_BEAM_SIZE = 4
SHIPPED_ALPHA = 2.0
SHIPPED_DECODING = {"beam_size": SHIPPED_BEAM_SIZE, "alpha": SHIPPED_ALPHA}
PAPER_DECODING = {"beam_size": PAPER_BEAM_SIZE, "alpha": PAPER_ALPHA}


def _model_name(direction: str) -> str:
    """The registry name for ``direction`` (``"de-en"``; a registry name itself is accepted as well)."""
    if isinstance(direction, str) and direction in DIRECTIONS:
        return DIRECTIONS[direction]
    if isinstance(direction, str) and direction in PRETRAINED_MODELS:
        return direction
    raise ValueError(
        f"direction must be one of {sorted(DIRECTIONS)} (or a model name: {sorted(PRETRAINED_MODELS)}), "
        f"got {direction!r}"
    )


@dataclass(repr=False)
class PretrainedModel:
    """A trained :class:`~companion.model.Transformer` with its two tokenizers and its model card.

    ``translate`` turns source-language sentences (German for ``de-en``, English for ``en-de``) into the target
    language with ``decoding``'s beam size and length penalty unless given others (``beam_size=1`` is greedy
    search, ``alpha=0.6`` the paper's). ``decoding`` is the setting the checkpoint file records (``companion
    train`` and ``companion choose-alpha`` record the one chosen on validation, and ``companion translate`` uses
    it too), else the shipped models' for a shipped model's file (beam ``SHIPPED_BEAM_SIZE``, length penalty
    ``SHIPPED_ALPHA``, chosen on their validation split), else the paper's (:func:`default_decoding`).
    """

    model: Transformer
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    path: Path
    info: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, Any] = field(default_factory=lambda: dict(SHIPPED_DECODING))

    def __repr__(self) -> str:
        """One line (the dataclass's own repr would print the whole module tree and model card)."""
        try:
            direction = "->".join(self.languages)
        except ValueError:
            direction = "languages unknown"
        step = f", step {self.info['step']}" if isinstance(self.info.get("step"), int) else ""
        return (
            f"PretrainedModel({direction}, {str(self.path)!r}{step}, "
            f"{self.model.num_parameters() / 1e6:.2f}M parameters, vocabularies "
            f"{self.src_tokenizer.vocab_size}/{self.tgt_tokenizer.vocab_size}, beam {self.decoding['beam_size']} "
            f"alpha {self.decoding['alpha']:g})"
        )

    @property
    def languages(self) -> tuple[str, str]:
        """``(source, target)`` language codes, e.g. ``("de", "en")``: from the run that trained the model (its
        ``info``), else from word tokenizers (a shared subword tokenizer serves both languages and names neither)."""
        source, target = self.info.get("src"), self.info.get("tgt")
        if isinstance(source, str) and isinstance(target, str):
            return source, target
        named = tuple(getattr(t, "language", None) for t in (self.src_tokenizer, self.tgt_tokenizer))
        if not all(isinstance(language, str) for language in named):
            raise ValueError(f"{self.path}: neither its run record nor its tokenizers name the two languages")
        return named  # type: ignore[return-value]

    @overload
    def translate(  # type: ignore[overload-overlap]  # a str is also a Sequence[str]; the str case comes first
        self, sentences: str, *, beam_size: int | None = None, alpha: float | None = None
    ) -> str: ...

    @overload
    def translate(
        self, sentences: Sequence[str], *, beam_size: int | None = None, alpha: float | None = None
    ) -> list[str]: ...

    def translate(
        self, sentences: str | Sequence[str], *, beam_size: int | None = None, alpha: float | None = None
    ) -> str | list[str]:
        """Translate plain text: one sentence (a string) gives its translation (a string); a list of sentences
        gives the detokenized translations in the same order. ``beam_size`` and ``alpha`` default to
        ``decoding``'s."""
        return translate(
            self.model,
            sentences,
            self.src_tokenizer,
            self.tgt_tokenizer,
            beam_size=self.decoding["beam_size"] if beam_size is None else beam_size,
            alpha=self.decoding["alpha"] if alpha is None else alpha,
        )


def _candidates(file_name: str) -> list[Path]:
    folders = []
    if os.environ.get(PRETRAINED_DIR_ENV):
        folders.append(Path(os.environ[PRETRAINED_DIR_ENV]))
    folders.append(Path(__file__).resolve().parents[1] / "pretrained")  # a repository checkout
    folders.append(_cache_dir())
    return [folder / file_name for folder in folders]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "companion"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(name: str, entry: dict[str, str]) -> Path:
    target = _cache_dir() / entry["file"]
    url = f"{_REPOSITORY_RAW}/{entry['file']}"
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".download-", suffix=".tmp")
    follow_umask(handle)  # mkstemp makes it 0600; the cache copy is an ordinary file
    os.close(handle)
    try:
        with urllib.request.urlopen(url, timeout=30) as response, open(temporary, "wb") as out:  # noqa: S310
            while block := response.read(1 << 20):
                out.write(block)
        if entry["sha256"] and _sha256(Path(temporary)) != entry["sha256"]:
            raise PretrainedUnavailableError(f"the download of {url} does not match the expected SHA-256 digest")
        os.replace(temporary, target)
    except OSError as error:
        raise PretrainedUnavailableError(
            f"the pretrained model {name!r} is not on this machine and downloading it from {url} failed "
            f"({type(error).__name__}: {error}). Put {entry['file']} (from the repository's pretrained/ folder) "
            f"into a folder and set {PRETRAINED_DIR_ENV}=FOLDER, or pass path=..."
        ) from error
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def _check_shipped(path: Path, entry: dict[str, str]) -> None:
    """Refuse a copy of the shipped file that is not byte for byte the shipped file."""
    found = _file_digest(path)
    if entry["sha256"] and found != entry["sha256"]:
        raise PretrainedUnavailableError(
            f"{path} is not the shipped {entry['file']}: its SHA-256 is {found}, the shipped file's is "
            f"{entry['sha256']} (the copy was modified, or belongs to another version of companion). Delete it "
            "(it is downloaded again when needed) or replace it with the repository's pretrained/"
            f"{entry['file']}; to load a file of your own, pass path=..."
        )


def shipped_direction(path: str | os.PathLike) -> str | None:
    """The direction of the shipped model that ``path`` is, else None: a file where :func:`pretrained_path` looks
    for a shipped model (the repository's ``pretrained/``, ``$COMPANION_PRETRAINED_DIR``, the download cache) whose
    SHA-256 is the shipped file's. A command that would write into a checkpoint (``companion choose-alpha``) refuses
    such a file, whose digest must stay; a copy elsewhere is the user's."""
    path = Path(path).resolve()
    for entry in PRETRAINED_MODELS.values():
        if entry["sha256"] and path in {candidate.resolve() for candidate in _candidates(entry["file"])}:
            return entry["direction"] if _sha256(path) == entry["sha256"] else None
    return None


def default_decoding(checkpoint: dict[str, Any], path: str | os.PathLike | None = None) -> tuple[dict[str, Any], str]:
    """The beam size and length penalty to decode a loaded ``checkpoint`` with when the caller gives none, and where
    they come from, in words: the setting the file records (``companion train`` and ``companion choose-alpha``
    record the one chosen on a validation split); else, when ``path`` is a shipped model's file (its SHA-256,
    wherever the copy lies), the shipped models' (``SHIPPED_DECODING``); else the paper's (beam 4, alpha 0.6).
    ``load_pretrained`` and the ``translate``/``evaluate`` commands decide alike, so one file decodes the same way
    however it is named."""
    recorded = checkpoint.get("decoding")
    if recorded:
        setting = {"beam_size": recorded.get("beam_size", PAPER_BEAM_SIZE), "alpha": recorded.get("alpha", PAPER_ALPHA)}
        return setting, f"chosen on {recorded.get('chosen_on', 'a held-out split')}, recorded in the checkpoint"
    if path is not None and _is_shipped_file(Path(path)):
        return dict(SHIPPED_DECODING), "the shipped models' setting"
    return dict(PAPER_DECODING), "the paper's"


def _is_shipped_file(path: Path) -> bool:
    """Whether ``path`` holds byte for byte one of the shipped models (by its SHA-256)."""
    shipped = {entry["sha256"] for entry in PRETRAINED_MODELS.values() if entry["sha256"]}
    try:
        return bool(shipped) and _file_digest(path) in shipped
    except OSError:
        return False


def _file_digest(path: Path) -> str:
    """:func:`_sha256` of the file at ``path``, computed once per file version (the shipped file is checked where
    it is found, then recognised when its decoding setting is chosen)."""
    found = path.resolve()
    version = found.stat()
    return _file_sha256(str(found), version.st_size, version.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """:func:`_sha256` of a file, computed once per file version (``size`` and ``mtime_ns`` name it)."""
    return _sha256(Path(path))


def pretrained_path(direction: str = "de-en", *, download: bool = True) -> Path:
    """Where the shipped model for ``direction`` (``"de-en"`` or ``"en-de"``, or its name in
    ``PRETRAINED_MODELS``) is on this machine, downloading it first if allowed and needed.

    The copy found is checked against the shipped file's SHA-256 (:class:`~companion.errors.PretrainedUnavailableError`
    if it differs); a ValueError names ``direction`` and the choices for anything else."""
    name = _model_name(direction)
    entry = PRETRAINED_MODELS[name]
    if not entry["sha256"]:  # registered, but no file has been made and shipped for it yet
        raise PretrainedUnavailableError(
            f"the pretrained model {name!r} ({entry['file']}, direction {entry['direction']!r}) is not shipped "
            f"in companion {__version__}: tools/make_pretrained.py --direction {entry['direction']} makes it from a "
            "training run; "
            f"or train one: companion train --src {entry['direction'].split('-')[0]} "
            f"--tgt {entry['direction'].split('-')[1]}"
        )
    for candidate in _candidates(entry["file"]):
        if candidate.is_file():
            _check_shipped(candidate, entry)
            return candidate
    if not download:
        raise PretrainedUnavailableError(
            f"the pretrained model {name!r} ({entry['file']}) is not on this machine; looked in "
            f"{', '.join(str(c.parent) for c in _candidates(entry['file']))}. Put the file into a folder and set "
            f"{PRETRAINED_DIR_ENV}=FOLDER, pass path=..., or allow the download (download=True)"
        )
    return _download(name, entry)


def load_pretrained(
    direction: str = "de-en",
    *,
    path: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    download: bool = True,
) -> PretrainedModel:
    """Load one of the book's trained models (see the module docstring for where it is looked for).

    Args:
        direction: ``"de-en"`` (German -> English, the default) or ``"en-de"`` (English -> German); the name of a
            shipped model (``PRETRAINED_MODELS``, e.g. ``"multi30k-en-de-small"``) is accepted too. Anything
            else is a ValueError that lists the choices.
        path: a checkpoint file to load instead of searching (loaded as it is: its SHA-256 is not compared
            with the shipped file's, its content digest and entries are checked as for every checkpoint), e.g. a
            run's ``averaged.pt``, or a run folder, read as ``companion translate --checkpoint`` reads one (its
            ``averaged.pt`` when that is at least as new as its latest step checkpoint, else that checkpoint, with
            a warning that says why: :func:`companion.checkpoint.run_weights`); ``translate`` then decodes with
            the setting the file records (``companion train`` ends by choosing it on the validation split), else,
            for a copy of a shipped model, with the shipped models', else with the paper's
            (:func:`default_decoding`).
        device: where the model goes (eval mode): ``"cpu"``, ``"cuda[:N]"``, ``"mps"`` or ``"auto"``, resolved
            first (a :class:`~companion.errors.DeviceUnavailableError` when the backend is missing).
        download: allow fetching the file from the repository when no local copy exists.

    Returns:
        a :class:`PretrainedModel` (model, tokenizers, file path and model card), e.g.
        ``load_pretrained().translate("Ein Hund rennt.")``, ``load_pretrained("en-de").translate("A dog runs.")``.
    """
    _model_name(direction)  # a bad direction is an error even when ``path`` is given
    target = resolve_device(device)
    file = _checkpoint_file(path) if path is not None else pretrained_path(direction, download=download)
    checkpoint = load_checkpoint(file)
    model = model_from_checkpoint(checkpoint, device=target)
    src_tokenizer, tgt_tokenizer = tokenizers_from_checkpoint(checkpoint)
    info = dict(checkpoint.get("run_info") or {})
    info.update(step=checkpoint.get("step"), averaged_from=checkpoint.get("averaged_from"))
    decoding = default_decoding(checkpoint, file)[0]  # the entry is checked by load_checkpoint when present
    return PretrainedModel(model, src_tokenizer, tgt_tokenizer, file, info, decoding)


def _checkpoint_file(path: str | os.PathLike) -> Path:
    """``path`` itself, or the weights of the run folder it names (as ``companion translate --checkpoint``)."""
    if not Path(path).is_dir():
        return Path(path)  # load_checkpoint names a missing or unreadable file
    return run_weights(path, name="path")
