"""The output folder of a training run: what a run writes there, and the checks before it writes anything.

:func:`prepare_out_dir` checks the request once (``--resume`` and ``--overwrite`` together, a file in the way, a
folder that cannot be made), takes the folder's lock (:class:`~companion.runs.RunFolderLock`) and only then
looks at what the folder holds: a run to continue, a run to replace, or nothing yet.
"""

from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import latest_checkpoint, list_checkpoints
from ..errors import RunError
from .lock import RunFolderLock

__all__ = ["RUN_ARTIFACTS", "RunFolder", "prepare_out_dir"]

# What a run writes into its folder (all that --overwrite deletes).
RUN_ARTIFACTS = ("run.json", "metrics.jsonl", "checkpoints", "averaged.pt")


@dataclass
class RunFolder:
    """A prepared output folder: its path, the checkpoint to resume from (None: a fresh run) and the lock that
    this process holds on it (None on the other processes of a ``torchrun`` job). :meth:`release` drops the lock."""

    path: Path
    resume_from: Path | None
    lock: RunFolderLock | None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def prepare_out_dir(out: str | os.PathLike, resume: bool, overwrite: bool, is_main: bool = True) -> RunFolder:
    """Check and lock the output folder of a training run; returns it with the checkpoint to resume from.

    Refuses (:class:`~companion.errors.RunError`) to write into a folder that holds a run unless ``resume``
    (continue it: its latest checkpoint is returned) or ``overwrite`` (the run's own files, ``RUN_ARTIFACTS``, are
    deleted by the main process; other files stay). The main process (``is_main``) holds the folder's lock until
    :meth:`RunFolder.release`; a second run into the same folder gets :class:`~companion.errors.RunLockedError`.
    """
    out = Path(out)
    _check_request(out, resume, overwrite)
    lock = _lock(out) if is_main else None
    try:
        return RunFolder(out, _claim(out, resume, overwrite, is_main), lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _check_request(out: Path, resume: bool, overwrite: bool) -> None:
    """What can be told before looking inside: contradicting flags, a file in the way; creates a fresh run's
    folder."""
    if resume and overwrite:
        raise RunError("--resume and --overwrite contradict each other; pass one of them")
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} exists and is not a folder")
    if resume:
        if not out.is_dir():
            raise _nothing_to_resume(out)
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"--out {out}: cannot create the folder ({error.strerror or error})") from None


def _lock(out: Path) -> RunFolderLock:
    """The folder's lock, taken (one lock per run: the other processes of a torchrun job belong to it)."""
    lock = RunFolderLock(out)
    lock.acquire()
    if lock.stale:
        warnings.warn(
            f"{lock.path}: replaced a stale lock left by a run that ended without removing it ({lock.stale})",
            stacklevel=3,
        )
    return lock


def _claim(out: Path, resume: bool, overwrite: bool, is_main: bool) -> Path | None:
    """The checkpoint to resume from, after deciding what to do with what the (locked) folder holds."""
    if not _holds_run(out):
        if resume:
            raise _nothing_to_resume(out)
        return None
    if resume:
        latest = latest_checkpoint(out / "checkpoints")
        if latest is None:
            raise RunError(
                f"--resume: {out} holds a run but no checkpoint to resume from; pass --overwrite to start afresh"
            )
        return latest
    if not overwrite:
        raise RunError(
            f"--out {out} already holds a run ({_describe_run(out)}); pass --resume to continue "
            "it, --overwrite to replace it, or choose another folder"
        )
    if is_main:
        _delete_run(out)
    return None


def _nothing_to_resume(out: Path) -> RunError:
    return RunError(f"--resume: {out} holds no run to resume")


def _holds_run(out: Path) -> bool:
    return any((out / name).exists() for name in RUN_ARTIFACTS)


def _describe_run(out: Path) -> str:
    found = list_checkpoints(out / "checkpoints")
    latest = f", latest {found[-1].name}" if found else ""
    return f"{len(found)} checkpoint(s){latest}"


def _delete_run(out: Path) -> None:
    for name in RUN_ARTIFACTS:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
