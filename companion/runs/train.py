"""``companion train``: :func:`train_run`, a fresh run or ``--resume``, one process or several under ``torchrun``.

:func:`train_run` reads top to bottom: check the options, prepare and lock the folder, settle the config (the
recorded one when resuming), build the data and the model, record the run, train, average the last checkpoints.
The helpers below it do one step each.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist

from .._version import __version__
from ..checkpoint import average_checkpoints, list_checkpoints, load_checkpoint, write_checkpoint
from ..devices import cleanup_distributed, setup_distributed
from ..errors import ConfigError, RunError
from ..model import Transformer
from ..train import TrainConfig, Trainer
from .config import RunConfig
from .folder import prepare_out_dir
from .identity import RunData, build_run_data, check_same_data

__all__ = ["train_run"]


def train_run(
    options: Mapping[str, Any] | RunConfig, *, command: Sequence[str] | None = None, stream: TextIO | None = None
) -> dict[str, Any]:
    """Run ``companion train``: train a model into the folder ``out`` and return a summary.

    Args:
        options: the options chosen for this run, by field name (what the user typed: presets fill the rest;
            see :meth:`RunConfig.from_options`), or a whole :class:`RunConfig`. With ``resume=True`` the recorded
            run's options are used, and the given ones may differ from them only where the option is resumable.
        command: the command-line words after ``companion``, recorded in ``run.json`` and the checkpoints
            (default: ``sys.argv[1:]``).
        stream: where the start and end lines go (default: stdout).

    Returns:
        The :meth:`~companion.train.Trainer.train` summary (steps, epochs, train_seconds, tokens_seen,
        valid, checkpoint) plus ``wall_seconds`` and, when checkpoints are averaged, ``averaged`` (the path of
        ``averaged.pt``) and ``averaged_from``.

    Raises:
        ConfigError: an option has an invalid value.
        RunError: the folder or the resume does not work out.
        DataUnavailableError: the data cannot be found (likewise the devices' and training's own errors,
            e.g. TrainingDivergedError).
    """
    given = options.to_record() if isinstance(options, RunConfig) else dict(options)
    stream = stream or sys.stdout
    command = list(command) if command is not None else sys.argv[1:]
    resume = bool(given.get("resume", False))
    config = None if resume else RunConfig.from_options(given)  # checks every value before anything is touched
    out = _out_dir(given)
    rank, world_size, _ = setup_distributed(given.get("device", TrainConfig.device))
    folder = None
    try:
        folder = prepare_out_dir(out, resume, bool(given.get("overwrite", False)), is_main=rank == 0)
        checkpoint = None
        if folder.resume_from is not None:
            checkpoint = load_checkpoint(folder.resume_from)
            config = _resumed_config(checkpoint, given, folder.resume_from)
        assert config is not None
        _set_threads(config, given)
        if world_size > 1:
            dist.barrier()  # rank 0 has cleaned the folder
        started = time.time()
        data = build_run_data(config, checkpoint.get("tokenizers") if checkpoint else None, rank, world_size)
        check_same_data(_recorded(checkpoint, "data"), data.identity, config.data.data_dir)
        _check_accumulation(config, data)
        torch.manual_seed(config.train.seed)
        model = Transformer(config.model_config(*data.vocab_sizes))
        run_info = _run_info(config, command, world_size, data)
        trainer = Trainer(
            model, config.train, data.train_batches, data.valid_batches,
            out_dir=out, tokenizers=data.tokenizers, run_info=run_info,
        )  # fmt: skip
        if folder.resume_from is not None:
            trainer.load_checkpoint(folder.resume_from)
        if rank == 0:
            _write_run_record(out, run_info, trainer, data, folder.resume_from)
            _print_start(config, trainer, data, stream, resumed=folder.resume_from is not None)
        summary = trainer.train()
        if rank == 0:
            summary.update(_average_last_checkpoints(config, out))
        summary["wall_seconds"] = time.time() - started
        if rank == 0:
            _print_summary(summary, stream)
        return summary
    finally:
        if folder is not None:
            folder.release()
        cleanup_distributed()


def _out_dir(given: Mapping[str, Any]) -> Path:
    if not given.get("out"):
        raise RunError("--out DIR is required (where checkpoints and logs go)")
    return Path(given["out"])


def _recorded(checkpoint: Mapping[str, Any] | None, key: str) -> Any:
    """An entry of the checkpoint's ``run_info`` (None without a checkpoint or entry)."""
    return (checkpoint or {}).get("run_info", {}).get(key)


