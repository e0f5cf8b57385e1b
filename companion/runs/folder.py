"""The output folder of a training run: what a run writes there, and the checks before it writes anything.

:func:`prepare_out_dir` checks the request once (``--resume`` and ``--overwrite`` together, a file in the way, a
folder that cannot be made), takes the folder's lock (:class:`~companion.runs.RunFolderLock`) and only then
looks at what the folder holds: a run to continue, a run to replace, or nothing yet.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..checkpoint import latest_checkpoint, list_checkpoints
from ..errors import RunError
from .lock import RunFolderLock

__all__ = ["RUN_ARTIFACTS", "RUN_RECORD", "RunFolder", "prepare_out_dir", "run_files"]

# What a run writes into its folder: the record, the metrics log, the averaged model, and step checkpoints
# (checkpoints/step_XXXXXXXX.pt). --overwrite deletes these, by name, and nothing else.
RUN_RECORD = "run.json"
RUN_ARTIFACTS = (RUN_RECORD, "metrics.jsonl", "averaged.pt", "checkpoints")
# Temp files that a killed writer of the run leaves behind (atomic writes: a temp file, then a rename).
_LEFTOVER_PATTERNS = (".run.json.tmp", ".metrics.jsonl.tmp", ".averaged.pt.*.tmp")
_CHECKPOINT_LEFTOVERS = ".step_*.pt.*.tmp"


@dataclass
class RunFolder:
    """A prepared output folder: its path, the checkpoint to resume from (None: a fresh run) and the lock that
    this process holds on it (None on the other processes of a ``torchrun`` job); ``created``: the run made the
    folder. ``release()`` drops the lock."""

    path: Path
    resume_from: Path | None
    lock: RunFolderLock | None
    created: bool = False
    _discarded: bool = field(default=False, repr=False)

    def release(self) -> None:
        """Release the folder's lock, if this run holds it; a folder that the run made and then discarded
        (:meth:`discard_unstarted_run`) goes too, when nothing else was put into it meanwhile."""
        if self.lock is not None:
            self.lock.release()
            if self._discarded and self.created:
                for folder in (self.path / "checkpoints", self.path):
                    try:
                        folder.rmdir()  # only an empty folder: anything else in it stays, and so does it
                    except OSError:
                        pass

    def discard_unstarted_run(self) -> None:
        """Delete what a fresh run wrote (its record, its log) when it ended before its first checkpoint, so that
        nothing blocks a retry into the same folder (and nothing is left of a folder it made). Does nothing once a
        checkpoint exists."""
        if self.resume_from is None and self.lock is not None and not list_checkpoints(self.path / "checkpoints"):
            _delete(run_files(self.path))
            self._discarded = True


def prepare_out_dir(out: str | os.PathLike, resume: bool, overwrite: bool, is_main: bool = True) -> RunFolder:
    """Check and lock the output folder of a training run; returns it with the checkpoint to resume from.

    Refuses (:class:`~companion.errors.RunError`) to write into a folder that holds a run unless ``resume``
    (continue it: its latest checkpoint is returned) or ``overwrite`` (the run's own files, ``RUN_ARTIFACTS``, are
    deleted by the main process; other files stay). The main process (``is_main``) holds the folder's lock until
    ``RunFolder.release()``; a second run into the same folder gets :class:`~companion.errors.RunLockedError`.
    """
    out = Path(out)
    created = not out.exists()
    _check_request(out, resume, overwrite)
    lock = _lock(out) if is_main else None
    try:
        return RunFolder(out, _claim(out, resume, overwrite, is_main), lock, created=created)
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
        foreign = run_files(out)
        if foreign:
            raise RunError(
                f"--out {out} holds {_describe_files(out, foreign)} but no {RUN_RECORD}: not a run of companion "
                "train (or its record was deleted), so it is neither continued nor replaced. Choose another folder, "
                "or move those files away"
            )
        if resume:
            raise _nothing_to_resume(out)
        return None
    if resume:
        latest = latest_checkpoint(out / "checkpoints")
        if latest is None:
            raise RunError(
                f"--resume: {out} holds a run but no checkpoint to resume from; pass --overwrite to start afresh"
            )
        if is_main:
            _delete(_leftovers(out))  # a killed session's temp files: never read, now cleaned up
        return latest
    doomed = run_files(out)
    if not overwrite:
        raise RunError(
            f"--out {out} already holds a run ({_describe_run(out)}); pass --resume to continue it, --overwrite to "
            f"replace it (it deletes {_describe_files(out, doomed)}; nothing else), or choose another folder"
        )
    if is_main:
        _delete(doomed)
        checkpoints = out / "checkpoints"
        if checkpoints.is_dir() and not checkpoints.is_symlink() and not any(checkpoints.iterdir()):
            checkpoints.rmdir()
    return None


def run_files(out: str | os.PathLike) -> list[Path]:
    """The files of a run in ``out``, all that ``--overwrite`` deletes: ``run.json``, ``metrics.jsonl``,
    ``averaged.pt``, the step checkpoints ``checkpoints/step_XXXXXXXX.pt`` (also through a symlinked
    ``checkpoints/``) and the temp files that interrupted writes of these leave. Other files are not the run's."""
    out = Path(out)
    found = [out / name for name in RUN_ARTIFACTS[:3] if (out / name).is_file()]
    return found + list_checkpoints(out / "checkpoints") + _leftovers(out)


def _leftovers(out: Path) -> list[Path]:
    """Temp files that writes of the run's files leave when they are killed (never a finished file)."""
    found = [p for pattern in _LEFTOVER_PATTERNS for p in sorted(out.glob(pattern)) if p.is_file()]
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir():
        found += [p for p in sorted(checkpoints.glob(_CHECKPOINT_LEFTOVERS)) if p.is_file()]
    return found


def _nothing_to_resume(out: Path) -> RunError:
    return RunError(f"--resume: {out} holds no run to resume")


def _holds_run(out: Path) -> bool:
    return (out / RUN_RECORD).is_file()


def _describe_run(out: Path) -> str:
    found = list_checkpoints(out / "checkpoints")
    latest = f", latest {found[-1].name}" if found else ""
    return f"{len(found)} checkpoint(s){latest}"


def _describe_files(out: Path, files: list[Path]) -> str:
    """``run.json, metrics.jsonl and 3 step checkpoint(s) in checkpoints/``."""
    steps = [p for p in files if p.parent != out]
    names = [p.name for p in files if p.parent == out]
    if steps:
        names.append(f"{len(steps)} file(s) in checkpoints/ ({steps[0].name}{', ...' if len(steps) > 1 else ''})")
    if not names:
        return "nothing"
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


def _delete(files: list[Path]) -> None:
    for path in files:
        path.unlink(missing_ok=True)
