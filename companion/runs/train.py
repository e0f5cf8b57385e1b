"""``companion train``: :func:`train_run`, a fresh run or ``--resume``, one process or several under ``torchrun``.

:func:`train_run` reads top to bottom: check the options, prepare and lock the folder, settle the config (the
recorded one when resuming), build the data and the model, record the run, train, average the last checkpoints,
and for a translation run choose beam search's length penalty on the validation split (``companion choose-alpha``,
recorded in the checkpoint that ``translate`` and ``evaluate`` use). The helpers below it do one step each.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist

from .._version import __version__
from ..checkpoint import average_checkpoints, latest_checkpoint, list_checkpoints, load_checkpoint, write_checkpoint
from ..devices import cleanup_distributed, keep_freed_memory, setup_distributed
from ..errors import CompanionError, ConfigError, RunError
from ..model import Transformer
from ..train import TrainConfig, Trainer
from .choose import ChooseAlphaConfig, choose_alpha_run
from .config import RunConfig
from .folder import prepare_out_dir
from .identity import RunData, build_run_data, check_same_data
from .infer import PAPER_ALPHA
from .sections import TRANSLATION

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
        valid, checkpoint) plus ``wall_seconds`` (to the end of training and averaging); when checkpoints are
        averaged, ``averaged`` (the path of ``averaged.pt``) and ``averaged_from``; when beam search's length
        penalty was chosen on the validation split (translation runs, unless ``choose_alpha=False``),
        ``alpha_choice`` (``companion choose-alpha``'s record) and ``alpha_choice_seconds``.

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
            finished = _finished(config.train, checkpoint, folder.resume_from)
            if finished:  # nothing to train; what the run still owes is its averaged.pt
                has_valid = "valid" in (_recorded(checkpoint, "data") or {})
                return _finish_averaging(config, out, finished, stream, rank, has_valid)
        assert config is not None
        _set_threads(config, given)
        keep_freed_memory()  # freed step memory stays in the process (companion._allocator): faster CPU steps
        inexact = _inexact_resume(checkpoint, world_size) if checkpoint is not None else []
        if world_size > 1:
            dist.barrier()  # rank 0 has cleaned the folder
        started = time.time()
        saved = checkpoint.get("tokenizers") if checkpoint else None
        data = build_run_data(config, saved, rank, world_size, log=_say(stream) if rank == 0 else None)
        check_same_data(_recorded(checkpoint, "data"), data.identity, config.data)
        _check_accumulation(config, data)
        torch.manual_seed(config.train.seed)
        model = Transformer(config.model_config(*data.vocab_sizes))
        run_info = _run_info(config, command, world_size, data, inexact)
        trainer = Trainer(
            model, config.train, data.train_batches, data.valid_batches,
            out_dir=out, tokenizers=data.tokenizers, run_info=run_info,
        )  # fmt: skip
        if folder.resume_from is not None:
            trainer.load_checkpoint(folder.resume_from)
        if rank == 0:
            if folder.resume_from is not None:
                (out / "averaged.pt").unlink(missing_ok=True)  # it averages checkpoints that are no longer the last
            _write_run_record(out, run_info, trainer, data, folder.resume_from)
            _print_start(config, trainer, data, stream, resumed=folder.resume_from is not None)
        summary = _train(trainer, out)
        if rank == 0:
            summary.update(_average_last_checkpoints(config, out))
        summary["wall_seconds"] = time.time() - started
        if rank == 0:
            _print_summary(summary, stream)
            if config.data.task == TRANSLATION:
                summary.update(_choose_alpha(config, out, trainer.device, bool(data.valid_batches), stream))
        return summary
    except BaseException:
        if folder is not None:
            folder.discard_unstarted_run()  # a failed start leaves nothing that blocks a retry
        raise
    finally:
        if folder is not None:
            folder.release()
        cleanup_distributed()


def _train(trainer: Trainer, out: Path) -> dict[str, Any]:
    """``trainer.train()``, with a failing write outside the checkpoints (``metrics.jsonl`` on a full disk) as a
    RunError that names the file and the checkpoint training can resume from."""
    try:
        return trainer.train()
    except OSError as error:
        latest = latest_checkpoint(out / "checkpoints")
        where = f"{error.filename}: " if error.filename else ""
        resume = f"; --resume continues from {latest}" if latest else "; no checkpoint was written yet"
        raise RunError(f"training stopped: {where}{error.strerror or error}{resume}") from None


def _out_dir(given: Mapping[str, Any]) -> Path:
    if not given.get("out"):
        raise RunError("--out DIR is required (where checkpoints and logs go)")
    return Path(given["out"])


def _recorded(checkpoint: Mapping[str, Any] | None, key: str) -> Any:
    """An entry of the checkpoint's ``run_info`` (None without a checkpoint or entry)."""
    return (checkpoint or {}).get("run_info", {}).get(key)


def _resumed_config(checkpoint: Mapping[str, Any], given: Mapping[str, Any], path: Path) -> RunConfig:
    """The recorded run's config with the given resumable options."""
    recorded = dict(_recorded(checkpoint, "args") or {})
    if not recorded:
        raise RunError(f"{path} does not record the flags of its run; cannot --resume it")
    return RunConfig.resumed(recorded, given)


