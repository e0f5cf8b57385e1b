"""One training loop for the chapters' small models, and the learning-rate schedule they share.

Every experiment of chapters 1-5 trains a small model the same way: draw a batch, compute a loss, take one
optimizer step (optionally clipping the gradient norm and following a learning-rate schedule) and record the
loss. :func:`fit` is that loop; an experiment only says how it draws a batch and how it computes the loss
(:func:`companion.book.experiments.lm.train_language_model`, :func:`companion.book.experiments.probes.fit`,
:func:`companion.book.experiments.rnn.train_seq2seq` and :func:`companion.book.experiments.lookup.train_lookup` are thin
wrappers around it). The full encoder-decoder of the later chapters trains with
:class:`companion.train.Trainer` instead, which adds token-based batching, checkpoints and resumption.

:func:`warmup_cosine` is the schedule of the small experiments (linear warm-up, then a cosine decay to a floor);
:func:`warmup_cosine_schedule` checks its settings once and returns it as a multiplier for :func:`fit`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from ..._validation import check_bool, check_choice, check_integer, check_number, check_positive_int

__all__ = ["OPTIMIZERS", "fit", "warmup_cosine", "warmup_cosine_schedule"]

OPTIMIZERS = ("adam", "sgd")
"""Names accepted by :func:`fit`'s ``optimizer`` argument."""

BatchSource = Callable[[torch.Generator], Any] | Iterable[Any]
"""A function ``batches(generator) -> batch`` called once per step, or an iterable of batches."""


def warmup_cosine(step: int, warmup: int, total: int, floor: float = 0.1) -> float:
    """Learning-rate multiplier at 0-based ``step``: linear warm-up to 1 over ``warmup`` steps (step 0 gets
    ``1 / warmup``), then a cosine decay from 1 to ``floor`` at step ``total``.

    No argument checks (it runs every step); :func:`warmup_cosine_schedule` checks them once.
    """
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_cosine_schedule(warmup: int, total: int, floor: float = 0.1) -> Callable[[int], float]:
    """:func:`warmup_cosine` with ``warmup``, ``total`` and ``floor`` fixed, as a ``schedule`` for :func:`fit`.

    Args:
        warmup: number of warm-up steps (a non-negative integer; 0 starts at the peak).
        total: the step at which the cosine reaches ``floor`` (usually the number of training steps).
        floor: the final multiplier, in ``[0, 1]``.
    """
    check_integer("warmup", warmup, minimum=0)
    check_positive_int("total", total)
    floor = check_number("floor", floor, low=0, high=1)

    def schedule(step: int) -> float:
        return warmup_cosine(step, warmup, total, floor)

    return schedule


def _check_positive_number(name: str, value: object) -> float:
    return check_number(name, value, low=0, low_inclusive=False)


def _check_betas(betas: object) -> tuple[float, float]:
    if not (isinstance(betas, Sequence) and len(betas) == 2):
        raise ValueError(f"betas must be a pair of numbers in [0, 1), got {betas!r}")
    beta1, beta2 = (check_number(f"betas[{i}]", b, low=0, high=1, high_inclusive=False) for i, b in enumerate(betas))
    return beta1, beta2


def _make_optimizer(
    model: nn.Module, name: str, lr: float, betas: tuple[float, float], eps: float, momentum: float
) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, betas=betas, eps=eps)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)


def _batch_function(batches: BatchSource, steps: int) -> Callable[[torch.Generator], Any]:
    """``batches`` as a function of the generator; an iterable is read lazily and must last ``steps`` steps."""
    if callable(batches):
        return batches
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Iterable):
        raise TypeError(
            f"batches must be a function (generator) -> batch or an iterable of batches, got {type(batches).__name__}"
        )
    iterator = iter(batches)
    taken = 0

    def next_batch(_: torch.Generator) -> Any:
        nonlocal taken
        try:
            batch = next(iterator)
        except StopIteration:
            raise ValueError(f"batches ran out after {taken} batches, but steps={steps}") from None
        taken += 1
        return batch

    return next_batch


