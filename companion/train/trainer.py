"""``Trainer``: the training loop (accumulation, DDP, evaluation, checkpoints with exact resume).

One class whose parts share its state (model, optimizer, schedule, counters, the process group), which is why this
module is longer than the others."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ..checkpoint import (
    CheckpointError,
    check_compatible,
    checkpoint_path,
    latest_valid_checkpoint,
    load_checkpoint,
    load_model_weights,
    prune_checkpoints,
    save_checkpoint,
)
from ..devices import process_rank, resolve_device, setup_distributed
from ..errors import TrainingDivergedError
from ..model import Transformer
from .config import TrainConfig
from .loss import label_smoothed_loss
from .schedule import NoamSchedule

_DIVERGED_ADVICE = (
    "Lower the learning rate (--lr-factor), lengthen the warmup (--warmup) or clip gradients (--clip-grad)."
)


@dataclass
class TrainState:
    """Counters that, with the optimizer, scheduler and RNG states, make a run resumable exactly."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epochs started (0-based index of the current one)
    batch_index: int = 0  # position in the current epoch's batch order
    train_seconds: float = 0.0  # wall time spent in train(), all sessions
    tokens_seen: int = 0  # non-pad source + target tokens processed (all ranks)
    last_loss: float | None = None  # per-token smoothed loss of the latest logged window
    last_valid: dict[str, float] | None = None
    best_valid_nll: float | None = None
    # the sums of the metrics line in progress when a checkpoint was written (steps, loss, nll, tgt_tokens,
    # all_tokens): a resumed run's first line then averages the same steps as an uninterrupted run's
    log_window: dict[str, float] | None = None