def _inexact_resume(checkpoint: Mapping[str, Any], world_size: int) -> list[str]:
    """Why this session cannot continue the run bit-identically (another number of processes or CPU threads:
    sums are reduced in another order), with the reasons of earlier sessions; warns about new ones."""
    earlier = list(_recorded(checkpoint, "inexact_resume") or [])
    reasons = []
    recorded_world = (checkpoint.get("trainer_state") or {}).get("world_size") or _recorded(checkpoint, "world_size")
    if recorded_world and recorded_world != world_size:
        reasons.append(f"{recorded_world} process(es) before step {checkpoint.get('step')}, {world_size} after")
    recorded_threads, threads = _recorded(checkpoint, "threads"), torch.get_num_threads()
    if recorded_threads and recorded_threads != threads:
        reasons.append(f"{recorded_threads} CPU thread(s) before step {checkpoint.get('step')}, {threads} after")
    if reasons:
        warnings.warn(
            f"--resume: {'; '.join(reasons)}: the result will not be bit-identical to an uninterrupted run (the same "
            "sums, added in another order); recorded in run.json as inexact_resume",
            stacklevel=3,
        )
    return earlier + reasons


def _say(stream: TextIO) -> Callable[[str], None]:
    """A run's progress line on ``stream``, as ``companion train: ...``."""
    return lambda message: print(f"companion train: {message}", file=stream, flush=True)


def _finished(train: TrainConfig, checkpoint: Mapping[str, Any], path: Path) -> str | None:
    """Why the resumed run has nothing left to train (its step or epoch limit is reached), or None."""
    step = int(checkpoint.get("step", 0))
    epoch = ((checkpoint.get("trainer_state") or {}).get("state") or {}).get("epoch", 0)
    if train.max_steps is not None and train.max_steps <= step:
        return (
            f"--resume: {path.name} is at step {step}, and --max-steps {train.max_steps} is not beyond "
            "it; give a larger --max-steps to train further"
        )
    if train.max_epochs is not None and train.max_epochs <= epoch:
        return (
            f"--resume: {path.name} has finished {epoch} epoch(s), and --max-epochs {train.max_epochs} "
            "is not beyond it; give a larger --max-epochs to train further"
        )
    return None


def _finish_averaging(
    config: RunConfig, out: Path, finished: str, stream: TextIO, rank: int, has_valid: bool
) -> dict[str, Any]:
    """A finished run whose ``averaged.pt`` is missing or stale (killed after its last checkpoint): write it, and
    for a translation run choose alpha into it as the run's end would have (``has_valid``: the run recorded a
    validation split); one killed while choosing alpha gets its choice. RunError (``finished`` says why) when there
    is nothing left to do."""
    count = config.average_count
    names = [p.name for p in list_checkpoints(out / "checkpoints")[-count:]]
    if count <= 1 or _averaged_from(out / "averaged.pt") == names:
        if not _alpha_left_to_choose(config, out, has_valid):
            raise RunError(finished)
        if rank != 0:
            return {}
        print(  # killed while choosing it, at the run's very end
            "companion train: the run had finished training and averaging; choosing beam search's length penalty, "
            "as its end would have",
            file=stream,
            flush=True,
        )
        return _choose_alpha(config, out, config.train.device, has_valid, stream)
    summary: dict[str, Any] = {}
    if rank == 0:
        summary = _average_last_checkpoints(config, out)
        print(
            f"companion train: the run had finished training; averaged {len(names)} -> {summary['averaged']}",
            file=stream,
            flush=True,
        )
        if config.data.task == TRANSLATION:
            summary.update(_choose_alpha(config, out, config.train.device, has_valid, stream))
    return summary


def _alpha_left_to_choose(config: RunConfig, out: Path, has_valid: bool) -> bool:
    """Whether a finished translation run still lacks the length penalty its end chooses (the checkpoint that
    translate uses records none, though the run has a validation split and --no-choose-alpha was not given)."""
    if config.data.task != TRANSLATION or not config.choose_alpha or not has_valid:
        return False
    weights = out / "averaged.pt" if config.average_count > 1 else latest_checkpoint(out / "checkpoints")
    try:
        return weights is not None and "decoding" not in load_checkpoint(weights)
    except CompanionError:
        return False


def _averaged_from(path: Path) -> list[str] | None:
    """The checkpoints ``averaged.pt`` was averaged from (None: no usable averaged.pt)."""
    if not path.is_file():
        return None
    try:
        return list(load_checkpoint(path).get("averaged_from") or [])
    except CompanionError:
        return None


def _set_threads(config: RunConfig, given: Mapping[str, Any]) -> None:
    """``--threads``, when given (a resumed run keeps PyTorch's choice unless the flag is given again)."""
    if given.get("threads") and config.threads:
        torch.set_num_threads(config.threads)


