"""Checkpoints: atomic writes, safe loading, compatibility checks and checkpoint averaging.

A checkpoint is one file written with :func:`torch.save` and read back with ``weights_only=True``, so loading
never unpickles arbitrary objects: it holds only tensors and plain values (dicts, lists, strings, numbers).

Contents (a dict)::

    format, format_version      "companion-checkpoint", 1
    companion_version, torch_version, created (UTC, ISO 8601)
    model_config                TransformerConfig.to_dict()
    model_state                 the model's state_dict
    tokenizers                  {"src": Tokenizer.to_dict(), "tgt": ...} or None (synthetic tasks)
    step                        optimizer steps taken
    train_config                TrainConfig.to_dict() or None
    trainer_state               optimizer, scheduler, RNG and counters for an exact resume (None if averaged)
    metrics                     latest training/validation numbers
    run_info                    how the run was started (data, command line)
    averaged_from               names of the checkpoints averaged into this one (or absent)
    content_sha256              digest of every tensor's bytes and of the metadata, checked on load

Atomicity: :func:`atomic_save` writes to a temporary file in the destination folder, flushes it to disk and
renames it over the destination with :func:`os.replace` (atomic on POSIX and Windows). A crash mid-write
leaves at most a stray ``.*.tmp`` file; the previous file under the final name is untouched. Files get the
mode the umask gives (``0666 & ~umask``), as with a plain ``open``.

Validation: the digest is an integrity check, not a signature: anyone can change a file and recompute it. So
:func:`load_checkpoint` trusts nothing in the file. Before ``torch.load``, the file must be a zip archive
whose members are stored uncompressed (as ``torch.save`` writes them: no zip bomb); after it, every entry
is checked by :func:`check_checkpoint` (types, bounded nesting, finiteness, the config's sizes against the
stored shapes, the tokenizers against the vocabulary sizes) before anything is built from it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import hashlib
import json
import math
import os
import re
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._version import __version__
from .data import tokenizer_from_dict
from .devices import resolve_device
from .errors import CheckpointError
from .model import Transformer, TransformerConfig

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_FORMAT_VERSION",
    "atomic_save",
    "save_checkpoint",
    "load_checkpoint",
    "check_checkpoint",
    "check_compatible",
    "load_model_weights",
    "model_from_checkpoint",
    "tokenizers_from_checkpoint",
    "checkpoint_path",
    "list_checkpoints",
    "latest_checkpoint",
    "latest_valid_checkpoint",
    "nonfinite_tensors",
    "prune_checkpoints",
    "average_checkpoints",
]

CHECKPOINT_FORMAT = "companion-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


# --------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------
def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj)`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``.

    The file gets the mode a plain ``open`` would give it (``0o666`` less the umask). A failed write removes its
    temp file and raises :class:`~companion.errors.CheckpointError` (disk full, I/O error) or, for Ctrl-C, a
    ``KeyboardInterrupt`` whose message says that nothing was written and which earlier checkpoint is intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        follow_umask(handle)
        with os.fdopen(handle, "wb") as tmp:
            torch.save(obj, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException as error:
        _remove_quietly(tmp_name)
        if _in_chain(error, KeyboardInterrupt) is not None:
            # torch's zip writer turns a Ctrl-C inside its write callback into "RuntimeError: [enforce fail at
            # inline_container.cc] unexpected pos ...", which reads as corruption
            raise KeyboardInterrupt(
                f"interrupted while writing {path}: nothing was written (the temporary file is removed); "
                f"{_what_is_intact(path)}"
            ) from None
        cause = _in_chain(error, OSError)
        if cause is not None and cause.errno is not None:
            raise CheckpointError(_write_failure(path, cause)) from error
        raise
    _fsync_folder(path.parent)
    return path


def follow_umask(handle: int) -> None:
    """Give the open file ``handle`` the mode ``open`` would (``0666 & ~umask``): ``mkstemp`` makes it 0600
    whatever the umask (used for every file this package writes through a temporary file)."""
    if hasattr(os, "fchmod"):
        os.fchmod(handle, 0o666 & ~_current_umask())


def _current_umask() -> int:
    """The process's umask: read from /proc where Linux shows it, else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


