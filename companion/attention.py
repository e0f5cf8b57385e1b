"""Scaled dot-product attention, masks and multi-head attention (Vaswani et al., 2017, section 3.2).

Conventions used throughout the package:

* batch-first shapes: ``[batch, seq, d_model]`` for activations, ``[batch, heads, seq, d_head]`` per head;
* masks are **boolean and True means "may attend"** (the convention of
  :func:`torch.nn.functional.scaled_dot_product_attention`; note that :class:`torch.nn.MultiheadAttention`
  uses the opposite polarity for ``key_padding_mask``);
* a query whose keys are all masked gets zero weights and a zero output, never NaN.

Two paths compute attention. :func:`scaled_dot_product_attention` is the explicit reference: it builds the
score matrix, applies the softmax and returns the weights, for teaching and plots. :func:`fast_attention`
calls PyTorch's fused kernel (flash / memory-efficient / cuDNN / math, whichever applies) and returns only
the output. :class:`MultiHeadAttention` uses the fast path unless the weights are asked for.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_bool_mask, check_last_dim, check_positive_int, check_tensor

__all__ = [
    "scaled_dot_product_attention",
    "fast_attention",
    "causal_mask",
    "padding_mask",
    "MultiHeadAttention",
]


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean ``[size, size]`` mask, True on and below the diagonal: position i may attend to j <= i."""
    check_positive_int("size", size)
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Boolean key-padding mask ``[batch, 1, 1, seq]``: True where ``tokens`` is a real token.

    The mask hides padded *keys* from every query; it broadcasts over heads and query positions.
    """
    tokens = check_tensor("tokens", tokens, dims=2)
    if tokens.dtype.is_floating_point:
        raise TypeError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
    return (tokens != pad_id)[:, None, None, :]


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    check_tensor("q", q)
    check_tensor("k", k)
    check_tensor("v", v)
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            "q, k and v must have the same number (>= 2) of dimensions [..., seq, features], got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions n, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(f"q and k must have at least one position, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "the leading (batch, head) dimensions of q, k and v must broadcast, got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        ) from None


def _check_causal(is_causal: bool, mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> None:
    """``is_causal`` excludes an explicit mask and needs as many keys as queries (self-attention)."""
    if not is_causal:
        return
    if mask is not None:
        raise ValueError("pass either mask or is_causal=True, not both (combine them into one boolean mask)")
    if k.shape[-2] != q.shape[-2]:
        raise ValueError(
            f"is_causal=True needs as many keys as queries, got {q.shape[-2]} queries and {k.shape[-2]} keys"
        )


def _scores_shape(q: torch.Tensor, k: torch.Tensor) -> tuple[int, ...]:
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    return (*batch, q.shape[-2], k.shape[-2])


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Reference attention :math:`\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V` that also returns the weights.

    Args:
        q: queries ``[..., m, d_k]``.
        k: keys ``[..., n, d_k]``.
        v: values ``[..., n, d_v]``.
        mask: optional boolean mask broadcastable to ``[..., m, n]``; True = may attend.
        dropout_p: dropout probability applied to the weights before they multiply ``v`` whenever
            ``dropout_p > 0`` (as in :func:`torch.nn.functional.scaled_dot_product_attention`; pass 0 in eval).

    Returns:
        ``(output [..., m, d_v], weights [..., m, n])``. The returned weights are the softmax
        probabilities *before* dropout; each row sums to 1, except fully masked rows, which are all zero.
    """
    _check_qkv(q, k, v)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [..., m, n]
    if mask is not None:
        check_bool_mask("mask", mask, _scores_shape(q, k))
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # A row with every key masked is softmax(-inf, ..., -inf) = NaN: define it as all zeros instead.
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return dropped @ v, weights


