"""The output folder of a training run: what a run writes there and the checks before it does."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..errors import RunError

# What a run writes into its folder (all that --overwrite deletes).
RUN_ARTIFACTS = ("run.json", "metrics.jsonl", "checkpoints", "averaged.pt")


def _holds_run(out: Path) -> bool:
    return any((out / name).exists() for name in RUN_ARTIFACTS)


def _describe_run(out: Path) -> str:
    from ..checkpoint import list_checkpoints

    found = list_checkpoints(out / "checkpoints")
    latest = f", latest {found[-1].name}" if found else ""
    return f"{len(found)} checkpoint(s){latest}"


def prepare_out_dir(out: str | os.PathLike, resume: bool, overwrite: bool, is_main: bool = True) -> Path | None:
    """Check the output folder of a training run; returns the checkpoint to resume from (or None).

    Refuses (:class:`~companion.errors.RunError`) to write into a folder that holds a run unless ``resume``
    (continue it: its latest checkpoint is returned) or ``overwrite`` (the run's own files,
    ``RUN_ARTIFACTS``, are deleted by the main process; other files stay).
    """
    from ..checkpoint import latest_checkpoint

    out = Path(out)
    if resume and overwrite:
        raise RunError("--resume and --overwrite contradict each other; pass one of them")
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} exists and is not a folder")
    if _holds_run(out):
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
            for name in RUN_ARTIFACTS:
                target = out / name
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
    elif resume:
        raise RunError(f"--resume: {out} holds no run to resume")
    return None


def _make_out_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """Create the output folder (a fresh run) or check that it is there (``--resume``), with clear errors."""
    if resume and overwrite:
        raise RunError("--resume and --overwrite contradict each other; pass one of them")
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} exists and is not a folder")
    if resume:
        if not out.is_dir():
            raise RunError(f"--resume: {out} holds no run to resume")
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"--out {out}: cannot create the folder ({error.strerror or error})") from None
