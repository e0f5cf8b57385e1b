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
from dataclasses import dataclass
from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import nn

from ._linear import KeptTranspose, Linear
from ._validation import check_bool_mask, check_fraction, check_last_dim, check_positive_int, check_tensor

__all__ = [
    "scaled_dot_product_attention",
    "fast_attention",
    "causal_mask",
    "padding_mask",
    "masked_softmax",
    "AttentionCache",
    "MultiHeadAttention",
]


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean ``[size, size]`` mask, True on and below the diagonal: position i may attend to j <= i."""
    if not isinstance(size, torch.SymInt):  # a symbolic tensor size (graph export) is a length by construction
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


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax of ``scores [..., m, n]`` over the keys (the last dimension), keys where ``mask`` is False left out.

    ``mask`` is an optional boolean mask broadcastable to ``scores`` (True = may attend). A row whose keys are all
    masked would be ``softmax(-inf, ..., -inf) = NaN``; it gets all-zero weights instead. Shared by
    :func:`scaled_dot_product_attention` and the pre-Transformer scores of ``companion.book.experiments.scoring``.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    check_bool_mask("mask", mask, tuple(scores.shape))
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


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
    check_fraction("dropout_p", dropout_p)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [..., m, n]
    weights = masked_softmax(scores, mask)
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
    check_fraction("dropout_p", dropout_p)
    _check_causal(is_causal, mask, q, k)
    if mask is not None:
        check_bool_mask("mask", mask, _scores_shape(q, k))
    return _sdpa(q, k, v, mask, dropout_p, is_causal)


_HALF = (torch.bfloat16, torch.float16)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float, is_causal: bool
) -> torch.Tensor:
    """:func:`fast_attention` without the argument checks, for callers whose tensors are already checked
    (the model's layers call it once per layer and decoding step).

    Non-finite queries: PyTorch's fused CPU kernel returns a zero row for a query holding NaN, where the
    reference path returns NaN (and both return NaN for inf). Adding ``0 * sum(q)`` row by row gives NaN exactly
    where a query holds NaN or inf and ``+0`` elsewhere, so both paths agree. It is two cheap tensor ops
    (``[..., m, d_k]`` summed, then ``out + 0 * sums`` as one ``add`` with ``alpha=0`` for float32 outputs:
    small next to the ``m x n`` scores; a decoding step calls this four times for the small preset), with no
    host-device synchronisation, so it stays on in training too and works under export and compilation; the sum
    is taken in float32 so that large finite fp16 queries cannot overflow into a false NaN.
    """
    if q.device.type == "cpu" and q.dtype in _HALF and _autocast_enabled("cpu"):
        # Under CPU autocast, attention runs in float32: PyTorch's fused CPU kernel took ~20x longer for its
        # bfloat16 backward than for its float32 one at the small preset's shapes (d_head 32; a 2-core Xeon).
        with torch.autocast("cpu", enabled=False):
            return _sdpa(q.float(), k.float(), v.float(), mask, dropout_p, is_causal)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
    q_sums = q.sum(dim=-1, keepdim=True, dtype=torch.float32)  # [..., m, 1]: NaN where q is not finite
    if out.dtype == torch.float32:
        out = torch.add(out, q_sums, alpha=0.0)  # out + 0 * q_sums in one operation
    else:
        out = out + (q_sums * 0.0).to(out.dtype)
    if mask is not None:
        # Fully masked rows come out of some kernels as NaN; define them as zeros, like the reference path.
        out = torch.where(mask.any(dim=-1, keepdim=True), out, 0.0)
    return out


@dataclass
class AttentionCache:
    """Projected keys and values that one attention layer keeps between decoding steps.

    For incremental decoding, :meth:`MultiHeadAttention.forward` reads and extends this object:

    * a **self-attention** cache (``static=False``) grows by the new positions at every call: ``key`` and
      ``value`` are ``[batch, heads, t, d_head]`` for the ``t`` positions decoded so far;
    * a **cross-attention** cache (``static=True``) is filled once from the encoder memory at the first call
      and reused unchanged afterwards (the memory does not change while a sentence is decoded).

    Both are exact: a position's key and value depend only on that position's input, so computing them once
    and keeping them gives the same numbers as recomputing the whole prefix.
    """

    static: bool = False
    key: torch.Tensor | None = None
    value: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached key positions (0 when empty)."""
        return 0 if self.key is None else self.key.shape[-2]

    @property
    def batch_size(self) -> int | None:
        """Rows held (None when empty)."""
        return None if self.key is None else self.key.shape[0]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` ``[rows]`` (beam re-ranking, or dropping finished sentences)."""
        if self.key is not None and self.value is not None:
            self.key, self.value = self.key.index_select(0, index), self.value.index_select(0, index)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention :math:`\mathrm{Concat}(\mathrm{head}_1..\mathrm{head}_h)W^O` (section 3.2.2).

    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` with ``d_k = d_v = d_model / num_heads``. The h
    per-head projections are stored as one ``nn.Linear(d_model, d_model)`` each for Q, K and V (``q_proj``,
    ``k_proj``, ``v_proj``); head i uses rows ``i*d_k:(i+1)*d_k`` of each weight. ``out_proj`` is W^O.

    :meth:`forward` is the one entry point: the encoder and decoder layers of :class:`~companion.model.Transformer`
    call it exactly as a reader does, with an optional :class:`AttentionCache` for token-by-token decoding.
    Three performance details live behind it and change no result beyond rounding:

    * without ``need_weights`` the heads go through PyTorch's fused kernel (:func:`fast_attention`); with it,
      through the explicit reference :func:`scaled_dot_product_attention`, which returns the weights;
    * for self-attention (``query is key is value``) with ``fuse_qkv=True``, Q, K and V come from one matrix
      product with the stacked weight ``[W^Q; W^K; W^V]`` (``[3 d_model, d_model]``) instead of three (see
      :meth:`project_qkv`). The parameters stay three ``nn.Linear`` layers, so checkpoints do not depend on it;
    * without gradients on CPU, the projections multiply by a kept contiguous copy of the transposed weight
      (``companion._linear``: faster for the few rows of a decoding step).

    Args:
        d_model: model width.
        num_heads: number of heads h; must divide ``d_model``.
        dropout: dropout on the attention weights (the paper's base model uses 0).
        bias: whether the four projections have biases.
        fuse_qkv: compute self-attention's Q, K and V projections as one product (default True).
    """

    def __init__(
        self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True, fuse_qkv: bool = True
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("num_heads", num_heads)
        if d_model % num_heads != 0:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads}")
        check_fraction("dropout", dropout)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.dropout = dropout
        self.fuse_qkv = bool(fuse_qkv)
        self.q_proj = Linear(d_model, d_model, bias=bias)
        self.k_proj = Linear(d_model, d_model, bias=bias)
        self.v_proj = Linear(d_model, d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)
        self._stack = KeptTranspose((self.q_proj, self.k_proj, self.v_proj))

    # -- the entry point ---------------------------------------------------------------------------------
    @overload
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: Literal[False] = False,
        is_causal: bool = False,
        cache: AttentionCache | None = None,
        *,
        check_inputs: bool = True,
    ) -> torch.Tensor: ...

    @overload
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        need_weights: Literal[True],
        is_causal: bool = False,
        cache: AttentionCache | None = None,
        check_inputs: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        is_causal: bool = False,
        cache: AttentionCache | None = None,
        *,
        check_inputs: bool = True,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Multi-head attention of ``query`` over ``key``/``value``.

        Args:
            query: ``[batch, m, d_model]``.
            key, value: ``[batch, n, d_model]``; pass the same tensor three times for self-attention.
            mask: boolean, 2-D ``[m, n]`` or 4-D broadcastable to ``[batch, heads, m, n]`` (e.g.
                ``[batch, 1, 1, n]`` for key padding); True = may attend. With a self-attention cache, ``n``
                counts the cached positions too.
            need_weights: also return the attention weights (uses the explicit reference path).
            is_causal: causal self-attention without materialising the mask (query position i attends to keys
                ``<= i``; with a cache, to every cached key and the new ones up to its own position).
            cache: an :class:`AttentionCache` for incremental decoding. Self-attention appends the new keys and
                values to it and attends over all of them; a ``static`` cache (cross-attention) is filled from
                ``key``/``value`` at the first call and reused afterwards.
            check_inputs: check shapes, dtypes, the mask and the cache (default). The model's layers pass False:
                they build every argument themselves, and a decoding step would pay for the checks at every layer.

        Returns:
            ``output [batch, m, d_model]``; with ``need_weights=True`` the pair
            ``(output, weights [batch, heads, m, n])`` (the foundation API; the flag is a literal at every call
            site, so the type is known statically).
        """
        if check_inputs:
            self._check_inputs(query, key, value, cache)
        elif cache is not None:  # cheap, and the one mistake a caller of the model can still make
            self._check_cache(cache, query)
        q, k, v = self._project(query, key, value, cache)
        if cache is not None and not cache.static:
            mask, is_causal = self._extend_self_cache(cache, q, k, v, mask, is_causal, need_weights)
            assert cache.key is not None and cache.value is not None
            k, v = cache.key, cache.value
        if check_inputs:
            if mask is not None:
                check_tensor("mask", mask, dims=(2, 4))  # a 3-D mask is ambiguous: [batch, m, n] or [heads, m, n]?
                check_bool_mask("mask", mask, (query.shape[0], self.num_heads, q.shape[-2], k.shape[-2]))
            _check_causal(is_causal, mask, q, k)
        out, weights = self.attend(q, k, v, mask=mask, need_weights=need_weights, is_causal=is_causal)
        if need_weights:
            assert weights is not None
            return out, weights
        return out

    # -- steps of forward, public for teaching ---------------------------------------------------------
    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, d_model]`` -> ``[batch, heads, seq, d_head]`` (a view: nothing is copied)."""
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
        q, k, v = self._stack.apply(x).chunk(3, dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

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
        if need_weights:
            if is_causal:
                mask = causal_mask(q.shape[-2], device=q.device)
            heads, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p)
        else:
            heads, weights = _sdpa(q, k, v, mask, p, is_causal), None
        return self.out_proj(self.merge_heads(heads)), weights

    # -- internals -----------------------------------------------------------------------------------------
    def _project(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: AttentionCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q ``[batch, heads, m, d_head]`` and the new k, v (a filled static cache supplies k, v instead)."""
        if cache is not None and cache.static:
            q = self.split_heads(self.q_proj(query))
            if cache.key is None:
                cache.key, cache.value = self.project_kv(key, value)
            assert cache.key is not None and cache.value is not None
            return q, cache.key, cache.value
        if query is key and key is value:
            return self.project_qkv(query)
        return (self.split_heads(self.q_proj(query)), *self.project_kv(key, value))

    @staticmethod
    def _extend_self_cache(
        cache: AttentionCache,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        need_weights: bool,
    ) -> tuple[torch.Tensor | None, bool]:
        """Append the new keys/values to ``cache``; turn ``is_causal`` into the mask for the new positions.

        New position ``offset + i`` may attend to every cached position and to new positions ``<= i``. One new
        position (the usual decoding step) needs no mask at all, unless the weights are asked for.
        """
        offset = cache.length
        if offset:
            k, v = torch.cat([cache.key, k], dim=-2), torch.cat([cache.value, v], dim=-2)  # type: ignore[list-item]
        cache.key, cache.value = k, v
        if not is_causal or offset == 0:
            return mask, is_causal
        t_new = q.shape[-2]
        if t_new == 1 and not need_weights and mask is None:
            return None, False
        causal = causal_mask(offset + t_new, device=q.device)[offset:]
        return (causal if mask is None else mask & causal), False

    def _check_inputs(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: AttentionCache | None
    ) -> None:
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
        dtypes = {query.dtype, key.dtype, value.dtype}
        if not all(d.is_floating_point for d in dtypes):
            raise TypeError(
                f"query, key and value must be floating point, got {query.dtype}, {key.dtype}, {value.dtype}"
            )
        weight_dtype = self.q_proj.weight.dtype
        if dtypes != {weight_dtype} and not _autocast_enabled(query.device.type):
            raise TypeError(
                f"query, key and value must have the module's dtype {weight_dtype}, got {query.dtype}, "
                f"{key.dtype}, {value.dtype} (convert them, or the module with .to(dtype), or use torch.autocast)"
            )
        if cache is not None:
            self._check_cache(cache, query)

    @staticmethod
    def _check_cache(cache: AttentionCache, query: torch.Tensor) -> None:
        """``cache`` is an :class:`AttentionCache` holding as many rows as ``query [batch, m, d_model]``."""
        if not isinstance(cache, AttentionCache):
            raise TypeError(f"cache must be an AttentionCache, got {type(cache).__name__}")
        if cache.batch_size is not None and cache.batch_size != query.shape[0]:
            raise ValueError(
                f"cache holds {cache.batch_size} rows but query has batch size {query.shape[0]}: reorder the "
                "cache (cache.reorder(index)) when rows are dropped or re-ranked, or start a new one"
            )


def _autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (mixed dtypes are then expected)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no argument (and answers for CUDA)
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()
