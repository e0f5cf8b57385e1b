"""The paper's learning-rate schedule (section 5.3, eq. 3): ``noam_lr`` and ``NoamSchedule``, with an optional
cooldown to zero at the end of a fixed budget (``cooldown_factor``)."""

from __future__ import annotations

from .._validation import check_integer, check_number, check_positive_int


# --------------------------------------------------------------------------------------------------------
# Learning-rate schedule
# --------------------------------------------------------------------------------------------------------
def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The paper's learning rate at optimizer step ``step`` (eq. 3), times ``factor``.

    ``lr = factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``: linear warmup for ``warmup``
    steps, then decay proportional to the inverse square root of the step. The peak is at ``step == warmup``,
    where the two branches meet: ``factor * (d_model * warmup)**-0.5``. Step 0 (before any update) gives 0.
    """
    check_integer("step", step, minimum=0)
    check_positive_int("d_model", d_model)
    check_positive_int("warmup", warmup)
    return _noam_lr(step, d_model, warmup, check_number("factor", factor, low=0, low_inclusive=False))


def _noam_lr(step: int, d_model: int, warmup: int, factor: float) -> float:
    """:func:`noam_lr` for arguments already checked (the per-step path of :class:`NoamSchedule`)."""
    if step == 0:
        return 0.0
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cooldown_factor(progress: float, cooldown: float) -> float:
    """The cooldown's multiplier of the learning rate when ``progress`` (0 to 1) of the run's budget is spent.

    ``cooldown`` is the final fraction of the budget over which the rate falls linearly to zero: the factor is 1
    until ``progress == 1 - cooldown``, then ``(1 - progress) / cooldown``, and 0 from ``progress == 1`` on.
    ``cooldown == 0`` (no cooldown) always gives 1. This is the "decay" of warmup-stable-decay schedules and the
    linear decay that Li et al. (2020, "Budgeted training") found best when the budget is known in advance.
    """
    check_number("progress", progress, low=0)
    check_number("cooldown", cooldown, low=0, high=1)
    return _cooldown_factor(progress, cooldown)


def _cooldown_factor(progress: float, cooldown: float) -> float:
    if cooldown == 0.0 or progress <= 1.0 - cooldown:
        return 1.0
    return max(0.0, (1.0 - progress) / cooldown)


class NoamSchedule:
    """Multiplier for :class:`torch.optim.lr_scheduler.LambdaLR` (with the optimizer's base lr = 1).

    ``LambdaLR`` calls it with the number of scheduler steps taken so far (0 before the first update), so
    optimizer step ``n`` (1-based) runs with ``noam_lr(n, ...)``. A plain object (not a lambda) so that the
    scheduler's ``state_dict`` holds its settings.

    With ``cooldown > 0`` the rate is also multiplied by ``cooldown_factor`` of ``progress``, the fraction of
    the run's budget (steps, minutes or epochs) spent so far, which the trainer sets before each scheduler step; the
    scheduler's ``state_dict`` keeps it, so a resumed run continues the same decay.
    """

    def __init__(self, d_model: int, warmup: int = 4000, factor: float = 1.0, cooldown: float = 0.0) -> None:
        self.d_model = check_positive_int("d_model", d_model)
        self.warmup = check_positive_int("warmup", warmup)
        self.factor = check_number("factor", factor, low=0, low_inclusive=False)
        self.cooldown = check_number("cooldown", cooldown, low=0, high=1)
        self.progress = 0.0

    def __call__(self, completed_steps: int) -> float:
        noam = _noam_lr(completed_steps + 1, self.d_model, self.warmup, self.factor)
        return noam * _cooldown_factor(self.progress, self.cooldown)
