"""``companion train``: :func:`train_run`, a fresh run or ``--resume``, one process or several."""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._validation import check_integer
from ..errors import ConfigError, RunError
from .config import RunConfig, _check_known
from .folder import _make_out_dir, prepare_out_dir
from .identity import _check_same_data, build_run_data
from .lock import RunFolderLock


def _write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def train_run(
    options: Mapping[str, Any] | RunConfig, *, command: Sequence[str] | None = None, stream: TextIO | None = None
) -> dict[str, Any]:
    """Run ``companion train``: train a model into the folder ``out`` and return a summary.

    Args:
        options: the options chosen for this run, by :class:`RunConfig` field name (what the user typed:
            presets fill the rest), or a whole :class:`RunConfig`. With ``resume=True`` the recorded run's
            options are used, and the given ones may differ from them only where the option is resumable.
        command: the command-line words after ``companion``, recorded in ``run.json`` and the checkpoints
            (default: ``sys.argv[1:]``).
        stream: where the start and end lines go (default: stdout).

    Returns:
        The :meth:`~companion.train.Trainer.train` summary (steps, epochs, train_seconds, tokens_seen,
        valid, checkpoint) plus ``wall_seconds`` and, with ``average_last > 1``, ``averaged`` (the path of
        ``averaged.pt``) and ``averaged_from``.

    Raises:
        ConfigError: an option has an invalid value.
        RunError: the folder or the resume does not work out.
        DataUnavailableError: the data cannot be found (likewise the devices' and training's own errors,
            e.g. TrainingDivergedError).
    """
    import torch

    from .._version import __version__
    from ..checkpoint import average_checkpoints, list_checkpoints, load_checkpoint, write_checkpoint
    from ..devices import cleanup_distributed, setup_distributed
    from ..model import Transformer
    from ..train import Trainer

    given = options.to_dict() if isinstance(options, RunConfig) else dict(options)
    _check_known(RunConfig, given)
    stream = stream or sys.stdout
    if not given.get("out"):
        raise RunError("--out DIR is required (where checkpoints and logs go)")
    resume = bool(given.get("resume", False))
    config = None if resume else RunConfig(**given)  # checks every value before anything is touched
    out = Path(given["out"])
    if given.get("threads"):
        torch.set_num_threads(check_integer("--threads", given["threads"], minimum=1))
    rank, world_size, _ = setup_distributed(given.get("device", RunConfig.device))
    lock: RunFolderLock | None = None
    try:
        _make_out_dir(out, resume, bool(given.get("overwrite", False)))
        if rank == 0:  # one lock per run; the other processes of a torchrun job belong to the same run
            lock = RunFolderLock(out)
            lock.acquire()
            if lock.stale:
                warnings.warn(
                    f"{lock.path}: replaced a stale lock left by a run that ended without removing it ({lock.stale})",
                    stacklevel=2,
                )
        resume_from = prepare_out_dir(out, resume, bool(given.get("overwrite", False)), rank == 0)
        saved_tokenizers, recorded_data = None, None
        if resume_from is not None:
            checkpoint = load_checkpoint(resume_from)
            recorded = dict(checkpoint.get("run_info", {}).get("args") or {})
            if not recorded:
                raise RunError(f"{resume_from} does not record the flags of its run; cannot --resume it")
            config = RunConfig.resumed(recorded, given)
            _check_limits_ahead(config, checkpoint, resume_from)
            saved_tokenizers = checkpoint.get("tokenizers")
            recorded_data = checkpoint.get("run_info", {}).get("data")
        assert config is not None
        if world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # rank 0 has cleaned the folder

        started = time.time()
        data = build_run_data(config, saved_tokenizers, rank, world_size)
        _check_same_data(recorded_data, data.identity, config)
        if config.accum_steps > len(data.train_batches):
            raise ConfigError(
                f"--accum-steps {config.accum_steps} is more than the {len(data.train_batches)} "
                "batches of an epoch: one optimizer step would see some batches twice. Lower "
                "--accum-steps or --max-tokens"
            )
        src_vocab, tgt_vocab = data.vocab_sizes
        torch.manual_seed(config.seed)
        model = Transformer(config.model_config(src_vocab, tgt_vocab))
        command = list(command) if command is not None else sys.argv[1:]
        args = config.to_dict()
        run_info = {
            "task": config.task,
            "src": config.src,
            "tgt": config.tgt,
            "args": args,
            "command": command,
            "world_size": world_size,
            "data": data.identity,
        }
        trainer = Trainer(
            model,
            config.train_config(),
            data.train_batches,
            data.valid_batches,
            out_dir=out,
            tokenizers=data.tokenizers,
            run_info=run_info,
        )
        if resume_from is not None:
            trainer.load_checkpoint(resume_from)
        if rank == 0:
            _write_json_atomic(
                out / "run.json",
                {
                    "companion_version": __version__,
                    "torch_version": str(torch.__version__),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "command": ["companion", "train", *command],
                    "args": args,
                    "world_size": world_size,
                    "device": str(trainer.device),
                    "model_parameters": model.num_parameters(),
                    "train_batches": len(data.train_batches),
                    "resumed_from": str(resume_from) if resume_from else None,
                    "data": data.identity,
                },
            )
            print(
                f"companion train: {config.task} {config.src}->{config.tgt if config.task == 'multi30k' else ''}"
                f" preset={config.preset} params={model.num_parameters():,} vocab={src_vocab}/{tgt_vocab} "
                f"batches/epoch={len(data.train_batches)} device={trainer.device} world_size={world_size}"
                + (f" resumed at step {trainer.state.step}" if resume_from else ""),
                file=stream,
                flush=True,
            )
        summary = trainer.train()
        average_last = config.average_last or 1
        if rank == 0 and average_last > 1:
            paths = list_checkpoints(out / "checkpoints")[-average_last:]
            if len(paths) < average_last and getattr(config, "_average_last_chosen", True):
                warnings.warn(
                    f"--average-last {average_last}: the run wrote only {len(paths)} "
                    "checkpoint(s), so averaged.pt averages those; write more with --save-every or "
                    "--save-every-minutes",
                    stacklevel=2,
                )
            averaged = average_checkpoints(paths)
            summary["averaged"] = str(write_checkpoint(averaged, out / "averaged.pt"))
            summary["averaged_from"] = [p.name for p in paths]
        summary["wall_seconds"] = time.time() - started
        if rank == 0:
            _print_summary(summary, stream)
        return summary
    finally:
        if lock is not None:
            lock.release()
        cleanup_distributed()


