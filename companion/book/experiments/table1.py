"""The paper's Table 1, measured, for the chapter "The Transformer assembled".

Four layer types over a sequence (:class:`RestrictedSelfAttention`, :class:`StepwiseRNN`, convolutions, full
self-attention; :func:`make_table1_layer` builds one), the dependency matrix of one layer read off its Jacobian
(:func:`dependency_matrix`), the maximum path length through a stack of such layers (:func:`max_path_length`),
FLOPs (:func:`count_flops`) and the number of operations run one after another (:func:`count_operations`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from ..._validation import check_choice, check_integer, check_positive_int
from ...attention import MultiHeadAttention

__all__ = [
    "TABLE1_KINDS",
    "RestrictedSelfAttention",
    "StepwiseRNN",
    "make_table1_layer",
    "dependency_matrix",
    "max_path_length",
    "count_flops",
    "count_operations",
]


def count_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of the matrix products (and convolutions) that ``fn()`` runs, counted by
    :class:`torch.utils.flop_counter.FlopCounterMode` (a multiply-add counts 2)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


# ---------------------------------------------------------------------------------------------------------
# Table 1: four kinds of layer over a sequence
# ---------------------------------------------------------------------------------------------------------

TABLE1_KINDS = ("self-attention", "recurrent", "convolution", "dilated convolution", "restricted self-attention")


class RestrictedSelfAttention(nn.Module):
    """Single-head self-attention in which position i sees only positions ``i-r .. i+r`` (Table 1, last row).

    The keys and values of each window are gathered with ``unfold``, so the work is ``O(r n d)``, not
    ``O(n^2 d)``: scores ``[batch, n, 2r+1]`` instead of ``[batch, n, n]``. Positions outside the sequence are
    masked out.
    """

    def __init__(self, d_model: int, r: int) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.r = check_positive_int("r", r)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))

    def _windows(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, n, d]`` -> ``[batch, n, 2r+1, d]``: the 2r+1 neighbours of each position (zero-padded)."""
        padded = nn.functional.pad(x, (0, 0, self.r, self.r))
        return padded.unfold(1, 2 * self.r + 1, 1).transpose(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [batch, n, d_model]`` -> ``[batch, n, d_model]``."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be [batch, n, d_model={self.d_model}], got {getattr(x, 'shape', type(x))}")
        n = x.shape[1]
        q = self.q_proj(x)  # [b, n, d]
        k, v = self._windows(self.k_proj(x)), self._windows(self.v_proj(x))  # [b, n, 2r+1, d]
        scores = torch.einsum("bnd,bnwd->bnw", q, k) / math.sqrt(self.d_model)  # [b, n, 2r+1]
        offsets = torch.arange(-self.r, self.r + 1, device=x.device)
        neighbour = torch.arange(n, device=x.device)[:, None] + offsets  # [n, 2r+1] position of each key
        inside = (neighbour >= 0) & (neighbour < n)
        scores = scores.masked_fill(~inside, float("-inf"))
        weights = scores.softmax(dim=-1)
        return self.out_proj(torch.einsum("bnw,bnwd->bnd", weights, v))


