"""A noisy key-value lookup task for comparing attention scoring functions (chapter 2).

Every example is a small memory of ``n`` (key, value) pairs and one query. The query is a noisy copy of one
of the keys, seen through a fixed orthogonal matrix ``R`` that the model does not know:

    q = R (k_t + noise * eps),    eps ~ N(0, I),

and the model must return that key's value ``v_t``. Keys lie on the sphere of radius ``sqrt(key_dim)`` (so
every component has unit variance on average and all keys have the same norm) and values are standard
normal. Because every key has the same norm and the noise is isotropic, the most likely target is the key
with the largest dot product with ``R^T q``: :meth:`LookupTask.oracle_accuracy` reports how often that
Bayes-optimal rule is right, the ceiling for every model.

A model (:class:`LookupModel`) scores the query against every key with one of the scoring modules of
:mod:`companion.book.experiments.scoring`, takes the softmax and returns the weighted average of the values; it is
trained to minimise the squared error between that average and ``v_t``. The loss reaches the scores only
*through* the softmax, so a saturated softmax (vanishing Jacobian) slows learning: this is where the scaling of
the dot product matters. The scorers without parameters (:class:`~companion.book.experiments.scoring.DotScore`) get a
learned linear query projection; the others learn their own matrices, so every model has to learn to undo ``R``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..._validation import check_last_dim, check_number, check_positive_int, check_tensor
from .scoring import AdditiveScore, DotScore, GeneralScore, attend
from .training import fit

__all__ = [
    "LookupBatch",
    "LookupTask",
    "LookupModel",
    "SCORER_KINDS",
    "make_lookup_model",
    "train_lookup",
    "evaluate_lookup",
]

SCORER_KINDS = ("additive", "additive_no_bias", "general", "dot", "scaled_dot")
"""Names accepted by :func:`make_lookup_model`."""


class LookupBatch(NamedTuple):
    """One batch of lookup problems: ``query [batch, 1, key_dim]`` (one query per example),
    ``keys [batch, num_pairs, key_dim]``, ``values [batch, num_pairs, value_dim]`` and ``target [batch]`` (long,
    the index of the key the query was made from)."""

    query: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    target: torch.Tensor


@dataclass(frozen=True)
class LookupTask:
    """The task's sizes and its fixed hidden rotation ``R``.

    Args:
        key_dim: width ``d_k`` of queries and keys.
        num_pairs: number ``n`` of key-value pairs per example.
        value_dim: width ``d_v`` of the values.
        noise: standard deviation of the noise added to the target key before rotating it.
        seed: seed of the rotation ``R`` (the same seed gives the same task).
    """

    key_dim: int
    num_pairs: int = 16
    value_dim: int = 8
    noise: float = 0.5
    seed: int = 0
    rotation: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_positive_int("key_dim", self.key_dim)
        check_positive_int("num_pairs", self.num_pairs)
        check_positive_int("value_dim", self.value_dim)
        check_number("noise", self.noise, low=0)
        generator = torch.Generator().manual_seed(self.seed)
        gaussian = torch.randn(self.key_dim, self.key_dim, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        rotation = (q * torch.sign(torch.diagonal(r))).float()  # a uniformly random orthogonal matrix
        object.__setattr__(self, "rotation", rotation)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> LookupBatch:
        """Draw ``batch_size`` independent examples (reproducibly, given ``generator``)."""
        check_positive_int("batch_size", batch_size)
        b, n, d = batch_size, self.num_pairs, self.key_dim
        keys = torch.randn(b, n, d, generator=generator)
        keys = keys / keys.norm(dim=-1, keepdim=True) * d**0.5  # on the sphere of radius sqrt(d)
        values = torch.randn(b, n, self.value_dim, generator=generator)
        target = torch.randint(0, n, (b,), generator=generator)
        noisy = keys[torch.arange(b), target] + self.noise * torch.randn(b, d, generator=generator)
        query = (noisy @ self.rotation.T)[:, None, :]  # q = R (k_t + noise)
        return LookupBatch(query, keys, values, target)

    def oracle_accuracy(self, batch: LookupBatch) -> float:
        """Accuracy of the Bayes-optimal rule ``argmax_j (R^T q) . k_j``, which knows ``R``."""
        unrotated = batch.query @ self.rotation  # [batch, 1, d]: (R^T q)^T = q^T R
        scores = (unrotated @ batch.keys.transpose(1, 2))[:, 0]  # [batch, n]
        return (scores.argmax(-1) == batch.target).float().mean().item()


class AppendOne(nn.Module):
    """Append a constant feature 1 to the last dimension: ``[..., d]`` -> ``[..., d + 1]``.

    Placed in front of a linear map ``W``, it turns ``W x`` into ``W [x; 1] = W' x + b``: the bias trick.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.new_ones(*x.shape[:-1], 1)], dim=-1)