def fit(
    model: nn.Module,
    batches: BatchSource,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    steps: int,
    *,
    lr: float,
    seed: int = 0,
    seed_global_rng: bool = False,
    optimizer: str = "adam",
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    momentum: float = 0.9,
    schedule: Callable[[int], float] | None = None,
    clip_norm: float | None = None,
    stop_on_nonfinite: bool = False,
    on_step: Callable[[int, float, float], None] | None = None,
) -> list[float]:
    """Train ``model`` for ``steps`` optimizer steps and return the training loss of every step.

    Each step draws ``batch = batches(generator)`` (or the next batch of an iterable), computes
    ``loss = loss_fn(model, batch)``, zeroes the gradients, back-propagates, clips the gradient norm to
    ``clip_norm`` (if given), takes one optimizer step, advances the schedule (if given) and records
    ``loss.item()``. The model is put in train mode first and left in eval mode.

    Args:
        model: the module to train (in place); it must have parameters.
        batches: either a function ``batches(generator) -> batch``, called once per step with one
            :class:`torch.Generator` seeded with ``seed`` (draw every random choice of the batch from it, and
            the batch sequence is reproducible), or an iterable holding at least ``steps`` batches.
        loss_fn: ``loss_fn(model, batch)`` -> a 0-d loss tensor computed with ``model``.
        steps: number of optimizer steps (a positive integer).
        lr: the (peak) learning rate, a positive number.
        seed: seed of the batch generator.
        seed_global_rng: also seed PyTorch's global generator with ``seed`` (:func:`torch.manual_seed`) once the
            arguments are checked, before the first step: dropout draws its masks from it. Left untouched by
            default.
        optimizer: ``"adam"`` (:class:`torch.optim.Adam` with ``betas``) or ``"sgd"`` (:class:`torch.optim.SGD`
            with ``momentum``).
        betas: Adam's ``(beta1, beta2)``, each in ``[0, 1)``; ignored by SGD.
        eps: Adam's ``eps`` (added to the denominator), a positive number; ignored by SGD.
        momentum: SGD's momentum, a number ``>= 0``; ignored by Adam.
        schedule: optional learning-rate multiplier ``schedule(completed_steps) -> float`` (applied with
            :class:`torch.optim.lr_scheduler.LambdaLR`, so step ``n`` (0-based) runs with ``lr * schedule(n)``),
            e.g. :func:`warmup_cosine_schedule`; ``None`` keeps ``lr`` constant.
        clip_norm: optional maximum gradient norm (a positive number), applied with
            :func:`torch.nn.utils.clip_grad_norm_` over all parameters; ``None`` does not clip.
        stop_on_nonfinite: when a step's loss is NaN or infinite, record ``inf`` and stop before updating (a
            diverged run); by default such a loss is back-propagated like any other.
        on_step: optional ``on_step(step, loss, grad_norm)`` called after each update with the 0-based step, its
            loss and the gradient norm before clipping (e.g. to record the gradient norms).

    Returns:
        list[float]: the loss of each step's batch before that step's update, one per step taken, so
        ``steps`` floats, fewer when ``stop_on_nonfinite`` stopped the run (its last entry is then ``inf``).

    Same model weights, arguments and (unless ``seed_global_rng``) global RNG state give the same losses (on one
    machine and thread count).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not any(True for _ in model.parameters()):
        raise ValueError("model has no parameters to train")
    check_positive_int("steps", steps)
    next_batch = _batch_function(batches, steps)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable (model, batch) -> 0-d loss tensor, got {loss_fn!r}")
    lr = _check_positive_number("lr", lr)
    check_integer("seed", seed, error=TypeError)
    check_bool("seed_global_rng", seed_global_rng, error=TypeError)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    betas = _check_betas(betas)
    eps = _check_positive_number("eps", eps)
    momentum = check_number("momentum", momentum, low=0)
    if schedule is not None and not callable(schedule):
        raise TypeError(f"schedule must be None or a callable (completed_steps) -> multiplier, got {schedule!r}")
    if clip_norm is not None:
        clip_norm = _check_positive_number("clip_norm", clip_norm)
    check_bool("stop_on_nonfinite", stop_on_nonfinite, error=TypeError)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be None or a callable (step, loss, grad_norm) -> None, got {on_step!r}")

    if seed_global_rng:
        torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    opt = _make_optimizer(model, optimizer, lr, betas, eps, float(momentum))
    scheduler = None if schedule is None else torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    losses: list[float] = []
    for step in range(steps):
        loss = loss_fn(model, next_batch(generator))
        if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
            shape = f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""
            raise TypeError(f"loss_fn must return a 0-d tensor, got {type(loss).__name__}{shape}")
        if stop_on_nonfinite and not bool(torch.isfinite(loss)):
            losses.append(math.inf)
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = None
        if clip_norm is not None or on_step is not None:  # a max_norm of inf measures the norm without clipping
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), math.inf if clip_norm is None else clip_norm)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
        if on_step is not None and grad_norm is not None:
            on_step(step, losses[-1], float(grad_norm))
    model.eval()
    return losses
