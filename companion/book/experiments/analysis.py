"""Looking inside multi-head attention: per-head entropy, head removal and head importance (chapter 4).

Where the heads meet. In :class:`~companion.attention.MultiHeadAttention` the h heads are computed
independently and combined only by the output projection,

    out = Concat(head_1, ..., head_h) W^O + b^O,    W^O = out_proj.weight.T  [d_model, d_model],

so head i reaches the output through the input columns ``i*d_head : (i+1)*d_head`` of ``out_proj.weight``.
Zeroing those columns removes head i's contribution *exactly* (the bias b^O is shared and stays). This is the
head mask of Michel et al. (2019): multiplying head i by a gate xi_i = 0. Nothing else in the model changes, so
the loss of the model with the head removed, minus the loss of the full model, measures what that head is worth
at test time.

Read top to bottom: finding the attention modules of a model, removing heads (permanently or temporarily),
the entropy of each head's attention distributions, and the measurements of the pruning experiment: single-head
ablation, Michel et al.'s gradient estimate of the same quantity, and a pruning curve that removes heads one
after another.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..._validation import check_integer, check_tensor
from ...attention import MultiHeadAttention

__all__ = [
    "HeadId",
    "attention_modules",
    "all_heads",
    "head_columns",
    "prune_heads",
    "heads_removed",
    "attention_entropy",
    "attention_share",
    "head_ablation",
    "gradient_importance",
    "pruning_curve",
]

HeadId = tuple[str, int]
"""A head named by the qualified name of its attention module and its index, e.g.
``("blocks.layers.0.self_attn", 3)``."""


def attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    """Every :class:`~companion.attention.MultiHeadAttention` inside ``model``, by qualified name, in
    ``named_modules`` order.

    A bare :class:`~companion.attention.MultiHeadAttention` passed as ``model`` is returned under the name ``""``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return {name: module for name, module in model.named_modules() if isinstance(module, MultiHeadAttention)}


def all_heads(model: nn.Module) -> list[HeadId]:
    """Every head of ``model`` as ``(module name, head index)``, module by module, heads in order."""
    return [(name, i) for name, module in attention_modules(model).items() for i in range(module.num_heads)]


def head_columns(attention: MultiHeadAttention, head: int) -> slice:
    """The input columns of ``attention.out_proj.weight`` that head ``head`` feeds: ``head*d_head:(head+1)*d_head``."""
    if not isinstance(attention, MultiHeadAttention):
        raise TypeError(f"attention must be a companion MultiHeadAttention, got {type(attention).__name__}")
    check_integer("head", head, error=TypeError)
    if not 0 <= head < attention.num_heads:
        raise ValueError(f"head must be in [0, num_heads={attention.num_heads}), got {head}")
    return slice(head * attention.d_head, (head + 1) * attention.d_head)


def prune_heads(attention: MultiHeadAttention, heads: Iterable[int]) -> None:
    """Remove ``heads`` from ``attention`` for good: zero their columns of ``out_proj.weight`` (in place).

    The pruned heads still run (their outputs are multiplied by zero); the output of the module becomes
    ``sum over kept heads of head_i W^O_i + b^O``. Use :func:`heads_removed` to remove heads temporarily.
    """
    columns = [head_columns(attention, head) for head in heads]
    with torch.no_grad():
        for cols in columns:
            attention.out_proj.weight[:, cols] = 0.0


def _group_heads(model: nn.Module, heads: Iterable[HeadId]) -> dict[str, list[int]]:
    """``[(name, head), ...]`` -> ``{name: [head, ...]}``, checking every name and index against ``model``."""
    modules = attention_modules(model)
    grouped: dict[str, list[int]] = {}
    for item in heads:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"heads must hold (module name, head index) pairs, got {item!r}")
        name, head = item
        if name not in modules:
            raise ValueError(f"no MultiHeadAttention named {name!r} in the model; it has {sorted(modules)}")
        head_columns(modules[name], head)  # validates the index
        grouped.setdefault(name, []).append(head)
    return grouped


@contextlib.contextmanager
def heads_removed(model: nn.Module, heads: Iterable[HeadId]) -> Iterator[nn.Module]:
    """Context manager: inside the ``with`` block the listed heads of ``model`` are removed.

    ``heads`` lists ``(module name, head index)`` pairs (names as in :func:`attention_modules`). The affected
    ``out_proj.weight`` matrices are saved and restored on exit, even when the block raises, so the model
    leaves the block exactly as it entered. Yields the model.
    """
    grouped = _group_heads(model, heads)
    modules = attention_modules(model)
    saved = {name: modules[name].out_proj.weight.detach().clone() for name in grouped}
    try:
        for name, indices in grouped.items():
            prune_heads(modules[name], indices)
        yield model
    finally:
        with torch.no_grad():
            for name, weight in saved.items():
                modules[name].out_proj.weight.copy_(weight)