def _resumed_config(checkpoint: Mapping[str, Any], given: Mapping[str, Any], path: Path) -> RunConfig:
    """The recorded run's config with the given resumable options, after checking there is training left."""
    recorded = dict(_recorded(checkpoint, "args") or {})
    if not recorded:
        raise RunError(f"{path} does not record the flags of its run; cannot --resume it")
    config = RunConfig.resumed(recorded, given)
    _check_limits_ahead(config.train, checkpoint, path)
    return config


def _set_threads(config: RunConfig, given: Mapping[str, Any]) -> None:
    """``--threads``, when given (a resumed run keeps PyTorch's choice unless the flag is given again)."""
    if given.get("threads") and config.threads:
        torch.set_num_threads(config.threads)


def _check_limits_ahead(train: TrainConfig, checkpoint: Mapping[str, Any], path: Path) -> None:
    """RunError if the resumed run has already reached its step or epoch limit (nothing left to train: it
    would only rewrite its last checkpoint)."""
    step = int(checkpoint.get("step", 0))
    epoch = ((checkpoint.get("trainer_state") or {}).get("state") or {}).get("epoch", 0)
    if train.max_steps is not None and train.max_steps <= step:
        raise RunError(
            f"--resume: {path.name} is at step {step}, and --max-steps {train.max_steps} is not beyond "
            "it; give a larger --max-steps to train further"
        )
    if train.max_epochs is not None and train.max_epochs <= epoch:
        raise RunError(
            f"--resume: {path.name} has finished {epoch} epoch(s), and --max-epochs {train.max_epochs} "
            "is not beyond it; give a larger --max-epochs to train further"
        )


def _check_accumulation(config: RunConfig, data: RunData) -> None:
    if config.train.accum_steps > len(data.train_batches):
        raise ConfigError(
            f"--accum-steps {config.train.accum_steps} is more than the {len(data.train_batches)} "
            "batches of an epoch: one optimizer step would see some batches twice. Lower "
            "--accum-steps or --max-tokens"
        )


def _run_info(config: RunConfig, command: list[str], world_size: int, data: RunData) -> dict[str, Any]:
    """What every checkpoint records about its run (``args``: the flat config, :meth:`RunConfig.to_record`)."""
    return {
        "task": config.data.task,
        "src": config.data.src,
        "tgt": config.data.tgt,
        "args": config.to_record(),
        "command": command,
        "world_size": world_size,
        "data": data.identity,
    }


def _write_run_record(
    out: Path, run_info: Mapping[str, Any], trainer: Trainer, data: RunData, resumed_from: Path | None
) -> None:
    """``DIR/run.json``: the run's options, versions, device and data (written atomically)."""
    _write_json_atomic(
        out / "run.json",
        {
            "companion_version": __version__,
            "torch_version": str(torch.__version__),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": ["companion", "train", *run_info["command"]],
            "args": run_info["args"],
            "world_size": run_info["world_size"],
            "device": str(trainer.device),
            "model_parameters": trainer.model.num_parameters(),
            "train_batches": len(data.train_batches),
            "resumed_from": str(resumed_from) if resumed_from else None,
            "data": data.identity,
        },
    )


def _write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _average_last_checkpoints(config: RunConfig, out: Path) -> dict[str, Any]:
    """``DIR/averaged.pt`` from the last :attr:`RunConfig.average_count` checkpoints (nothing when that is 1).

    Warns when the run wrote fewer checkpoints than an explicitly given ``--average-last`` asks for."""
    count = config.average_count
    if count <= 1:
        return {}
    paths = list_checkpoints(out / "checkpoints")[-count:]
    if len(paths) < count and config.average_last is not None:
        warnings.warn(
            f"--average-last {count}: the run wrote only {len(paths)} checkpoint(s), so averaged.pt averages "
            "those; write more with --save-every or --save-every-minutes",
            stacklevel=3,
        )
    averaged = write_checkpoint(average_checkpoints(paths), out / "averaged.pt")
    return {"averaged": str(averaged), "averaged_from": [p.name for p in paths]}


def _print_start(config: RunConfig, trainer: Trainer, data: RunData, stream: TextIO, *, resumed: bool) -> None:
    src_vocab, tgt_vocab = data.vocab_sizes
    direction = f"{config.data.src}->{config.data.tgt if config.data.task == 'multi30k' else ''}"
    print(
        f"companion train: {config.data.task} {direction} preset={config.preset} "
        f"params={trainer.model.num_parameters():,} vocab={src_vocab}/{tgt_vocab} "
        f"batches/epoch={len(data.train_batches)} device={trainer.device} world_size={trainer.world_size}"
        + (f" resumed at step {trainer.state.step}" if resumed else ""),
        file=stream,
        flush=True,
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
