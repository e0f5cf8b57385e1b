"""``TrainConfig``: the Trainer's settings, each declared once (type, default, help, flag, resumability)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .._validation import check_integer, check_number
from ..errors import ConfigError
from ..options import check_declared, label, option
from ..presets import CHECKPOINTS_PER_BUDGET

# --------------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------------
# The largest value each float option may take: beyond these a value is a typo, not a setting. lr_factor
# 100 already gives the small preset a peak learning rate of 0.3 (the paper's is 7e-4 at factor 1), 1e6
# minutes are almost two years, and a clipping threshold of 1e6 no longer clips anything.
OPTION_LIMITS: dict[str, float] = {"lr_factor": 100.0, "max_minutes": 1e6, "save_every_minutes": 1e6, "clip_grad": 1e6}

# The largest seed: the per-epoch batch order is drawn from seed * 1_000_003 + epoch, which torch's generators
# take as an unsigned 64-bit number; 2**32 - 1 leaves room for any number of epochs.
MAX_SEED = 2**32 - 1

# The help sections of ``companion train`` that TrainConfig's options are listed in.
LIMITS_GROUP = "limits (training stops at the first one reached; set at least one)"
_FROM_PRESET = "companion train: from --preset"


@dataclass
class TrainConfig:
    """Settings of :class:`Trainer`. Defaults follow the paper where it says something.

    Each field that ``companion train`` exposes is declared here, once, with its help text, flag and whether it may
    change on ``--resume`` (:func:`companion.options.option`); the command line builds its flags from these
    declarations. ``warmup`` and ``lr_factor`` are filled from the preset by ``companion train``
    (``companion.presets.PRESETS``); constructed directly, their defaults are the paper's.

    Stopping: at least one of ``max_steps`` (optimizer steps, counted from the very first step of the run),
    ``max_minutes`` (wall-clock minutes spent in :meth:`Trainer.train`, summed over resumed sessions) and
    ``max_epochs`` must be set; training stops at whichever comes first. Invalid values (also inf and nan)
    raise :class:`~companion.errors.ConfigError`, a ValueError, naming the field and its flag.

    Attributes:
        warmup, lr_factor: the schedule ``lr_factor * noam_lr(step, d_model, warmup)``.
        cooldown: the final fraction of the budget over which that rate is brought linearly to zero
            (``companion.train.cooldown_factor``; 0: none). The budget is the limits that are set;
            the one nearest its end decides, so with ``max_minutes`` the decay follows the clock.
        betas, eps: Adam's settings (paper: 0.9, 0.98, 1e-9).
        label_smoothing: eps_ls (paper: 0.1).
        accum_steps: batches per optimizer step (gradient accumulation); the loss is normalised by the total
            number of target tokens of the step, so accumulation equals one larger batch.
        clip_grad: clip the global gradient norm to this value (None: no clipping, as in the paper).
        device: "auto" (CUDA > MPS > CPU), "cpu", "cuda", "cuda:N" or "mps".
        bf16: bfloat16 autocast for the forward pass on CUDA (ignored on other devices).
        cpu_bf16: bfloat16 autocast for the forward pass on CPU (off by default): the matrix products run in
            bfloat16, attention and the loss in float32, the weights and the optimizer stay float32. It pays where
            the CPU multiplies bfloat16 in hardware (Intel AMX: a small-preset step 114 against 159 ms on a 2-core Xeon,
            ``bench/train_step_speed.py``); elsewhere it may be slower. Ignored on other devices.
        compile: wrap the model in ``torch.compile`` (for GPUs; on a CPU it did not pay, see bench/compile_cpu.py).
        seed: seeds dropout (torch's global RNG, plus the rank) and the per-epoch batch order.
        log_every: write a metrics line (and refresh the progress bar's numbers) every this many steps.
        eval_every: evaluate on the validation batches every this many steps (None: only at the end).
        save_every, save_every_minutes: write a checkpoint every this many steps / minutes (a final one is
            always written when an output folder is set).
        keep_last: how many of the newest step checkpoints to keep (None: all).
        progress: show a tqdm progress bar (rank 0 only).
    """

    # -- limits ----------------------------------------------------------------------------------------
    max_steps: int | None = option(None, "optimizer steps in total", metavar="N", group=LIMITS_GROUP, resumable=True)
    max_minutes: float | None = option(
        None,
        "wall-clock minutes of training in total (summed over --resume sessions)",
        metavar="M",
        group=LIMITS_GROUP,
        resumable=True,
    )
    max_epochs: int | None = option(
        None, "passes over the training data", metavar="N", group=LIMITS_GROUP, resumable=True
    )
    # -- optimisation ----------------------------------------------------------------------------------
    warmup: int = option(
        4000,
        f"warmup steps of the learning-rate schedule (paper: {{default}}; {_FROM_PRESET})",
        metavar="STEPS",
        group="optimisation",
    )
    lr_factor: float = option(
        1.0,
        f"multiplies the paper's learning rate d_model^-0.5 min(step^-0.5, step warmup^-1.5) ({_FROM_PRESET})",
        metavar="F",
        group="optimisation",
    )
    cooldown: float = option(
        0.0,
        "decay the learning rate linearly to zero over this final fraction of the run's budget (--max-steps, "
        "--max-minutes or --max-epochs, whichever is nearest its end); 0: the paper's schedule to the end "
        "(default: {default})",
        metavar="FRACTION",
        group="optimisation",
    )
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    label_smoothing: float = option(
        0.1, "label smoothing eps_ls (paper: 0.1; default: {default})", metavar="EPS", group="optimisation"
    )
    accum_steps: int = option(
        1, "batches per optimizer step (gradient accumulation; default: {default})", metavar="N", group="optimisation"
    )
    clip_grad: float | None = option(
        None,
        "clip the gradient norm to NORM (default: no clipping, as in the paper)",
        metavar="NORM",
        group="optimisation",
    )
    seed: int = option(0, "random seed (default: {default})", metavar="N", group="optimisation")
    # -- where and how it runs, what it writes ------------------------------------------------------------
    device: str = option(
        "auto",
        "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: {default})",
        metavar="DEV",
        group="run",
        resumable=True,
    )
    bf16: bool = option(
        True,
        "disable bfloat16 autocast on CUDA (it is never used on CPU/MPS)",
        flag="--no-bf16",
        group="run",
        resumable=True,
    )
    cpu_bf16: bool = option(
        False,
        "bfloat16 autocast on CPU: matrix products in bfloat16, attention and the loss in float32 (pays on CPUs "
        "with bfloat16 matrix units, e.g. Intel AMX; bench/train_step_speed.py)",
        group="run",
        resumable=True,
    )
    compile: bool = option(
        False,
        "compile the model with torch.compile (meant for GPUs: on 2 CPU cores the small preset spent about a "
        "minute compiling, then trained no faster; bench/compile_cpu.py)",
        group="run",
        resumable=True,
    )
    log_every: int = option(
        20, "metrics.jsonl line every STEPS (default: {default})", metavar="STEPS", group="run", resumable=True
    )
    eval_every: int | None = option(
        None, "validation loss every STEPS (default: only at the end)", metavar="STEPS", group="run", resumable=True
    )
    save_every: int | None = option(
        None, "write a checkpoint every STEPS", metavar="STEPS", group="run", resumable=True
    )
    save_every_minutes: float | None = option(
        None,
        f"write a checkpoint every M minutes; a final one is always written (companion train: the "
        f"--max-minutes budget / {CHECKPOINTS_PER_BUDGET} unless --save-every is given, else none)",
        metavar="M",
        group="run",
        resumable=True,
    )
    keep_last: int | None = option(
        5, "keep only the newest N step checkpoints (default: {default})", metavar="N", group="run", resumable=True
    )
    progress: bool = option(True, "hide the progress bar", flag="--no-progress", group="run", resumable=True)

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # type: ignore[assignment]  # JSON round trips turn it into a list
        check_declared(self)
        for name in ("max_steps", "max_epochs", "eval_every", "save_every", "keep_last"):
            if getattr(self, name) is not None:
                check_integer(label(TrainConfig, name), getattr(self, name), minimum=1, error=ConfigError)
        for name in ("warmup", "accum_steps", "log_every"):
            check_integer(label(TrainConfig, name), getattr(self, name), minimum=1, error=ConfigError)
        for name in ("max_minutes", "save_every_minutes", "clip_grad", "lr_factor"):
            if getattr(self, name) is not None:
                value = check_number(
                    label(TrainConfig, name),
                    getattr(self, name),
                    low=0,
                    low_inclusive=False,
                    high=OPTION_LIMITS[name],
                    error=ConfigError,
                )
                setattr(self, name, value)
        if self.max_steps is None and self.max_minutes is None and self.max_epochs is None:
            raise ConfigError(
                "set a limit: max_steps (--max-steps), max_minutes (--max-minutes) and/or max_epochs "
                "(--max-epochs), or training never stops"
            )
        self.cooldown = check_number(label(TrainConfig, "cooldown"), self.cooldown, low=0, high=1, error=ConfigError)
        if len(self.betas) != 2:
            raise ConfigError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        for beta in self.betas:
            check_number("betas", beta, low=0, high=1, high_inclusive=False, error=ConfigError)
        check_number("eps", self.eps, low=0, low_inclusive=False, error=ConfigError)
        self.label_smoothing = check_number(
            label(TrainConfig, "label_smoothing"),
            self.label_smoothing,
            low=0,
            high=1,
            high_inclusive=False,
            error=ConfigError,
        )
        check_integer(label(TrainConfig, "seed"), self.seed, minimum=0, maximum=MAX_SEED, error=ConfigError)
        if not isinstance(self.device, str):
            raise ConfigError(f"{label(TrainConfig, 'device')} must be a string, got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-serialisable)."""
        values = asdict(self)
        values["betas"] = list(self.betas)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise a ValueError naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {unknown}")
        return cls(**dict(values))