class StepwiseRNN(nn.Module):
    """An Elman recurrence ``h_i = tanh(W_ih x_i + W_hh h_{i-1} + b)`` (Table 1, "recurrent").

    :meth:`forward` runs it the only way it can run: one position after the other, n dependent steps.
    :meth:`step` is one application of the cell at every position at once, reading each position's
    predecessor from a given state sequence: iterating it n times from zeros gives the same states as
    :meth:`forward`, so a stack of L ``step`` layers is the recurrence unrolled L times.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.cell = nn.RNNCell(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [batch, n, d_model]`` -> states ``[batch, n, d_model]``, computed position by position."""
        h = x.new_zeros(x.shape[0], self.d_model)
        states = []
        for i in range(x.shape[1]):
            h = self.cell(x[:, i], h)
            states.append(h)
        return torch.stack(states, dim=1)

    def step(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """One recurrence step everywhere: ``new_h[i] = cell(x[i], h[i-1])`` with ``h[-1] = 0``; all
        ``[batch, n, d_model]``."""
        previous = nn.functional.pad(h, (0, 0, 1, 0))[:, :-1]
        b, n, d = x.shape
        return self.cell(x.reshape(b * n, d), previous.reshape(b * n, d)).view(b, n, d)


def make_table1_layer(kind: str, d_model: int, k: int = 3, r: int = 2, layer: int = 0) -> Callable:
    """One layer of the given ``kind`` as a function ``[batch, n, d] -> [batch, n, d]``.

    For ``"recurrent"`` the function is :meth:`StepwiseRNN.step` applied to the *states* (with a fixed
    random input), so that composing L of them is L steps of the recurrence. ``"convolution"`` has kernel
    ``k`` (odd, centred); ``"dilated convolution"`` layer ``layer`` has kernel ``k`` and dilation ``k**layer``;
    ``"restricted self-attention"`` has window radius ``r``. Parameters are float64.
    """
    check_choice("kind", kind, TABLE1_KINDS)
    check_positive_int("d_model", d_model)
    if kind == "convolution" and check_integer("k (the kernel size)", k, minimum=3) % 2 == 0:
        raise ValueError(f"k must be an odd kernel size >= 3 for a centred convolution, got {k!r}")
    if kind == "dilated convolution":
        check_integer("k (the kernel size)", k, minimum=2)
    if kind == "self-attention":
        mha = MultiHeadAttention(d_model, 1).double()
        return lambda x: mha(x, x, x, need_weights=True)[0]  # the explicit path (differentiable twice, counted)
    if kind == "restricted self-attention":
        return RestrictedSelfAttention(d_model, r).double()
    if kind == "recurrent":
        rnn = StepwiseRNN(d_model).double()
        inputs: dict[tuple, torch.Tensor] = {}

        def step(h: torch.Tensor) -> torch.Tensor:
            key = tuple(h.shape)
            if key not in inputs:
                inputs[key] = torch.randn(h.shape, dtype=h.dtype, generator=torch.Generator().manual_seed(1))
            return rnn.step(inputs[key], h)

        return step
    if kind == "convolution":
        conv = nn.Conv1d(d_model, d_model, k, padding=(k - 1) // 2).double()
        return lambda x: conv(x.transpose(1, 2)).transpose(1, 2)
    dilation = k**layer  # causal, as in WaveNet and ByteNet: position i reads i, i - k**l, i - 2 k**l, ...
    conv = nn.Conv1d(d_model, d_model, k, dilation=dilation).double()
    return lambda x: conv(nn.functional.pad(x.transpose(1, 2), (dilation * (k - 1), 0))).transpose(1, 2)


def dependency_matrix(fn: Callable[[torch.Tensor], torch.Tensor], n: int, d_model: int, seed: int = 0) -> torch.Tensor:
    """Which outputs of ``fn`` depend on which inputs: ``D[i, j]`` is True when output position i has a
    non-zero Jacobian block with respect to input position j.

    ``fn`` maps ``[1, n, d_model] -> [1, n, d_model]`` (float64); the Jacobian is taken at a random input.
    Returns a bool ``[n, n]`` tensor. Structural zeros (masks, kernels, causality) are exact zeros.
    """
    check_positive_int("n", n)
    check_positive_int("d_model", d_model)
    x = torch.randn(1, n, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    with warnings.catch_warnings():  # vmap over unfold's backward (restricted attention) works, only slower
        warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented")
        jacobian = torch.func.jacrev(lambda inp: fn(inp[None])[0])(x[0])  # [n, d, n, d]
    return jacobian.abs().amax(dim=(1, 3)) > 0


def max_path_length(layers: Callable[[int], torch.Tensor], reachable: torch.Tensor, max_layers: int = 10_000) -> int:
    """The fewest layers after which every pair in ``reachable`` is connected.

    ``layers(l)`` is layer l's dependency matrix ``[n, n]`` (from :func:`dependency_matrix`). After L layers,
    position i is connected to j when some chain ``j -> ... -> i`` uses at most one hop per layer (a position may
    also wait a layer, as its own value is carried on). ``reachable`` is the bool ``[n, n]`` set of pairs
    the architecture can ever connect (all pairs; ``i >= j`` for a recurrence). Raises if ``max_layers`` do not
    connect them all.
    """
    n = reachable.shape[0]
    connected = torch.eye(n, dtype=torch.bool)
    for depth in range(1, max_layers + 1):
        hop = layers(depth - 1)
        if hop.shape != (n, n):
            raise ValueError(f"layers({depth - 1}) must be a [{n}, {n}] matrix, got {tuple(hop.shape)}")
        connected = connected | ((hop.double() @ connected.double()) > 0)
        if bool(connected[reachable].all()):
            return depth
    raise RuntimeError(f"{max_layers} layers do not connect every reachable pair")


class _OperationCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_operations(fn: Callable[[], object]) -> int:
    """Number of ATen operations (kernels) ``fn()`` executes. For layers whose operations each take the whole
    sequence at once this does not grow with n; a recurrence runs a fixed number of operations per position,
    each waiting for the previous position's result."""
    with _OperationCounter() as counter:
        fn()
    return counter.count