# --------------------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------------------
class Trainer:
    """Trains a :class:`~companion.model.Transformer` on a list of :class:`companion.data.batching.Batch`.

    The list is one epoch; every epoch visits it in a fresh order drawn from ``seed + epoch``. One optimizer
    step consumes ``accum_steps`` consecutive batches. Under ``torchrun`` each rank takes its share of the
    rows of every batch (see the module docstring).

    Args:
        model: the model (moved to the configured device; the Trainer updates it in place).
        config: a :class:`TrainConfig`.
        train_batches: the training batches (each with ``src``, ``tgt_in``, ``tgt_out``, ``num_src_tokens``,
            ``num_tgt_tokens``), identical on every rank.
        valid_batches: optional validation batches for the periodic evaluation.
        out_dir: where checkpoints (``checkpoints/step_XXXXXXXX.pt``) and ``metrics.jsonl`` go; None keeps
            everything in memory.
        tokenizers: ``{"src": tokenizer, "tgt": tokenizer}`` (objects with ``to_dict()``, or dicts), stored in
            every checkpoint so that the model can translate text later.
        run_info: free-form JSON-serialisable facts about the run (data, command) stored in checkpoints.
        languages: ``(src, tgt)`` language codes, recorded in every checkpoint (``run_info["src"]``/``["tgt"]``)
            so that evaluation knows the direction. Default: ``run_info``'s ``src``/``tgt``, else the word
            tokenizers' ``language``; a shared BPE tokenizer has none, so with one pass ``languages`` (else the
            checkpoint records None and ``companion evaluate`` refuses it, with a warning here).

    Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) a Trainer joins the process group itself when
    :func:`companion.devices.setup_distributed` was not called. ``train_batches`` that offer per-rank shares
    (:class:`companion.data.store.StoredBatches`: ``local(index, rank, world_size)``) are read share by share: each
    rank reads only its rows of each batch.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        train_batches: Sequence[Any],
        valid_batches: Sequence[Any] | None = None,
        *,
        out_dir: str | os.PathLike | None = None,
        tokenizers: Mapping[str, Any] | None = None,
        run_info: Mapping[str, Any] | None = None,
        languages: tuple[str | None, str | None] | None = None,
    ) -> None:
        if not isinstance(model, Transformer):
            raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        self.train_batches = self._check_batches("train_batches", train_batches, allow_empty=False)
        self.valid_batches = self._check_batches("valid_batches", valid_batches or [], allow_empty=True)
        self.config = config
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            setup_distributed(config.device)  # under torchrun: join the group (nothing if already joined)
        self.rank, self.world_size = process_rank()
        self.device = resolve_device(config.device, int(os.environ.get("LOCAL_RANK", 0)))
        self.model = model.to(self.device)
        self.pad_id = model.config.pad_id
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.tokenizers = {k: (v if isinstance(v, dict) else v.to_dict()) for k, v in (tokenizers or {}).items()}
        self.run_info = dict(run_info or {})
        self.run_info.update(zip(("src", "tgt"), self._languages(languages)))
        self.state = TrainState()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=config.betas, eps=config.eps)
        self.schedule = NoamSchedule(model.config.d_model, config.warmup, config.lr_factor, config.cooldown)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.schedule)
        self.train_model: nn.Module = model
        self.diverged = False  # set when an update made the weights non-finite: they are never saved
        if self.world_size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        if config.compile:
            self.train_model = cast(nn.Module, torch.compile(self.train_model))
        torch.manual_seed(config.seed + self.rank)
        self._last_save_time = 0.0

    # -- input checks ------------------------------------------------------------------------------------
    def _languages(self, given: tuple[str | None, str | None] | None) -> tuple[str | None, str | None]:
        """The run's ``(src, tgt)`` languages: ``given``, else ``run_info``'s, else the tokenizers' (see __init__)."""
        if given is not None:
            if isinstance(given, str) or len(given) != 2 or not all(x is None or isinstance(x, str) for x in given):
                raise TypeError(f"languages must be a (src, tgt) pair of language codes, got {given!r}")
            return given[0], given[1]
        found = [self.run_info.get(side) or self.tokenizers.get(side, {}).get("language") for side in ("src", "tgt")]
        if self.tokenizers and None in found:
            warnings.warn(
                "Trainer: the tokenizers do not say their languages (a shared BPE has none): the checkpoints record "
                "None and 'companion evaluate' refuses them; pass languages=(src, tgt)",
                stacklevel=3,
            )
        return found[0], found[1]

    @staticmethod
    def _check_batches(name: str, batches: Sequence[Any], allow_empty: bool) -> Sequence[Any]:
        if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence):
            raise TypeError(f"{name} must be a list of companion.data.Batch, got {type(batches).__name__}")
        if not batches and not allow_empty:
            raise ValueError(f"{name} must hold at least one batch, got an empty list")
        if isinstance(batches, (list, tuple)) and batches and isinstance(batches[0], str):
            raise TypeError(
                f"{name} holds strings: batches are built from token ids. Encode the sentence pairs first: "
                "make_batches(encode_pairs(pairs, src_tokenizer, tgt_tokenizer), max_tokens)"
            )
        if hasattr(batches, "local"):  # batches collated on demand (a token store): check one, keep them lazy
            batch = batches[0]
            for attr in ("src", "tgt_in", "tgt_out", "num_tgt_tokens"):
                if not hasattr(batch, attr):
                    raise TypeError(f"{name}[0] must be a companion.data.Batch (no attribute {attr!r})")
            return batches
        for i, batch in enumerate(batches):
            for attr in ("src", "tgt_in", "tgt_out", "num_tgt_tokens"):
                if not hasattr(batch, attr):
                    raise TypeError(f"{name}[{i}] must be a companion.data.Batch (no attribute {attr!r})")
        return list(batches)

    # -- the main loop ---------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Train until a limit of the config is reached; returns a summary dict.

        Raises :class:`~companion.errors.TrainingDivergedError` (naming the step and the latest checkpoint that
        loads and is finite) if the loss or the gradient norm becomes NaN or infinite (the failing update is not
        applied), if an update makes a parameter non-finite, or if the final validation loss is not finite. A checkpoint
        is never written from non-finite weights.
        """
        cfg = self.config
        from tqdm.auto import tqdm

        start_time = time.perf_counter()
        start_seconds, start_step = self.state.train_seconds, self.state.step
        self._last_save_time = start_time
        window = _Window(time.perf_counter(), **cast(dict[str, Any], self.state.log_window or {}))
        bar = tqdm(
            total=cfg.max_steps,
            initial=self.state.step,
            unit="step",
            dynamic_ncols=True,
            disable=not cfg.progress or self.rank != 0,
            desc="train",
        )
        stop_reason = self._limit_reached(start_seconds)
        try:
            while stop_reason is None:
                group = [self._next_batch() for _ in range(cfg.accum_steps)]

                def flags() -> tuple[bool, bool, float]:  # decided on rank 0, shared through the all-reduce
                    now = time.perf_counter()
                    seconds = start_seconds + now - start_time
                    every = cfg.save_every_minutes
                    save_due = every is not None and now - self._last_save_time >= 60.0 * every
                    return self._time_up(seconds), save_due, self._time_progress(seconds)

                loss_sum, nll_sum, tgt_tokens, all_tokens, (time_up, save_due) = self._train_step(group, flags)
                self.state.train_seconds = start_seconds + time.perf_counter() - start_time
                self.state.tokens_seen += all_tokens
                window.add(loss_sum, nll_sum, tgt_tokens, all_tokens)
                bar.update(1)
                step = self.state.step
                if step % cfg.log_every == 0:
                    self._log_train(window, bar)
                    window = _Window(time.perf_counter())
                if cfg.eval_every and step % cfg.eval_every == 0 and self.valid_batches:
                    self.evaluate(log=True)
                stop_reason = "max_minutes" if time_up else self._limit_reached(None)
                save_due = save_due or bool(cfg.save_every and step % cfg.save_every == 0)
                if save_due and stop_reason is None and self.out_dir is not None:
                    self.state.log_window = window.sums()
                    self.save_checkpoint()
        finally:
            bar.close()
        if window.steps:
            self._log_train(window, None)
        self.state.log_window = None
        if self.valid_batches and not (cfg.eval_every and self.state.step % cfg.eval_every == 0):
            self.evaluate(log=True)
        valid_nll = (self.state.last_valid or {}).get("valid_nll", 0.0)
        if not math.isfinite(valid_nll):
            raise TrainingDivergedError(
                f"the validation loss is {valid_nll} at step {self.state.step}: the model's outputs overflow, so no "
                f"checkpoint was written from it. {_DIVERGED_ADVICE}{self._latest_checkpoint_note()}"
            )
        last_path = self.save_checkpoint() if self.out_dir is not None else None
        return {
            "stop_reason": stop_reason,
            "steps": self.state.step,
            "steps_this_session": self.state.step - start_step,
            "epochs": self.state.epoch + self.state.batch_index / len(self.train_batches),
            "train_seconds": self.state.train_seconds,
            "tokens_seen": self.state.tokens_seen,
            "last_loss": self.state.last_loss,
            "valid": self.state.last_valid,
            "checkpoint": str(last_path) if last_path else None,
        }

    def _time_up(self, seconds: float) -> bool:
        return self.config.max_minutes is not None and seconds >= 60.0 * self.config.max_minutes

    def _time_progress(self, seconds: float) -> float:
        """The fraction of ``max_minutes`` spent after ``seconds`` of training (0 without that limit)."""
        return 0.0 if self.config.max_minutes is None else seconds / (60.0 * self.config.max_minutes)

    def _budget_progress(self, steps: int, time_progress: float) -> float:
        """How much of the run's budget is spent after ``steps`` optimizer steps: the largest of the fractions of
        ``max_steps``, ``max_epochs`` (counted in batches) and ``max_minutes`` (``time_progress``, measured on rank 0)
        used so far, which is the limit that will stop the run first if the pace holds."""
        cfg = self.config
        fractions = [time_progress]
        if cfg.max_steps is not None:
            fractions.append(steps / cfg.max_steps)
        if cfg.max_epochs is not None:
            fractions.append((self.state.epoch + self.state.batch_index / len(self.train_batches)) / cfg.max_epochs)
        return max(fractions)

    def _limit_reached(self, seconds: float | None) -> str | None:
        """Which limit stops training now (None: none). ``seconds=None`` skips the time check (it is made
        inside the step, on rank 0, so that all ranks stop at the same step)."""
        cfg = self.config
        if cfg.max_steps is not None and self.state.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs is not None and self.state.epoch >= cfg.max_epochs:
            return "max_epochs"
        if seconds is not None and self._time_up(seconds):
            return "max_minutes"
        return None

    def _epoch_order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.config.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.train_batches), generator=generator).tolist()

    def _next_batch(self) -> Any:
        if getattr(self, "_order_epoch", None) != self.state.epoch:
            self._order, self._order_epoch = self._epoch_order(self.state.epoch), self.state.epoch
        index = self._order[self.state.batch_index]
        if self.world_size > 1 and hasattr(self.train_batches, "local"):
            counts = cast(Any, self.train_batches).token_counts(index)
            batch: Any = _Share(index, *counts)  # read when its share is
        else:
            batch = self.train_batches[index]
        self.state.batch_index += 1
        if self.state.batch_index >= len(self.train_batches):
            self.state.epoch += 1
            self.state.batch_index = 0
        return batch

    def _local_share(self, batch: Any) -> tuple[Any, float]:
        """This rank's rows of a global batch (padding columns trimmed) and its weight (0 for a dummy)."""
        if self.world_size == 1:
            return batch, 1.0
        if isinstance(batch, _Share):  # only this rank's rows are read from the store
            return self.train_batches.local(batch.index, self.rank, self.world_size)  # type: ignore[attr-defined]
        rows = torch.tensor_split(torch.arange(len(batch.src)), self.world_size)[self.rank]
        weight = 1.0
        if len(rows) == 0:  # fewer rows than ranks: run one row with zero weight to join the all-reduce
            rows, weight = torch.arange(1), 0.0
        src, tgt_in, tgt_out = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        src = src[:, : int((src != self.pad_id).sum(1).max())]
        tgt_len = int((tgt_out != self.pad_id).sum(1).max())
        tgt_in, tgt_out = tgt_in[:, :tgt_len], tgt_out[:, :tgt_len]
        share = dataclasses.replace(
            batch,
            src=src,
            tgt_in=tgt_in,
            tgt_out=tgt_out,
            num_src_tokens=int((src != self.pad_id).sum()),
            num_tgt_tokens=int((tgt_out != self.pad_id).sum()),
        )
        return share, weight

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.device.type == "cuda" and self.config.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if self.device.type == "cpu" and self.config.cpu_bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _train_step(self, group: list[Any], flags: Any) -> tuple[float, float, int, int, tuple[bool, bool]]:
        """One optimizer step over ``group`` (accum_steps global batches).

        ``flags()`` returns rank 0's ``(time_up, save_due, time_progress)``; they travel with the loss in one
        all-reduce so that every rank takes the same decision (and the same learning rate under a cooldown).
        Returns the summed loss, nll, target tokens, all tokens and the shared flags.
        """
        self.model.train()
        total_tgt = sum(int(b.num_tgt_tokens) for b in group)
        all_tokens = sum(int(b.num_tgt_tokens) + int(getattr(b, "num_src_tokens", 0)) for b in group)
        scale = self.world_size / max(total_tgt, 1)  # DDP averages over ranks: undo it, divide by global tokens
        loss_acc = torch.zeros((), device=self.device)
        nll_acc = torch.zeros((), device=self.device)
        for i, batch in enumerate(group):
            share, weight = self._local_share(batch)
            if self.device.type == "cuda" and hasattr(share, "pin_memory"):
                share = share.pin_memory()  # page-locked, so that the copy below is asynchronous
            share = share.to(self.device, non_blocking=True)
            last = i == len(group) - 1
            sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if self.world_size > 1 and not last:
                sync = self._ddp_module().no_sync()
            with sync:
                with self._autocast():
                    logits = self.train_model(share.src, share.tgt_in)
                loss_sum, nll_sum, _ = label_smoothed_loss(
                    logits, share.tgt_out, self.config.label_smoothing, self.pad_id
                )
                (loss_sum * (scale * weight)).backward()
            loss_acc += loss_sum.detach() * weight
            nll_acc += nll_sum.detach() * weight
        time_up, save_due, time_progress = flags() if self.rank == 0 else (False, False, 0.0)
        stats = torch.stack(
            [
                loss_acc,
                nll_acc,
                torch.tensor(float(time_up), device=self.device),
                torch.tensor(float(save_due), device=self.device),
                torch.tensor(time_progress, device=self.device),
            ]
        )
        if self.world_size > 1:
            dist.all_reduce(stats)
        loss_value, nll_value, time_flag, save_flag, time_progress = stats.tolist()
        next_step = self.state.step + 1
        if not (math.isfinite(loss_value) and math.isfinite(nll_value)):
            self.optimizer.zero_grad(set_to_none=True)
            latest = self._latest_checkpoint_note()
            raise TrainingDivergedError(
                f"the training loss became {loss_value} at step {next_step} (epoch {self.state.epoch}); the update "
                f"was not applied. {_DIVERGED_ADVICE}{latest}"
            )
        grad_norm = self._gradient_norm()
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDivergedError(
                f"the gradient norm became {grad_norm} at step {next_step} (epoch {self.state.epoch}, loss "
                f"{loss_value / max(total_tgt, 1):.4g}); the update was not applied. {_DIVERGED_ADVICE}"
                f"{self._latest_checkpoint_note()}"
            )
        self.optimizer.step()
        self.schedule.progress = self._budget_progress(next_step, time_progress)  # read by the cooldown
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step = next_step
        if not self._parameters_finite():
            self.diverged = True
            raise TrainingDivergedError(
                f"the update of step {next_step} made parameters inf or nan (the learning rate was "
                f"{self.scheduler.get_last_lr()[0]:.3g}); the weights in memory are unusable and no checkpoint "
                f"was written from them. {_DIVERGED_ADVICE}{self._latest_checkpoint_note()}"
            )
        return loss_value, nll_value, total_tgt, all_tokens, (time_flag > 0, save_flag > 0)

    def _ddp_module(self) -> Any:
        module = self.train_model
        module = getattr(module, "_orig_mod", module)  # torch.compile wrapper
        return module

    def _gradient_norm(self) -> float:
        """The global gradient norm (clipping the gradients to ``clip_grad`` first when it is set)."""
        if self.config.clip_grad is not None:
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad)
        else:
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            norm = nn.utils.get_total_norm(grads) if grads else torch.zeros(())
        return float(norm)

    def _parameters_finite(self) -> bool:
        """Whether the parameters' global norm is finite: False if any holds inf or nan (or values so large that
        the norm overflows, ~1e38, which no working model has). One fused reduction and one host sync, several
        times cheaper than testing every element with ``isfinite``."""
        params = [p.detach() for p in self.model.parameters()]
        return bool(torch.isfinite(nn.utils.get_total_norm(params))) if params else True

    def _latest_checkpoint_note(self) -> str:
        """Names the newest checkpoint that loads and is finite (verified, not just the newest file)."""
        if self.out_dir is None or self.rank != 0:
            return ""

        latest, passed_over = latest_valid_checkpoint(self.out_dir / "checkpoints")
        skipped = f" ({len(passed_over)} newer file(s) do not load and were passed over)" if passed_over else ""
        if latest is None:
            return " No usable checkpoint was written" + (skipped or "") + "."
        return f" The latest good checkpoint (verified: it loads and every tensor is finite) is {latest}{skipped}."

    # -- evaluation --------------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, batches: Sequence[Any] | None = None, log: bool = False) -> dict[str, float]:
        """Teacher-forced loss on ``batches`` (default: the validation batches), all ranks' shares combined.

        Returns ``{"valid_loss", "valid_nll", "valid_ppl", "valid_tokens"}`` (per-token smoothed loss, per-token
        negative log-likelihood, its exponential).
        """
        batches = self.valid_batches if batches is None else self._check_batches("batches", batches, False)
        self.model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        for batch in batches:
            share, weight = self._local_share(batch)
            share = share.to(self.device)
            with self._autocast():
                logits = self.model(share.src, share.tgt_in)
            loss_sum, nll_sum, count = label_smoothed_loss(
                logits, share.tgt_out, self.config.label_smoothing, self.pad_id
            )
            sums += torch.stack([loss_sum.double(), nll_sum.double(), count.double()]) * weight
        if self.world_size > 1:
            dist.all_reduce(sums)
        loss, nll, count = sums.tolist()
        count = max(count, 1.0)
        result = {
            "valid_loss": loss / count,
            "valid_nll": nll / count,
            "valid_ppl": math.exp(min(nll / count, 50.0)),
            "valid_tokens": int(count),
        }
        if log:
            self.state.last_valid = result
            if self.state.best_valid_nll is None or result["valid_nll"] < self.state.best_valid_nll:
                self.state.best_valid_nll = result["valid_nll"]
            self._write_metrics({"kind": "valid", "step": self.state.step, **result})
        return result

    # -- logging -----------------------------------------------------------------------------------------
    def _log_train(self, window: _Window, bar: Any) -> None:
        now = time.perf_counter()
        seconds = max(now - window.start, 1e-9)
        loss = window.loss / max(window.tgt_tokens, 1)
        nll = window.nll / max(window.tgt_tokens, 1)
        lr = self.scheduler.get_last_lr()[0]
        record = {
            "kind": "train",
            "step": self.state.step,
            "epoch": round(self.state.epoch + self.state.batch_index / len(self.train_batches), 4),
            "loss": loss,
            "nll": nll,
            "ppl": math.exp(min(nll, 50.0)),
            "lr": lr,
            "tokens_per_s": window.all_tokens / seconds,
            "train_seconds": round(self.state.train_seconds, 3),
        }
        self.state.last_loss = loss
        if bar is not None:
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{record['tokens_per_s']:.0f}", refresh=False)
        self._write_metrics(record)

    @property
    def metrics_path(self) -> Path | None:
        """``out_dir/metrics.jsonl`` (None without an output folder)."""
        return None if self.out_dir is None else self.out_dir / "metrics.jsonl"

    def _write_metrics(self, record: dict[str, Any]) -> None:
        if self.metrics_path is None or self.rank != 0:
            return
        self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.metrics_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**record, "time": time.time()}) + "\n")

    # -- checkpoints ------------------------------------------------------------------------------------
    def _rng_state(self) -> dict[str, torch.Tensor]:
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return rng

    def _all_rng_states(self) -> list[dict[str, torch.Tensor]]:
        """Every rank's RNG state (a collective call under DDP: all ranks must call it)."""
        if self.world_size == 1:
            return [self._rng_state()]
        states: list[Any] = [None] * self.world_size
        dist.all_gather_object(states, {k: v.cpu() for k, v in self._rng_state().items()})
        return states

    def state_dict(self, rng_states: list[dict[str, torch.Tensor]] | None = None) -> dict[str, Any]:
        """Everything besides the model weights that an exact resume needs (tensors and plain values only).

        ``rng_states`` lists every rank's RNG state (default: this process's only).
        """
        return {
            "state": asdict(self.state),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_states if rng_states is not None else [self._rng_state()],
            "world_size": self.world_size,
        }

    def load_state_dict(self, trainer_state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (counters, optimizer, scheduler, RNG)."""
        counters = dict(trainer_state["state"])
        self.state = TrainState(**counters)
        self.optimizer.load_state_dict(trainer_state["optimizer"])
        self.scheduler.load_state_dict(trainer_state["scheduler"])
        states = trainer_state.get("rng") or []
        if len(states) == self.world_size:  # with another number of processes the streams cannot continue
            rng = states[self.rank]
            torch.set_rng_state(rng["torch"].cpu())
            if "cuda" in rng and self.device.type == "cuda":
                torch.cuda.set_rng_state(rng["cuda"].cpu(), self.device)

    def save_checkpoint(self, path: str | os.PathLike | None = None) -> Path | None:
        """Write a checkpoint atomically (rank 0 only) and prune old ones; returns its path.

        Default path: ``out_dir/checkpoints/step_XXXXXXXX.pt``. With DDP every rank must call it (it ends
        with a barrier).
        """

        if path is None:
            if self.out_dir is None:
                raise ValueError("save_checkpoint needs a path when the Trainer has no out_dir")
            path = checkpoint_path(self.out_dir / "checkpoints", self.state.step)
        if self.diverged or not self._parameters_finite():
            raise TrainingDivergedError(
                f"refusing to write {path}: the model's weights hold inf or nan (the run diverged)."
                f"{self._latest_checkpoint_note()}"
            )
        path = Path(path)
        rng_states = self._all_rng_states()
        if self.rank == 0:
            save_checkpoint(
                path,
                model=self.model,
                step=self.state.step,
                tokenizers=self.tokenizers or None,
                train_config=self.config.to_dict(),
                trainer_state=self.state_dict(rng_states),
                metrics={
                    "last_loss": self.state.last_loss,
                    "valid": self.state.last_valid,
                    "best_valid_nll": self.state.best_valid_nll,
                    "train_seconds": self.state.train_seconds,
                    "tokens_seen": self.state.tokens_seen,
                },
                run_info=self.run_info,
            )
            if self.config.keep_last and self.out_dir is not None and path.parent == self.out_dir / "checkpoints":
                prune_checkpoints(path.parent, self.config.keep_last)
        self._last_save_time = time.perf_counter()
        if self.world_size > 1:
            dist.barrier()
        return path

    def load_checkpoint(self, checkpoint: str | os.PathLike | Mapping[str, Any]) -> None:
        """Resume from a checkpoint (path or loaded dict): model weights, optimizer, scheduler, RNG, counters.

        Raises :class:`~companion.errors.CheckpointError` if the checkpoint was written for another model
        configuration or vocabulary, or holds no trainer state (e.g. an averaged checkpoint).
        """

        ckpt = checkpoint if isinstance(checkpoint, Mapping) else load_checkpoint(checkpoint, map_location=self.device)
        check_compatible(ckpt, model_config=self.model.config, tokenizers=self.tokenizers or None)
        if not ckpt.get("trainer_state"):
            raise CheckpointError(
                "this checkpoint holds no optimizer/scheduler state (an averaged or exported model?); "
                "it can be evaluated or used to translate, but training cannot resume from it"
            )
        load_model_weights(self.model, ckpt)
        self.load_state_dict(ckpt["trainer_state"])
        self._truncate_metrics(self.state.step)

    def _truncate_metrics(self, step: int) -> None:
        """Drop metrics lines written after ``step`` by an interrupted session (they will be redone)."""
        path = self.metrics_path
        if path is None or self.rank != 0 or not path.exists():
            return
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a kill
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, path)


@dataclass(frozen=True)
class _Share:
    """A batch of ``train_batches`` not read yet: its index and the global token counts (the loss is normalised
    by them); each rank reads its rows with ``train_batches.local``."""

    index: int
    num_src_tokens: int
    num_tgt_tokens: int


@dataclass
class _Window:
    """Running sums between two log lines."""

    start: float
    steps: int = 0
    loss: float = 0.0
    nll: float = 0.0
    tgt_tokens: int = 0
    all_tokens: int = 0

    def sums(self) -> dict[str, float]:
        """The running sums (everything but the start time), as a checkpoint stores them."""
        return {name: getattr(self, name) for name in ("steps", "loss", "nll", "tgt_tokens", "all_tokens")}

    def add(self, loss: float, nll: float, tgt_tokens: int, all_tokens: int) -> None:
        self.steps += 1
        self.loss += loss
        self.nll += nll
        self.tgt_tokens += tgt_tokens
        self.all_tokens += all_tokens