def _check_limits_ahead(config: RunConfig, checkpoint: Mapping[str, Any], path: Path) -> None:
    """RunError if the resumed run has already reached its step or epoch limit (nothing left to train: it
    would only rewrite its last checkpoint)."""
    step = int(checkpoint.get("step", 0))
    epoch = ((checkpoint.get("trainer_state") or {}).get("state") or {}).get("epoch", 0)
    if config.max_steps is not None and config.max_steps <= step:
        raise RunError(
            f"--resume: {path.name} is at step {step}, and --max-steps {config.max_steps} is not beyond "
            "it; give a larger --max-steps to train further"
        )
    if config.max_epochs is not None and config.max_epochs <= epoch:
        raise RunError(
            f"--resume: {path.name} has finished {epoch} epoch(s), and --max-epochs {config.max_epochs} "
            "is not beyond it; give a larger --max-epochs to train further"
        )


def _print_summary(summary: Mapping[str, Any], stream: TextIO) -> None:
    valid = summary.get("valid") or {}
    ppl = f" valid_ppl={valid['valid_ppl']:.2f}" if valid else ""
    print(
        f"companion train: stopped ({summary['stop_reason']}) at step {summary['steps']} after "
        f"{summary['train_seconds'] / 60:.1f} min of training, epoch {summary['epochs']:.2f}{ppl}; "
        f"checkpoint {summary['checkpoint']}"
        + (f"; averaged {len(summary['averaged_from'])} -> {summary['averaged']}" if "averaged" in summary else ""),
        file=stream,
        flush=True,
    )