def _check_accumulation(config: RunConfig, data: RunData) -> None:
    if config.train.accum_steps > len(data.train_batches):
        raise ConfigError(
            f"--accum-steps {config.train.accum_steps} is more than the {len(data.train_batches)} "
            "batches of an epoch: one optimizer step would see some batches twice. Lower "
            "--accum-steps or --max-tokens"
        )


def _run_info(
    config: RunConfig, command: list[str], world_size: int, data: RunData, inexact: list[str]
) -> dict[str, Any]:
    """What every checkpoint records about its run (``args``: the flat config, :meth:`RunConfig.to_record`; the
    processes and CPU threads it trains with, on which an exact resume depends)."""
    info = {
        "task": config.data.task,
        "src": config.data.src,
        "tgt": config.data.tgt,
        "args": config.to_record(),
        "command": command,
        "world_size": world_size,
        "threads": torch.get_num_threads(),
        "data": data.identity,
    }
    return {**info, "inexact_resume": inexact} if inexact else info


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
            "threads": run_info["threads"],
            "keeps_freed_memory": keep_freed_memory(),  # companion._allocator (speed only, never the numbers)
            "inexact_resume": run_info.get("inexact_resume", []),
            "device": str(trainer.device),
            "model_parameters": trainer.model.num_parameters(),
            "train_batches": len(data.train_batches),
            "resumed_from": str(resumed_from) if resumed_from else None,
            "data": data.identity,
        },
    )


def _write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``path`` through a temp file and a rename; a failure (a full disk) leaves neither a temp file nor a
    torn ``path``, and is a RunError naming the file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {path} ({error.strerror or error})") from None


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
    data_config = config.data
    what = data_config.task if data_config.task != TRANSLATION else _source_name(data_config)
    direction = f" {data_config.src} -> {data_config.tgt}" if data_config.task == TRANSLATION else ""
    print(
        f"companion train: {what}{direction} preset={config.preset} "
        f"params={trainer.model.num_parameters():,} vocab={src_vocab}/{tgt_vocab} "
        f"batches/epoch={len(data.train_batches)} device={trainer.device} world_size={trainer.world_size}"
        + (f" resumed at step {trainer.state.step}" if resumed else ""),
        file=stream,
        flush=True,
    )


def _source_name(data: Any) -> str:
    """What a translation run reads, for the start line: Multi30k, or the user's data."""
    if data.is_multi30k():
        return "multi30k"
    if data.hf_dataset:
        return f"dataset {data.hf_dataset}" + (f" ({data.hf_config})" if data.hf_config else "")
    return f"files {Path(data.train_files[0]).name}..." if data.train_files else f"folder {data.data_dir}"


def _print_summary(summary: Mapping[str, Any], stream: TextIO) -> None:
    """The line that ends a run's training."""
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


def _choose_alpha(
    config: RunConfig, out: Path, device: torch.device | str, has_valid: bool, stream: TextIO
) -> dict[str, Any]:
    """The end of a translation run: unless ``--no-choose-alpha``, beam search's length penalty chosen on the
    validation split and recorded in the checkpoint that ``translate`` and ``evaluate`` use (``companion
    choose-alpha`` on the run's folder). Returns ``{"alpha_choice": record, "alpha_choice_seconds": s}``, or
    ``{}`` when no choice is made (no validation split, the flag, or a failure, which warns: the trained run
    stays complete and ``companion choose-alpha`` can choose later)."""
    command = f"companion choose-alpha --checkpoint {out}"
    if not config.choose_alpha or not has_valid:
        why = "--no-choose-alpha" if has_valid else "the run has no validation split: --hold-out N would make one"
        how = command if has_valid else command + " --src-file HELD_OUT_SRC --ref-file HELD_OUT_REF"
        print(
            f"companion train: beam search's length penalty was not chosen ({why}); translate and evaluate use "
            f"alpha {PAPER_ALPHA} unless given --alpha; to choose it on held-out sentences: {how}",
            file=stream,
            flush=True,
        )
        return {}
    started = time.time()
    try:
        # the run's own folder where it named one (a Multi30k-shaped folder would otherwise yield to
        # $COMPANION_DATA_DIR, as evaluate's --split does)
        held_out = ChooseAlphaConfig(str(out), device=str(device), data_dir=config.data.data_dir)
        record = choose_alpha_run(held_out)
    except CompanionError as error:
        warnings.warn(
            f"the run is trained, but choosing beam search's length penalty failed: {error}. Once that is "
            f"fixed: {command}",
            stacklevel=3,
        )
        return {}
    seconds = time.time() - started
    alpha, bleu = record["alpha"], record["bleu"]  # bleu: by alpha of the default grid (it holds 0.6), as "0.6"
    print(
        f"companion train: alpha {alpha:g} chosen on the validation split ({record['sentences']:,} sentences, beam "
        f"{record['beam_size']}, {seconds:.0f} s; BLEU {bleu[f'{alpha:g}']:.2f} against {bleu[f'{PAPER_ALPHA:g}']:.2f} "
        f"at the paper's {PAPER_ALPHA:g}) and recorded in {record['checkpoint']}: translate and evaluate decode "
        "with it unless given --alpha",
        file=stream,
        flush=True,
    )
    return {"alpha_choice": record, "alpha_choice_seconds": seconds}
