"""Checkpoint files: atomic writes (temp file, fsync, ``os.replace``), the umask, and the folders of step
checkpoints (naming, listing, pruning, the weights a run folder stands for)."""

from __future__ import annotations

import errno
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, RunError

_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


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


def run_weights(folder: str | os.PathLike, *, name: str = "folder") -> Path:
    """The weights a run folder stands for: its ``averaged.pt`` when that is at least as new as its latest step
    checkpoint (in ``checkpoints/``, or in the folder itself), else that checkpoint, with a warning when an older
    ``averaged.pt`` is passed over (a run resumed after averaging leaves newer weights). A
    :class:`~companion.errors.RunError` that calls the folder ``name`` when it holds neither."""
    folder = Path(folder)
    averaged = folder / "averaged.pt"
    latest = latest_checkpoint(folder / "checkpoints") or latest_checkpoint(folder)
    if latest is None:
        if averaged.is_file():
            return averaged
        raise RunError(f"{name} {folder} is a folder without averaged.pt or checkpoints/step_*.pt")
    if averaged.is_file():
        if averaged.stat().st_mtime_ns >= latest.stat().st_mtime_ns:
            return averaged
        warnings.warn(
            f"{averaged} is older than {latest} (the run was resumed after averaging): using {latest.name}; "
            f"'companion train --resume --out {folder}' to the end writes a new averaged.pt",
            stacklevel=3,
        )
    return latest


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