class LookupModel(nn.Module):
    """Optional learned query projection, a scoring module, then :func:`~companion.book.experiments.scoring.attend`.

    Args:
        scorer: a module mapping ``query [batch, m, d_q]`` and ``keys [batch, n, d_k]`` to scores ``[batch, m, n]``.
        query_proj: optional module applied to the query first (e.g. ``nn.Linear(d, d, bias=False)``).
    """

    def __init__(self, scorer: nn.Module, query_proj: nn.Module | None = None) -> None:
        super().__init__()
        self.scorer = scorer
        self.query_proj = query_proj

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(context [batch, m, d_v], weights [batch, m, n], scores [batch, m, n])``."""
        if self.query_proj is not None:
            query = self.query_proj(query)
        scores = self.scorer(query, keys)
        context, weights = attend(scores, values)
        return context, weights, scores


def make_lookup_model(kind: str, key_dim: int, hidden_dim: int | None = None) -> LookupModel:
    """A :class:`LookupModel` for one scoring function, with PyTorch's default initialisation.

    Args:
        kind: ``"additive"`` (Bahdanau's ``v^T tanh(W_q q + W_k k + b)``, the bias ``b`` added with
            ``AppendOne``), ``"additive_no_bias"`` (the same without ``b``, exactly as in the paper's
            appendix; an odd function of ``(q, k)``), ``"general"`` (Luong, ``q^T W k``), ``"dot"`` (Luong, unscaled) or
            ``"scaled_dot"`` (Vaswani et al.). The two dot kinds get a learned ``nn.Linear(key_dim, key_dim,
            bias=False)`` query projection, so that they can learn to undo the task's rotation.
        key_dim: width of queries and keys.
        hidden_dim: hidden width of the additive scorer (default ``key_dim``); ignored by the other kinds.
    """
    check_positive_int("key_dim", key_dim)
    if kind in ("additive", "additive_no_bias"):
        hidden = key_dim if hidden_dim is None else check_positive_int("hidden_dim", hidden_dim)
        if kind == "additive_no_bias":
            return LookupModel(AdditiveScore(key_dim, key_dim, hidden))
        return LookupModel(AdditiveScore(key_dim + 1, key_dim, hidden), AppendOne())
    if kind == "general":
        return LookupModel(GeneralScore(key_dim, key_dim))
    if kind in ("dot", "scaled_dot"):
        return LookupModel(DotScore(scaled=kind == "scaled_dot"), nn.Linear(key_dim, key_dim, bias=False))
    raise ValueError(f"kind must be one of {SCORER_KINDS}, got {kind!r}")


def _lookup_loss(model: nn.Module, batch: LookupBatch) -> tuple[torch.Tensor, torch.Tensor]:
    context, weights, _ = model(batch.query, batch.keys, batch.values)
    wanted = batch.values[torch.arange(len(batch.target)), batch.target]  # [batch, d_v]
    return F.mse_loss(context[:, 0], wanted), weights[:, 0]


def train_lookup(
    model: LookupModel,
    task: LookupTask,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
    optimizer: str = "adam",
) -> list[float]:
    """Train ``model`` on fresh batches of ``task``; returns the training loss of every step.

    The loss is the mean squared error between the attention output and the target's value. Batches are
    drawn from a generator seeded with ``seed``, so a run is reproducible given the model's initial weights.
    The loop is :func:`companion.book.experiments.training.fit` (no gradient clipping, constant learning rate); the
    model is left in eval mode.

    Args:
        optimizer: ``"adam"`` (:class:`torch.optim.Adam`) or ``"sgd"`` (:class:`torch.optim.SGD` with momentum
            0.9). Adam divides every gradient coordinate by a running estimate of its own magnitude, which
            hides a uniformly small gradient; SGD does not.
    """
    check_positive_int("batch_size", batch_size)
    _check_model_fits_task(model, task)
    return fit(
        model,
        lambda generator: task.sample(batch_size, generator),
        lambda model, batch: _lookup_loss(model, batch)[0],
        steps,
        lr=lr,
        seed=seed,
        optimizer=optimizer,
        momentum=0.9,
    )


@torch.no_grad()
def evaluate_lookup(model: LookupModel, batch: LookupBatch) -> dict[str, float]:
    """Retrieval accuracy (the largest weight is on the target) and mean squared error on ``batch``."""
    check_tensor("batch.query", batch.query, dims=3)
    check_last_dim("batch.query", batch.query, batch.keys.shape[-1], what="key_dim")
    model.eval()
    loss, weights = _lookup_loss(model, batch)
    accuracy = (weights.argmax(-1) == batch.target).float().mean().item()
    return {"accuracy": accuracy, "mse": loss.item()}


def _check_model_fits_task(model: LookupModel, task: LookupTask) -> None:
    if not isinstance(model, LookupModel):
        raise TypeError(f"model must be a LookupModel, got {type(model).__name__}")
    if not isinstance(task, LookupTask):
        raise TypeError(f"task must be a LookupTask, got {type(task).__name__}")