def _in_chain(error: BaseException, kind: type[BaseException]) -> Any:
    """The exception of type ``kind`` behind ``error`` (itself or one in its ``__cause__``/``__context__`` chain,
    e.g. the OSError or KeyboardInterrupt that PyTorch's writer turned into a RuntimeError), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _what_is_intact(path: Path) -> str:
    """What a failed write of ``path`` left readable, said only of files that exist."""
    if path.exists():
        return f"the previous checkpoint is intact ({path.name}, not replaced)"
    earlier = latest_checkpoint(path.parent)
    if earlier is not None:
        return f"the previous checkpoint is intact ({earlier.name})"
    return f"{path.parent} holds no earlier checkpoint"


def _write_failure(path: Path, error: OSError) -> str:
    if error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        what = (
            "the disk is full (no space left on the device)"
            if error.errno == errno.ENOSPC
            else "the disk quota is exhausted"
        )
        return (
            f"cannot write the checkpoint {path}: {what}. Nothing was replaced: {_what_is_intact(path)}. Free some "
            "space (or use --keep-last to keep fewer checkpoints) and --resume."
        )
    intact = _what_is_intact(path)
    return f"cannot write the checkpoint {path}: {error.strerror or error}. {intact[:1].upper()}{intact[1:]}."


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _digest(checkpoint: Mapping[str, Any]) -> str:
    """sha256 over the metadata (as canonical JSON) and every tensor's dtype, shape and bytes."""
    sha = hashlib.sha256()

    def visit(value: Any, key: str) -> Any:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            sha.update(f"{key}:{t.dtype}:{tuple(t.shape)}".encode())
            if t.numel():
                sha.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            return f"<tensor {key}>"
        if isinstance(value, Mapping):
            return {str(k): visit(v, f"{key}/{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [visit(v, f"{key}/{i}") for i, v in enumerate(value)]
        return value

    skeleton = {k: visit(v, k) for k, v in checkpoint.items() if k != "content_sha256"}
    sha.update(json.dumps(skeleton, sort_keys=True, default=repr).encode())
    return sha.hexdigest()


_PLAIN = (str, int, float, bool, type(None))
MAX_NESTING = 32  # levels of dicts and lists (what companion writes nests 6 deep)
MAX_VALUES = 5_000_000  # values in all (a word vocabulary of 1M entries per side is 2M)


def _plain_tree_problem(checkpoint: Mapping[str, Any]) -> str | None:
    """Why the entries of ``checkpoint`` are not trees of dense tensors and plain values (str/int keys, at most
    ``MAX_NESTING`` levels and ``MAX_VALUES`` values in all), or None if they are. ``weights_only=True`` loading
    accepts such trees, and every later step (digest, checks) walks them without deep recursion or unbounded
    work (a sub-list shared many times, which a crafted pickle can nest into an exponential tree, counts at
    each visit)."""
    for key in checkpoint:
        if not isinstance(key, str):
            return f"the checkpoint has an entry named by a {type(key).__name__} ({key!r:.40}); names are strings"
    pending: list[tuple[Any, str, int]] = [(value, key, 1) for key, value in checkpoint.items()]
    visited = 0
    while pending:
        item, place, depth = pending.pop()
        visited += 1
        if visited > MAX_VALUES:
            return f"the checkpoint holds more than {MAX_VALUES:,} values (dict and list entries)"
        if isinstance(item, torch.Tensor):
            if item.is_meta:
                return f"{place} is a tensor on the meta device (shape only, no data)"
            if item.layout != torch.strided:
                return f"{place} is a {item.layout} tensor; checkpoints hold dense tensors only"
        elif isinstance(item, Mapping) or type(item) in (list, tuple):
            if depth >= MAX_NESTING:
                return f"{place.split('[', 1)[0]} nests dicts and lists deeper than {MAX_NESTING} levels"
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if type(key) not in (str, int):
                        return f"{place} has a key of type {type(key).__name__}; only str/int keys can be saved"
                    pending.append((child, f"{place}[{key!r}]", depth + 1))
            else:
                pending.extend((child, f"{place}[{i}]", depth + 1) for i, child in enumerate(item))
        elif type(item) not in _PLAIN:
            return (
                f"{place} is a {type(item).__name__}; checkpoints hold only tensors and plain values "
                "(str, int, float, bool, None, lists, dicts) so that loading never unpickles objects"
            )
    return None


def _tokenizer_dicts(tokenizers: Mapping[str, Any] | None) -> dict[str, dict] | None:
    if tokenizers is None:
        return None
    if not isinstance(tokenizers, Mapping) or set(tokenizers) != {"src", "tgt"}:
        raise ValueError(f"tokenizers must be a dict with keys 'src' and 'tgt', got {tokenizers!r:.80}")
    return {k: (dict(v) if isinstance(v, Mapping) else v.to_dict()) for k, v in tokenizers.items()}


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: nn.Module,
    step: int,
    tokenizers: Mapping[str, Any] | None = None,
    train_config: Mapping[str, Any] | None = None,
    trainer_state: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    run_info: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint of ``model`` (a companion Transformer) atomically; returns the path.

    ``tokenizers`` is ``{"src": ..., "tgt": ...}`` (tokenizers or their ``to_dict()``); ``trainer_state`` comes
    from :meth:`companion.train.Trainer.state_dict`.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(f"model must be a companion Transformer (with .config), got {type(model).__name__}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    checkpoint = _new_checkpoint(
        model_config=config.to_dict(),
        model_state=model.state_dict(),
        step=step,
        tokenizers=_tokenizer_dicts(tokenizers),
        train_config=dict(train_config) if train_config else None,
        trainer_state=dict(trainer_state) if trainer_state else None,
        metrics=dict(metrics or {}),
        run_info=dict(run_info or {}),
    )
    return write_checkpoint(checkpoint, path)


def _new_checkpoint(**fields: Any) -> dict[str, Any]:
    return {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "companion_version": __version__,
        "torch_version": str(torch.__version__),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


def nonfinite_tensors(checkpoint: Mapping[str, Any]) -> list[str]:
    """Where a checkpoint holds inf or nan: the names of the floating-point tensors of its weights
    (``model_state``) and of its trainer state (optimizer moments, ...) that are not all finite."""
    found: list[str] = []

    def visit(value: Any, where: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()):
                found.append(where)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                visit(item, f"{where}/{key}")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(item, f"{where}/{i}")

    for key in ("model_state", "trainer_state"):
        visit(checkpoint.get(key), key)
    return found


def _describe_nonfinite(names: Sequence[str]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} tensor(s) hold inf or nan ({shown})"


def write_checkpoint(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Seal ``checkpoint`` (a dict as built by :func:`save_checkpoint` or :func:`average_checkpoints`) with its
    digest and write it atomically.

    A checkpoint whose weights or trainer state hold inf or nan is never written
    (:class:`~companion.errors.CheckpointError`), nor one that :func:`load_checkpoint` would refuse (entries of
    the wrong type, weights that do not fit the config, vocabularies of another size): every checkpoint on disk
    is one that training can continue from and decoding can use. Objects that are not tensors or plain values
    raise a TypeError.
    """
    checkpoint = dict(checkpoint)
    problem = _plain_tree_problem(checkpoint)
    if problem is not None:
        raise TypeError(problem)
    bad = nonfinite_tensors(checkpoint)
    if bad:
        raise CheckpointError(f"refusing to write {path}: {_describe_nonfinite(bad)}; the run diverged")
    try:
        _check_entries(checkpoint)
    except CheckpointError as error:
        raise CheckpointError(f"refusing to write {path}: {error}") from None
    checkpoint["content_sha256"] = _digest(checkpoint)
    return atomic_save(checkpoint, path)


# --------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------
def load_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device | None = "cpu", verify: bool = True
) -> dict[str, Any]:
    """Read a checkpoint safely (``weights_only=True``) and check that it is whole and valid.

    Raises :class:`~companion.errors.CheckpointError` with the path and the reason for a missing, truncated,
    corrupt or foreign file (one not written by this package, or by a newer format version; a file that is no
    zip archive is named for what it is: a Git LFS pointer, an HTML page, text, ...). Before ``torch.load``
    reads anything, the zip directory is checked (no compressed member, no more contents than the file holds:
    no zip bomb). After it, every entry is checked (:func:`check_checkpoint`) before anything is built: the
    weights against the config, counters, RNG states, tokenizers against the vocabulary sizes, and so on.
    ``verify=False`` skips the digest check (faster for large models).
    """
    path = Path(path)
    _check_archive(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        raise CheckpointError(_unreadable(path, error)) from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a companion checkpoint (no format marker {CHECKPOINT_FORMAT!r})"
        )
    try:
        check_checkpoint(checkpoint, verify_digest=verify)
    except CheckpointError as error:
        raise CheckpointError(_about(path, str(error))) from None
    return checkpoint


def _about(path: Path, message: str) -> str:
    """``message`` about the file ``path``: "the checkpoint is ..." becomes "PATH is ...", others "PATH: ..."."""
    subject = "the checkpoint "
    return f"{path} {message[len(subject) :]}" if message.startswith(subject) else f"{path}: {message}"


# -- the file before torch.load reads it --------------------------------------------------------------------
_ZIP_MAGIC = b"PK\x03\x04"


def _check_archive(path: Path) -> None:
    """Refuse what is no checkpoint file before ``torch.load`` reads it: folders, missing or empty files, files
    that are no zip archive (named for what they are), and zip archives whose members are compressed or claim
    more bytes than the file holds (torch.save stores every member uncompressed, so a checkpoint's contents
    are never larger than the file)."""
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a folder; pass a checkpoint file (e.g. {path}/checkpoints/step_*.pt), "
            "or use latest_checkpoint(folder)"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes): it was truncated, probably by a crash "
            "during an old-style write; use an earlier checkpoint"
        )
    with path.open("rb") as handle:
        head = handle.read(1024)
    if not head.startswith(_ZIP_MAGIC):
        raise CheckpointError(f"{path} is {_what_the_file_is(head, size)}")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise CheckpointError(
            f"{path} is not a readable checkpoint: it looks truncated or corrupt ({type(error).__name__}: "
            f"{str(error)[:200]}). Delete it and use an earlier checkpoint."
        ) from error
    compressed = [m for m in members if m.compress_type != zipfile.ZIP_STORED]
    if compressed:
        largest = max(compressed, key=lambda m: m.file_size)
        raise CheckpointError(
            f"{path} holds {len(compressed)} compressed member(s) (e.g. {largest.filename}: {largest.compress_size:,} "
            f"bytes that inflate to {largest.file_size:,}); torch.save stores every member uncompressed, so the file "
            "was not written by torch.save and is refused unread (it may be a zip bomb)"
        )
    declared = sum(m.file_size for m in members)
    if declared > size:
        raise CheckpointError(
            f"{path} is corrupt: its zip directory declares {declared:,} bytes of contents in a {size:,}-byte file"
        )


def _what_the_file_is(head: bytes, size: int) -> str:
    """What a file that is no zip archive is, from its first bytes (for the message after "PATH is ...")."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"version https://git-lfs.github.com/spec/"):
        return (
            f"a Git LFS pointer ({size} bytes), not the file it stands for: the repository was cloned without "
            "Git LFS. Run `git lfs install && git lfs pull`, or download the file itself"
        )
    lowered = text[:200].lower()
    if lowered.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml")) or b"<html" in lowered:
        return (
            "an HTML page, not a checkpoint: a download saved a web page (an error, login or redirect page) in "
            "place of the file. Download the file itself (on GitHub: the raw file or its Download button)"
        )
    if head.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file, not a checkpoint (checkpoints are zip archives); decompress it first"
    if head[:1] == b"\x80":
        return (
            "a Python pickle or a PyTorch file in the legacy (pre-1.6, non-zip) format, not a companion "
            "checkpoint (a zip archive written by torch.save); it is refused unread"
        )
    try:
        decoded = head.decode("utf-8")
    except UnicodeDecodeError:
        decoded = ""
    if decoded and all(ch.isprintable() or ch in "\t\r\n" for ch in decoded[:-4] or decoded):
        first = decoded.strip().splitlines()[0][:60] if decoded.strip() else ""
        return f"a text file ({size} bytes, starting {first!r}), not a checkpoint"
    return (
        f"not a zip archive (it starts with the bytes {head[:8].hex(' ')}), so not a checkpoint written by "
        "torch.save: it is damaged, or another kind of file"
    )


def _unreadable(path: Path, error: Exception) -> str:
    """The message for a zip archive that ``torch.load(weights_only=True)`` cannot read."""
    text = str(error)
    message = text.splitlines()[0][:300] if text else type(error).__name__
    if "weights only" in text.lower() or "weights_only" in text:
        detail = [line.strip() for line in text.splitlines() if "Unsupported" in line]
        message = detail[0][:300] if detail else message
        return (
            f"{path} holds Python objects that weights_only=True loading refuses to unpickle (it was not "
            f"written by companion, or was tampered with): {message}"
        )
    return (
        f"{path} is not a readable checkpoint: it looks truncated or corrupt ({type(error).__name__}: "
        f"{message}). Delete it and use an earlier checkpoint."
    )


# -- the entries ------------------------------------------------------------------------------------------
_REQUIRED_ENTRIES = ("model_config", "model_state", "step")
_OPTIONAL_ENTRIES = {
    "format": "the format marker",
    "format_version": "the format version",
    "companion_version": "a version string",
    "torch_version": "a version string",
    "created": "a date string",
    "tokenizers": "the vocabularies",
    "train_config": "the training settings",
    "trainer_state": "the optimizer, scheduler, RNG and counters",
    "metrics": "training numbers",
    "run_info": "how the run was started",
    "averaged_from": "file names",
    "content_sha256": "the digest",
}
_TRAINER_STATE_ENTRIES = ("state", "optimizer", "scheduler", "rng", "world_size")
_DERIVED_TABLES_LIMIT = 1 << 30  # bytes of tables computed from the config, not stored (sinusoidal positions)


def check_checkpoint(checkpoint: Any, *, verify_digest: bool = False) -> TransformerConfig:
    """Check every entry of a checkpoint dict (as :func:`load_checkpoint` returns it, or built in memory) and
    return the :class:`~companion.model.TransformerConfig` it describes.

    Checked, in this order, without building anything: the format marker and version; that the required
    entries are there and no unknown ones; that every entry is a tree of dense tensors and plain values
    (bounded depth and size); the digest (``verify_digest``; a dict built in memory, e.g. by
    :func:`average_checkpoints`, has none); the type of every entry (``step``, versions, ``metrics``,
    ``run_info``, ``train_config``, ``averaged_from``, the counters, optimizer, scheduler and RNG states of
    ``trainer_state``); that all weights and trainer state are finite; every field of ``model_config``; that
    the config's sizes (vocabularies, ``d_model``, ``d_ff``, layers, ``max_len``) are those of the stored
    tensors, so that building the model allocates no more than the file holds; and that the tokenizers have
    the config's vocabulary sizes. Raises :class:`~companion.errors.CheckpointError` naming the entry.
    """
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f"a checkpoint is a dict, got {type(checkpoint).__name__}")
    _check_format(checkpoint)
    problem = _plain_tree_problem(checkpoint)
    if problem is not None:
        raise CheckpointError(f"{problem} (the file was not written by companion, or was tampered with)")
    if verify_digest and checkpoint.get("content_sha256") != _digest(checkpoint):
        raise CheckpointError(
            "the checkpoint is corrupt: its contents do not match the digest recorded when it was written "
            "(bytes changed on disk). Use an earlier checkpoint."
        )
    bad = nonfinite_tensors(checkpoint)
    if bad:
        raise CheckpointError(
            f"the checkpoint is unusable: {_describe_nonfinite(bad)}. It was written by a run that diverged; "
            "use an earlier checkpoint."
        )
    return _check_entries(checkpoint)


def _check_format(checkpoint: Mapping[str, Any]) -> None:
    if "format" in checkpoint and checkpoint["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"the checkpoint is not a companion checkpoint (format {checkpoint['format']!r:.60})")
    version = checkpoint.get("format_version", CHECKPOINT_FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"the checkpoint has format version {version!r:.60}; this companion reads versions 1 to "
            f"{CHECKPOINT_FORMAT_VERSION} (upgrade companion)"
        )
    for key in _REQUIRED_ENTRIES:
        if key not in checkpoint:
            raise CheckpointError(f"the checkpoint lacks the entry {key!r}; the file is damaged")
    unknown = sorted(str(k) for k in checkpoint if k not in _REQUIRED_ENTRIES and k not in _OPTIONAL_ENTRIES)
    if unknown:
        raise CheckpointError(
            f"the checkpoint has unknown entries {unknown}; a companion checkpoint holds only "
            f"{sorted([*_REQUIRED_ENTRIES, *_OPTIONAL_ENTRIES])}"
        )


def _check_entries(checkpoint: Mapping[str, Any]) -> TransformerConfig:
    """The type checks of :func:`check_checkpoint`, then the config against the weights and the tokenizers."""
    _check_count("step", checkpoint["step"])
    for key in ("companion_version", "torch_version", "created", "content_sha256"):
        if key in checkpoint and not isinstance(checkpoint[key], str):
            raise CheckpointError(f"the entry {key!r} must be a string, got {_describe(checkpoint[key])}")
    for key in ("metrics", "run_info"):
        if key in checkpoint:
            _check_dict(key, checkpoint[key])
    if checkpoint.get("train_config") is not None:
        _check_dict("train_config", checkpoint["train_config"])
    names = checkpoint.get("averaged_from")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise CheckpointError(f"the entry 'averaged_from' must be a list of file names, got {_describe(names)}")
    if checkpoint.get("trainer_state") is not None:
        _check_trainer_state(checkpoint["trainer_state"], checkpoint["step"])
    config = check_model_config(checkpoint["model_config"])
    _check_weights_fit(config, checkpoint["model_state"])
    _check_tokenizers(checkpoint.get("tokenizers"), config)
    return config


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}" if isinstance(value, (str, int, float)) else type(value).__name__


def _check_count(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"the entry {where!r} must be a non-negative integer, got {_describe(value)}")


def _check_dict(where: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise CheckpointError(f"the entry {where!r} must be a dict, got {_describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise CheckpointError(f"the entry {where!r} must have string keys, got {key!r:.40}")


def _check_trainer_state(state: Any, step: int) -> None:
    """``trainer_state`` as :meth:`companion.train.Trainer.state_dict` writes it."""
    from .train import TrainState  # late import: companion.train uses this module

    if not isinstance(state, Mapping):
        raise CheckpointError(f"the entry 'trainer_state' must be a dict (or None), got {_describe(state)}")
    if set(state) != set(_TRAINER_STATE_ENTRIES):
        extra, missing = (
            sorted(set(map(str, state)) - set(_TRAINER_STATE_ENTRIES)),
            sorted(set(_TRAINER_STATE_ENTRIES) - set(state)),
        )
        raise CheckpointError(
            f"the entry 'trainer_state' must hold exactly {list(_TRAINER_STATE_ENTRIES)}"
            + (f"; it has the unknown {extra}" if extra else "")
            + (f"; it lacks {missing}" if missing else "")
        )
    _check_counters(state["state"], {f.name: f.default for f in dataclasses.fields(TrainState)}, step)
    _check_optimizer_state(state["optimizer"])
    _check_dict("trainer_state.scheduler", state["scheduler"])
    world_size = state["world_size"]
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise CheckpointError(f"trainer_state.world_size must be a positive integer, got {_describe(world_size)}")
    _check_rng_states(state["rng"], world_size)


def _check_counters(counters: Any, defaults: Mapping[str, Any], step: int) -> None:
    _check_dict("trainer_state.state", counters)
    for name, value in counters.items():
        if name not in defaults:
            raise CheckpointError(f"trainer_state.state has an unknown counter {name!r}")
        default = defaults[name]
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if isinstance(default, int) and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CheckpointError(f"trainer_state.state.{name} must be a non-negative integer, got {_describe(value)}")
        if isinstance(default, float) and not (number and value >= 0):
            raise CheckpointError(f"trainer_state.state.{name} must be a non-negative number, got {_describe(value)}")
        if default is None and value is not None and not (number or isinstance(value, Mapping)):
            raise CheckpointError(
                f"trainer_state.state.{name} must be a number, a dict or None, got {_describe(value)}"
            )
    if counters.get("step", step) != step:
        raise CheckpointError(f"trainer_state.state.step is {counters['step']!r} but the checkpoint's step is {step}")


def _check_optimizer_state(optimizer: Any) -> None:
    _check_dict("trainer_state.optimizer", optimizer)
    if set(optimizer) != {"state", "param_groups"}:
        raise CheckpointError(f"trainer_state.optimizer must hold 'state' and 'param_groups', got {sorted(optimizer)}")
    per_parameter, groups = optimizer["state"], optimizer["param_groups"]
    if not isinstance(per_parameter, Mapping) or not all(
        isinstance(k, int) and isinstance(v, Mapping) for k, v in per_parameter.items()
    ):
        raise CheckpointError("trainer_state.optimizer.state must map parameter numbers to dicts")
    if not isinstance(groups, list) or not all(
        isinstance(g, Mapping) and isinstance(g.get("params"), list) and all(isinstance(i, int) for i in g["params"])
        for g in groups
    ):
        raise CheckpointError("trainer_state.optimizer.param_groups must be a list of dicts with 'params' lists")


def _check_rng_states(states: Any, world_size: int) -> None:
    """One ``{"torch": ByteTensor, "cuda"?: ByteTensor}`` per process, as ``torch.get_rng_state`` gives them."""
    if not isinstance(states, list) or len(states) != world_size:
        raise CheckpointError(
            f"trainer_state.rng must list one RNG state per process (world_size {world_size}), got "
            f"{len(states) if isinstance(states, list) else _describe(states)}"
        )
    cpu_size = torch.get_rng_state().numel()
    for rank, rng in enumerate(states):
        if not isinstance(rng, Mapping) or "torch" not in rng or not set(rng) <= {"torch", "cuda"}:
            raise CheckpointError(f"trainer_state.rng[{rank}] must be a dict with 'torch' (and 'cuda') states")
        for kind, tensor in rng.items():
            wanted = cpu_size if kind == "torch" else None
            if (
                not isinstance(tensor, torch.Tensor)
                or tensor.dtype != torch.uint8
                or tensor.dim() != 1
                or (wanted is not None and tensor.numel() != wanted)
            ):
                shape = (
                    f"{tensor.dtype} {tuple(tensor.shape)}" if isinstance(tensor, torch.Tensor) else _describe(tensor)
                )
                raise CheckpointError(
                    f"trainer_state.rng[{rank}][{kind!r}] is not a {kind} RNG state (a 1-D uint8 tensor"
                    f"{f' of {wanted} bytes' if wanted else ''}), got {shape}"
                )


def check_model_config(values: Any) -> TransformerConfig:
    """The :class:`~companion.model.TransformerConfig` a checkpoint's ``model_config`` describes, with every
    field checked (types, ranges, finiteness), or :class:`~companion.errors.CheckpointError` naming the field."""
    if not isinstance(values, Mapping):
        raise CheckpointError(f"the model_config must be a dict, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    for name, value in values.items():
        if name not in fields:
            raise CheckpointError(f"the model_config has an unknown field {name!r}")
        default = fields[name].default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise CheckpointError(f"the model_config field {name} must be True or False, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise CheckpointError(f"the model_config field {name} must be a finite number, got {value!r}")
    eps = values.get("layer_norm_eps", 1e-5)
    if not eps > 0:
        raise CheckpointError(f"the model_config field layer_norm_eps must be positive, got {eps!r}")
    try:
        return TransformerConfig.from_dict(dict(values))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"the model_config is invalid: {error}") from None


# Where each size of the config shows in the stored weights: (field, tensor name, dimension). A learned
# positional table pins max_len too; the feed-forward width is read from the first layer that has one.
_SIZE_PINS = (
    ("src_vocab_size", "src_embed.weight", 0),
    ("d_model", "src_embed.weight", 1),
    ("tgt_vocab_size", "tgt_embed.weight", 0),
    ("d_model", "tgt_embed.weight", 1),
)
_LAYER_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.")
_FFN_KEY = re.compile(r"^(encoder|decoder)\.layers\.\d+\.ffn\.linear1\.weight$")


def _check_weights_fit(config: TransformerConfig, weights: Any) -> None:
    """``model_state`` holds tensors whose shapes are the sizes ``config`` asks for, so that building the model
    allocates no more than the file holds (plus its positional tables, bounded here too).

    Nothing is built: the vocabulary sizes, ``d_model``, ``d_ff`` and a learned ``max_len`` are read from the
    tensors that carry them, the layers are counted from the tensor names, and the sinusoidal tables
    (``max_len x d_model`` float32 per stack, computed at build time) must stay under 1 GiB. The remaining
    names and shapes are compared when the weights are copied into the built model (:func:`load_model_weights`).
    """
    if not isinstance(weights, Mapping):
        raise CheckpointError(f"the entry 'model_state' must be a dict of tensors, got {_describe(weights)}")
    for name, tensor in weights.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise CheckpointError(
                f"model_state[{name!r:.60}] must be a tensor named by a string, got {_describe(tensor)}"
            )
    pins = list(_SIZE_PINS)
    ffn = next((name for name in weights if _FFN_KEY.match(name)), None)
    if ffn is not None:
        pins.append(("d_ff", ffn, 0))
    if config.positional == "learned":
        pins += [("max_len", "src_pos.weight", 0), ("max_len", "tgt_pos.weight", 0)]
    for field, name, dim in pins:
        stored = weights.get(name)
        if stored is None or stored.dim() != 2:
            raise CheckpointError(
                f"model_state lacks the 2-D tensor {name!r} that holds model_config.{field}: the weights are not a "
                "companion Transformer's"
            )
        if stored.shape[dim] != getattr(config, field):
            raise CheckpointError(
                f"model_config.{field} is {getattr(config, field):,}, but model_state[{name!r}] has shape "
                f"{tuple(stored.shape)}: the config does not describe these weights"
            )
    for stack in ("encoder", "decoder"):
        found = {int(m.group(2)) for name in weights if (m := _LAYER_KEY.match(name)) and m.group(1) == stack}
        wanted = getattr(config, f"num_{stack}_layers")
        if found != set(range(wanted)):
            raise CheckpointError(
                f"model_config.num_{stack}_layers is {wanted:,}, but model_state holds {len(found)} {stack} "
                "layers: the config does not describe these weights"
            )
    tables = 2 * config.max_len * config.d_model * 4 if config.positional == "sinusoidal" else 0
    if tables > _DERIVED_TABLES_LIMIT:
        raise CheckpointError(
            f"model_config.max_len {config.max_len:,} (with d_model {config.d_model}) asks for {tables / 2**30:,.1f} "
            f"GiB of sinusoidal position tables, computed when the model is built; a checkpoint may ask for at "
            f"most {_DERIVED_TABLES_LIMIT / 2**30:.0f} GiB"
        )


def _check_tokenizers(saved: Any, config: TransformerConfig) -> None:
    """``tokenizers`` is None or ``{"src", "tgt"}`` tokenizer dicts with the config's vocabulary sizes."""
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"the entry 'tokenizers' must be a dict with 'src' and 'tgt' (or None), got {_describe(saved)}"
        )
    for side in ("src", "tgt"):
        if side not in saved:
            raise CheckpointError(f"the checkpoint's tokenizers lack the {side!r} entry; the file is damaged")
    if set(saved) != {"src", "tgt"}:
        raise CheckpointError(f"the entry 'tokenizers' must hold only 'src' and 'tgt', got {sorted(map(str, saved))}")
    for side, wanted in (("src", config.src_vocab_size), ("tgt", config.tgt_vocab_size)):
        size = _tokenizer_size(saved[side], side)
        if size != wanted:
            raise CheckpointError(
                f"the checkpoint's {side} tokenizer has {size} entries but model_config's {side}_vocab_size "
                f"{wanted}: the vocabulary does not belong to these weights"
            )


def _tokenizer_size(values: Any, side: str) -> int:
    """Entries of a saved tokenizer: a word vocabulary's length, or a rebuilt subword tokenizer's size."""
    if not isinstance(values, Mapping):
        raise CheckpointError(
            f"the checkpoint's {side} tokenizer is damaged: it must be a dict, got {_describe(values)}"
        )
    if values.get("type") == "word":
        itos = values.get("itos")
        if not isinstance(itos, list) or not all(isinstance(token, str) for token in itos):
            raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: its itos must be a list of strings")
        return len(itos)
    try:
        return tokenizer_from_dict(dict(values)).vocab_size
    except (TypeError, ValueError, KeyError, OSError) as error:
        raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: {error}") from None


def _config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: checkpoint {saved.get(k)!r} vs model {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)
    ]


def check_compatible(
    checkpoint: Mapping[str, Any], model_config: Any = None, tokenizers: Mapping[str, Any] | None = None
) -> None:
    """Raise :class:`~companion.errors.CheckpointError` if ``checkpoint`` was written for another model config or
    vocabulary.

    ``model_config`` is a TransformerConfig (or its dict); ``tokenizers`` is ``{"src", "tgt"}`` tokenizers or
    dicts. Either may be None to skip that check.
    """
    if model_config is not None:
        current = model_config.to_dict() if hasattr(model_config, "to_dict") else dict(model_config)
        differences = _config_differences(checkpoint["model_config"], current)
        if differences:
            raise CheckpointError(
                "the checkpoint was written for another model configuration: " + "; ".join(differences)
            )
    if tokenizers is not None:
        saved = checkpoint.get("tokenizers")
        current_tok = _tokenizer_dicts(tokenizers)
        if saved is None:
            raise CheckpointError(
                "the checkpoint has no vocabularies (a synthetic-task model), but tokenizers were given"
            )
        assert current_tok is not None
        for side in ("src", "tgt"):
            if saved[side] != current_tok[side]:
                raise CheckpointError(
                    f"the checkpoint's {side} vocabulary differs from the given tokenizer "
                    f"({_describe_tokenizer(saved[side])} vs {_describe_tokenizer(current_tok[side])}); "
                    "it was trained with another vocabulary"
                )


def _describe_tokenizer(values: Mapping[str, Any]) -> str:
    size = len(values.get("itos", ())) or values.get("vocab_size") or "?"
    extra = f", {values['language']}" if "language" in values else ""
    return f"{values.get('type', '?')} tokenizer{extra}, {size} entries"


def load_model_weights(model: nn.Module, checkpoint: Mapping[str, Any]) -> None:
    """Copy the checkpoint's weights into ``model`` after checking that the configurations agree."""
    check_compatible(checkpoint, model_config=getattr(model, "config", None))
    try:
        model.load_state_dict(checkpoint["model_state"])
    except RuntimeError as error:
        details = " ".join(str(error).split())[:500]
        raise CheckpointError(f"the checkpoint's weights do not fit the model: {details}") from error


def model_from_checkpoint(
    checkpoint: Mapping[str, Any] | str | os.PathLike, device: str | torch.device = "cpu"
) -> Transformer:
    """Build the :class:`~companion.model.Transformer` a checkpoint describes, with its weights, in eval mode.

    ``checkpoint`` is a file (read with :func:`load_checkpoint`) or a checkpoint dict, which gets the same checks
    (:func:`check_checkpoint`) except the digest. ``device`` (``"cpu"``, ``"cuda[:N]"``, ``"mps"``, ``"auto"``)
    is resolved first, as the command line does: a missing backend is a
    :class:`~companion.errors.DeviceUnavailableError`, a name that is no device a
    :class:`~companion.errors.ConfigError`.
    """
    target = resolve_device(device)
    if isinstance(checkpoint, Mapping):
        config = check_checkpoint(checkpoint)
    else:
        checkpoint = load_checkpoint(checkpoint)
        config = check_model_config(checkpoint["model_config"])
    model = Transformer(config)
    load_model_weights(model, checkpoint)
    return model.to(target).eval()


def tokenizers_from_checkpoint(checkpoint: Mapping[str, Any]) -> tuple[Any, Any]:
    """The ``(src, tgt)`` tokenizers saved in a checkpoint (CheckpointError if it has none, if one is damaged, or
    if one's size is not the vocabulary size of the checkpoint's model)."""
    saved = checkpoint.get("tokenizers")
    if not saved:
        raise CheckpointError(
            "this checkpoint has no vocabularies (it was trained on a synthetic task), so it "
            "cannot translate or evaluate text"
        )
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"the checkpoint's tokenizers entry must be a dict, got {type(saved).__name__}")
    config = checkpoint.get("model_config")
    rebuilt = []
    for side in ("src", "tgt"):
        if side not in saved:
            raise CheckpointError(f"the checkpoint's tokenizers lack the {side!r} entry; the file is damaged")
        try:
            tokenizer = tokenizer_from_dict(saved[side])
        except (TypeError, ValueError, KeyError, OSError) as error:
            raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: {error}") from None
        wanted = config.get(f"{side}_vocab_size") if isinstance(config, Mapping) else None
        if wanted is not None and tokenizer.vocab_size != wanted:
            raise CheckpointError(
                f"the checkpoint's {side} tokenizer has {tokenizer.vocab_size} entries but model_config's "
                f"{side}_vocab_size {wanted}: the vocabulary does not belong to these weights"
            )
        rebuilt.append(tokenizer)
    return rebuilt[0], rebuilt[1]


# --------------------------------------------------------------------------------------------------------
# Folders of step checkpoints
# --------------------------------------------------------------------------------------------------------
def checkpoint_path(folder: str | os.PathLike, step: int) -> Path:
    """``folder/step_XXXXXXXX.pt`` (zero-padded so that names sort by step)."""
    return Path(folder) / f"step_{step:08d}.pt"


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """The ``step_*.pt`` files in ``folder``, oldest step first (temp files of interrupted writes ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The newest step checkpoint in ``folder`` (None if there is none)."""
    found = list_checkpoints(folder)
    return found[-1] if found else None


def latest_valid_checkpoint(folder: str | os.PathLike) -> tuple[Path | None, list[str]]:
    """The newest step checkpoint in ``folder`` that loads: whole, digest intact, every tensor finite.

    Returns ``(path or None, reasons)``, where ``reasons`` says why each newer file was passed over.
    """
    reasons = []
    for path in reversed(list_checkpoints(folder)):
        try:
            load_checkpoint(path)
        except CheckpointError as error:
            reasons.append(str(error))
            continue
        return path, reasons
    return None, reasons


def prune_checkpoints(folder: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` step checkpoints (and stale temp files); returns the deleted."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last <= 0:
        raise ValueError(f"keep_last must be a positive integer, got {keep_last!r}")
    found = list_checkpoints(folder)
    doomed = found[:-keep_last]
    doomed += [p for p in Path(folder).glob(".step_*.pt.*.tmp") if p.is_file()]  # left by killed writers
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


# --------------------------------------------------------------------------------------------------------
# Averaging
# --------------------------------------------------------------------------------------------------------
def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict[str, Any]:
    """Average the weights of several checkpoints of one run (the paper averaged the last 5 or 20).

    All checkpoints must share the model configuration and vocabularies. Floating-point tensors are averaged
    (accumulated in float64); integer buffers are taken from the last checkpoint. Returns a checkpoint dict
    (metadata of the last one, no trainer state, ``averaged_from`` listing the files) that
    ``write_checkpoint`` can save and :func:`model_from_checkpoint` can load.
    """
    if isinstance(paths, (str, os.PathLike)) or not isinstance(paths, Sequence) or not paths:
        raise ValueError(f"paths must be a non-empty list of checkpoint files, got {paths!r}")
    sums: dict[str, torch.Tensor] = {}
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:
            first = checkpoint
        else:
            try:
                check_compatible(checkpoint, model_config=first["model_config"], tokenizers=first.get("tokenizers"))
            except CheckpointError as error:
                raise CheckpointError(f"cannot average {path} with {paths[0]}: {error}") from None
            if first.get("tokenizers") is None and checkpoint.get("tokenizers") is not None:
                raise CheckpointError(f"cannot average {path} with {paths[0]}: only one has vocabularies")
        for name, tensor in checkpoint["model_state"].items():
            if tensor.is_floating_point():
                sums[name] = sums[name] + tensor.double() if name in sums else tensor.double()
        last = checkpoint
    assert last is not None
    count = len(paths)
    averaged = {
        name: (sums[name] / count).to(tensor.dtype) if name in sums else tensor
        for name, tensor in last["model_state"].items()
    }
    result = {k: v for k, v in last.items() if k not in ("trainer_state", "content_sha256")}
    result.update(model_state=averaged, trainer_state=None, averaged_from=[Path(p).name for p in paths])
    return result
