"""The paper's learning-rate schedule (section 5.3, eq. 3): ``noam_lr`` and ``NoamSchedule``."""

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


class NoamSchedule:
    """Multiplier for :class:`torch.optim.lr_scheduler.LambdaLR` (with the optimizer's base lr = 1).

    ``LambdaLR`` calls it with the number of scheduler steps taken so far (0 before the first update), so
    optimizer step ``n`` (1-based) runs with ``noam_lr(n, ...)``. A plain object (not a lambda) so that the
    scheduler's ``state_dict`` holds its settings.
    """

    def __init__(self, d_model: int, warmup: int = 4000, factor: float = 1.0) -> None:
        self.d_model = check_positive_int("d_model", d_model)
        self.warmup = check_positive_int("warmup", warmup)
        self.factor = check_number("factor", factor, low=0, low_inclusive=False)

    def __call__(self, completed_steps: int) -> float:
        return _noam_lr(completed_steps + 1, self.d_model, self.warmup, self.factor)