def attention_entropy(weights: torch.Tensor, query_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy (in nats) of each head's attention distributions.

    Args:
        weights: attention weights ``[batch, heads, m, n]`` whose rows sum to 1 (or are all zero for a fully
            masked query, as :func:`~companion.attention.scaled_dot_product_attention` returns them).
        query_mask: optional boolean ``[batch, m]``; True marks the queries to count (e.g. non-padding tokens).

    Returns:
        ``[heads]``: for each head, the average over the counted queries of ``-sum_j w_j log w_j``. A head that
        always puts all its weight on one key scores 0; one that spreads evenly over n keys scores ``log n``.
        All-zero rows are never counted.
    """
    weights = check_tensor("weights", weights, dims=4)
    if not weights.dtype.is_floating_point:
        raise TypeError(f"weights must be a floating-point tensor, got dtype {weights.dtype}")
    batch, _, m, _ = weights.shape
    if query_mask is not None:
        query_mask = check_tensor("query_mask", query_mask, dims=2)
        if query_mask.dtype != torch.bool:
            raise TypeError(f"query_mask must be boolean (True = count this query), got dtype {query_mask.dtype}")
        if tuple(query_mask.shape) != (batch, m):
            raise ValueError(f"query_mask must have shape [batch, m] = {(batch, m)}, got {tuple(query_mask.shape)}")
    w = weights.double()
    row_entropy = -torch.xlogy(w, w).sum(dim=-1)  # [batch, heads, m]; 0 * log 0 = 0
    counted = w.sum(dim=-1) > 0.5  # [batch, heads, m]: skip all-zero (fully masked) rows
    if query_mask is not None:
        counted = counted & query_mask[:, None, :]
    total = (row_entropy * counted).sum(dim=(0, 2))
    count = counted.sum(dim=(0, 2))
    if bool((count == 0).any()):
        raise ValueError("some head has no query to average over (every row is masked or all-zero)")
    return (total / count).to(weights.dtype)


def attention_share(weights: torch.Tensor, keys: torch.Tensor, query_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Average attention weight that each head puts on a chosen set of keys.

    Args:
        weights: attention weights ``[batch, heads, m, n]``.
        keys: boolean selector ``[m, n]`` or ``[batch, m, n]``: True where key j counts for query i (e.g.
            ``torch.eye(n, dtype=torch.bool)`` for "itself", the diagonal below it for "the previous token",
            column 0 for "the first token").
        query_mask: optional boolean ``[batch, m]``; True marks the queries to average over.

    Returns:
        ``[heads]``: for each head, the mean over the counted queries of the weight on the selected keys (a
        number in [0, 1]).
    """
    weights = check_tensor("weights", weights, dims=4)
    batch, _, m, n = weights.shape
    keys = check_tensor("keys", keys, dims=(2, 3))
    if keys.dtype != torch.bool:
        raise TypeError(f"keys must be a boolean selector (True = count this key), got dtype {keys.dtype}")
    if tuple(keys.shape[-2:]) != (m, n) or (keys.dim() == 3 and keys.shape[0] != batch):
        raise ValueError(
            f"keys must have shape [m, n] = {(m, n)} or [batch, m, n] = {(batch, m, n)}, got {tuple(keys.shape)}"
        )
    if query_mask is None:
        query_mask = torch.ones(batch, m, dtype=torch.bool, device=weights.device)
    query_mask = check_tensor("query_mask", query_mask, dims=2)
    if query_mask.dtype != torch.bool or tuple(query_mask.shape) != (batch, m):
        raise ValueError(
            f"query_mask must be a boolean [batch, m] = {(batch, m)} tensor, got "
            f"{query_mask.dtype} {tuple(query_mask.shape)}"
        )
    if not bool(query_mask.any()):
        raise ValueError("query_mask must mark at least one query")
    selector = keys if keys.dim() == 3 else keys.expand(batch, m, n)
    on_keys = (weights.double() * selector[:, None]).sum(dim=-1)  # [batch, heads, m]
    counted = query_mask[:, None, :].double()
    return ((on_keys * counted).sum(dim=(0, 2)) / counted.sum(dim=(0, 2))).to(weights.dtype)


def _check_loss_fn(loss_fn: object) -> None:
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable taking no argument and returning a float, got {loss_fn!r}")


def _loss(loss_fn: Callable[[], float]) -> float:
    value = float(loss_fn())
    if not math.isfinite(value):
        raise ValueError(f"loss_fn returned {value}, expected a finite number")
    return value


def head_ablation(
    model: nn.Module, loss_fn: Callable[[], float], heads: Sequence[HeadId] | None = None
) -> dict[HeadId, float]:
    """Change of the loss when each head is removed on its own.

    Args:
        model: the trained model (its weights are restored after every measurement).
        loss_fn: a callable with no argument returning the model's loss (e.g. on a validation set) as a float;
            it is called once for the full model and once per head.
        heads: the heads to test (default: :func:`all_heads`).

    Returns:
        ``{(module name, head): loss without that head - loss of the full model}``; positive means the head
        helps, near zero means the model does not need it.
    """
    _check_loss_fn(loss_fn)
    heads = all_heads(model) if heads is None else list(heads)
    _group_heads(model, heads)
    base = _loss(loss_fn)
    changes = {}
    for head in heads:
        with heads_removed(model, [head]):
            changes[head] = _loss(loss_fn) - base
    return changes


def gradient_importance(
    model: nn.Module, examples: Iterable[Any], loss_fn: Callable[[nn.Module, Any], torch.Tensor]
) -> dict[HeadId, float]:
    """Michel et al.'s (2019) head importance: the mean over examples of ``|dL/d xi_h|`` at ``xi = 1``.

    Every head's output is multiplied by a gate ``xi_h`` (through a forward pre-hook on ``out_proj`` that scales
    the head's input columns; all gates are 1, so the model computes exactly what it computes without them).
    For each example the gradient of its loss with respect to the gates is taken and its absolute value
    averaged. It is a first-order estimate of the loss change when a head is removed (``xi_h: 1 -> 0``), and
    costs one backward pass per example instead of one evaluation per head. The absolute value is taken per
    example: the gradient of the *mean* loss is close to zero for every head of a well-trained model.

    Args:
        model: the model; its parameters get no ``.grad`` (only the gates are differentiated).
        examples: an iterable of examples (anything ``loss_fn`` accepts); must not be empty.
        loss_fn: ``loss_fn(model, example)`` -> a 0-d loss tensor computed with ``model``.

    Returns:
        ``{(module name, head): importance}`` for every head of the model.
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable (model, example) -> loss tensor, got {loss_fn!r}")
    modules = attention_modules(model)
    if not modules:
        raise ValueError("model has no MultiHeadAttention module")
    gates = {name: torch.ones(module.num_heads, requires_grad=True) for name, module in modules.items()}

    def make_hook(name: str, module: MultiHeadAttention):
        def scale_heads(_, args):
            gate = gates[name].to(args[0].device, args[0].dtype).repeat_interleave(module.d_head)  # [d_model]
            return (args[0] * gate,) + tuple(args[1:])

        return scale_heads

    handles = [module.out_proj.register_forward_pre_hook(make_hook(name, module)) for name, module in modules.items()]
    totals = {name: torch.zeros(module.num_heads, dtype=torch.float64) for name, module in modules.items()}
    count = 0
    try:
        for example in examples:
            loss = loss_fn(model, example)
            if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
                shape = f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""
                raise TypeError(f"loss_fn must return a 0-d tensor, got {type(loss).__name__}{shape}")
            grads = torch.autograd.grad(loss, list(gates.values()), allow_unused=True)
            for name, grad in zip(gates, grads):
                if grad is not None:
                    totals[name] += grad.detach().abs().double().cpu()
            count += 1
    finally:
        for handle in handles:
            handle.remove()
    if count == 0:
        raise ValueError("examples must hold at least one example")
    return {(name, i): float(totals[name][i]) / count for name in modules for i in range(modules[name].num_heads)}


def pruning_curve(model: nn.Module, loss_fn: Callable[[], float], order: Sequence[HeadId]) -> list[float]:
    """The loss as heads are removed one after another in ``order`` (cumulatively).

    Returns ``len(order) + 1`` losses: entry k is the loss with the first k heads of ``order`` removed (entry 0
    is the full model). The model's weights are restored afterwards. Michel et al. (2019) remove heads in order
    of increasing importance; :func:`head_ablation` gives one such order.
    """
    _check_loss_fn(loss_fn)
    order = list(order)
    _group_heads(model, order)
    if len(set(order)) != len(order):
        raise ValueError("order must not name the same head twice")
    losses = [_loss(loss_fn)]
    for k in range(1, len(order) + 1):
        with heads_removed(model, order[:k]):
            losses.append(_loss(loss_fn))
    return losses