def fast_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """Attention through :func:`torch.nn.functional.scaled_dot_product_attention` (output only).

    Same shapes and mask convention as :func:`scaled_dot_product_attention`. ``is_causal=True`` applies the
    causal mask without materialising it (lets PyTorch pick the flash kernel); it cannot be combined with
    ``mask``. Fully masked query rows return zeros, as in the reference path.
    """
    _check_qkv(q, k, v)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    _check_causal(is_causal, mask, q, k)
    if mask is not None:
        check_bool_mask("mask", mask, _scores_shape(q, k))
    return _sdpa(q, k, v, mask, dropout_p, is_causal)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float,
          is_causal: bool) -> torch.Tensor:
    """:func:`fast_attention` without the argument checks, for callers whose tensors are already checked
    (the model's layers call it once per layer and decoding step)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
    if mask is not None:
        # Fully masked rows come out of some kernels as NaN; define them as zeros, like the reference path.
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention :math:`\mathrm{Concat}(\mathrm{head}_1..\mathrm{head}_h)W^O` (section 3.2.2).

    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` with ``d_k = d_v = d_model / num_heads``. The h
    per-head projections are stored as one ``nn.Linear(d_model, d_model)`` each for Q, K and V (``q_proj``,
    ``k_proj``, ``v_proj``); head i uses rows ``i*d_k:(i+1)*d_k`` of each weight. ``out_proj`` is W^O.

    For self-attention (query, key and value are the same tensor), :meth:`project_qkv` computes the three
    projections as one matrix product with the stacked weight ``[W^Q; W^K; W^V]`` (``[3 d_model, d_model]``)
    when ``fuse_qkv`` is True: the same numbers up to rounding, one large product instead of three small ones.
    The parameters stay three separate ``nn.Linear`` layers either way, so checkpoints do not depend on it.

    Args:
        d_model: model width.
        num_heads: number of heads h; must divide ``d_model``.
        dropout: dropout on the attention weights (the paper's base model uses 0).
        bias: whether the four projections have biases.
        fuse_qkv: compute self-attention's Q, K and V projections as one product (default True).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 fuse_qkv: bool = True) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.dropout = dropout
        self.fuse_qkv = bool(fuse_qkv)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    # -- shape helpers -------------------------------------------------------------------------------
    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, d_model]`` -> ``[batch, heads, seq, d_head]``."""
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.d_head).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, heads, seq, d_head]`` -> ``[batch, seq, d_model]`` (the Concat of the heads)."""
        b, _, n, _ = x.shape
        return x.transpose(1, 2).reshape(b, n, self.d_model)

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Project keys and values and split heads: two ``[batch, heads, n, d_head]`` tensors."""
        return self.split_heads(self.k_proj(key)), self.split_heads(self.v_proj(value))

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention projections of ``x [batch, seq, d_model]``: q, k, v, each ``[batch, heads, seq, d_head]``.

        With ``fuse_qkv`` one ``F.linear`` with the stacked weight ``[3 d_model, d_model]``, else three.
        """
        if not self.fuse_qkv:
            return self.split_heads(self.q_proj(x)), *self.project_kv(x, x)
        q, k, v = F.linear(x, *self._stacked_qkv()).chunk(3, dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def _stacked_qkv(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``[W^Q; W^K; W^V]`` ``[3 d_model, d_model]`` and the stacked biases (or None).

        While gradients are recorded the stack is rebuilt at every call (autograd routes its gradient back to
        the three layers). Without gradients (decoding) it is kept and reused until a parameter changes: each
        parameter's storage and in-place version counter are the key.
        """
        params = [p for layer in (self.q_proj, self.k_proj, self.v_proj) for p in (layer.weight, layer.bias)
                  if p is not None]

        def stack() -> tuple[torch.Tensor, torch.Tensor | None]:
            weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])
            bias = (None if self.q_proj.bias is None
                    else torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))
            return weight, bias

        if torch.is_grad_enabled() and any(p.requires_grad for p in params):
            return stack()
        key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in params)
        cached = self.__dict__.get("_qkv_stack")
        if cached is None or cached[0] != key:
            cached = (key, *stack())
            self.__dict__["_qkv_stack"] = cached  # a plain attribute: not a parameter, buffer or state entry
        return cached[1], cached[2]

    def _check_inputs(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, dims=3)
            check_last_dim(name, x, self.d_model)
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(
                "query, key and value must have the same batch size, got shapes "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length, got {tuple(key.shape)} and {tuple(value.shape)}"
            )
        if query.shape[1] == 0 or key.shape[1] == 0:
            raise ValueError(
                f"query and key must hold at least one position, got {tuple(query.shape)}, {tuple(key.shape)}"
            )

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention over already projected heads ``[batch, heads, seq, d_head]``; returns merged output
        ``[batch, m, d_model]`` (after ``out_proj``) and the weights ``[batch, heads, m, n]`` or None."""
        p = self.dropout if self.training else 0.0
        _check_causal(is_causal, mask, q, k)
        if need_weights:
            if is_causal:
                mask = causal_mask(q.shape[-2], device=q.device)
            heads, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p)
        else:
            if mask is not None:  # q, k, v come from this module's projections; a mask may come from outside
                check_bool_mask("mask", mask, _scores_shape(q, k))
            heads, weights = _sdpa(q, k, v, mask, p, is_causal), None
        return self.out_proj(self.merge_heads(heads)), weights

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Multi-head attention.

        Args:
            query: ``[batch, m, d_model]``.
            key, value: ``[batch, n, d_model]``.
            mask: boolean, 2-D ``[m, n]`` or 4-D broadcastable to ``[batch, heads, m, n]`` (e.g.
                ``[batch, 1, 1, n]`` for key padding, ``[m, n]`` for causality); True = may attend.
            need_weights: also return the attention weights (uses the explicit reference path).
            is_causal: apply a causal mask without materialising it (self-attention, m == n).

        Returns:
            ``output [batch, m, d_model]``, or ``(output, weights [batch, heads, m, n])`` when
            ``need_weights`` is True.
        """
        self._check_inputs(query, key, value)
        if mask is not None:
            check_tensor("mask", mask, dims=(2, 4))  # a 3-D mask is ambiguous: [batch, m, n] or [heads, m, n]?
            check_bool_mask("mask", mask, (query.shape[0], self.num_heads, query.shape[1], key.shape[1]))
        if query is key and key is value:
            q, k, v = self.project_qkv(query)
        else:
            q = self.split_heads(self.q_proj(query))
            k, v = self.project_kv(key, value)
        out, weights = self.attend(q, k, v, mask=mask, need_weights=need_weights, is_causal=is_causal)
        return (out, weights) if need_weights else out
