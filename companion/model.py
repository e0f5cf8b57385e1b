"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017, section 3).

Read top to bottom: a config dataclass with the paper's presets, the position-wise feed-forward network,
one encoder layer, one decoder layer, the two stacks, and the model that ties embeddings, positions,
stacks and the output projection together. Everything is batch-first and device-agnostic.

Post-LN (the paper): ``x = LayerNorm(x + Dropout(Sublayer(x)))``.
Pre-LN (``norm_first=True``): ``x = x + Dropout(Sublayer(LayerNorm(x)))`` plus a final LayerNorm per stack.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, overload

import torch
from torch import nn

from ._dropout import Dropout
from ._linear import Linear
from ._validation import (
    check_choice,
    check_fraction,
    check_integer,
    check_last_dim,
    check_number,
    check_positive_int,
    check_tensor,
    check_token_ids,
)
from .attention import AttentionCache, MultiHeadAttention, padding_mask
from .positional import LearnedPositionalEncoding, PositionalEncoding
from .presets import PRESETS

__all__ = [
    "TransformerConfig",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "KVCache",
    "Transformer",
    "eval_mode",
]


@dataclass
class TransformerConfig:
    """Hyper-parameters of :class:`Transformer`. Defaults are the paper's base model (Table 3).

    Attributes:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        d_model: model width; num_heads: attention heads h (d_k = d_v = d_model / h).
        num_encoder_layers, num_decoder_layers: N in the paper.
        d_ff: inner width of the feed-forward networks.
        dropout: P_drop on each sub-layer output and on embeddings + positions.
        attention_dropout: dropout on attention weights (0 in the paper's description).
        ffn_dropout: dropout after the ReLU inside the feed-forward network (0 in the paper's description).
        max_len: longest sequence the positional table covers.
        pad_id: padding token id (source and target).
        share_embeddings: one embedding matrix for source and target (needs equal vocab sizes).
        tie_output: the output projection reuses the target embedding matrix (section 3.4).
        norm_first: pre-LN instead of the paper's post-LN.
        positional: "sinusoidal" (the paper) or "learned" (Table 3, row E).
        layer_norm_eps: epsilon of every LayerNorm.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    ffn_dropout: float = 0.0
    max_len: int = 512
    pad_id: int = 0
    share_embeddings: bool = False
    tie_output: bool = False
    norm_first: bool = False
    positional: str = "sinusoidal"
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff", "max_len"):
            check_positive_int(name, getattr(self, name))
        for name in ("num_encoder_layers", "num_decoder_layers"):
            check_integer(name, getattr(self, name), minimum=0)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model} and num_heads={self.num_heads}"
            )
        for name in ("dropout", "attention_dropout", "ffn_dropout"):
            check_fraction(name, getattr(self, name))
        check_choice("positional", self.positional, ("sinusoidal", "learned"))
        check_number("layer_norm_eps", self.layer_norm_eps, low=0, low_inclusive=False)  # nan or <= 0: NaN logits
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoidal positions, got {self.d_model}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings=True needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        smallest = min(self.src_vocab_size, self.tgt_vocab_size)
        check_integer("pad_id (a token id of both vocabularies)", self.pad_id, minimum=0, maximum=smallest - 1)

    @property
    def d_head(self) -> int:
        """Width of one attention head, d_k = d_v = d_model / num_heads."""
        return self.d_model // self.num_heads

    @classmethod
    def from_preset(cls, name: str, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> TransformerConfig:
        """The model shape ``companion.presets.PRESETS[name].model`` (``"tiny"``, ``"small"``, ``"base"``, ``"big"``).

        With equal vocabulary sizes the embeddings are shared; the output projection is always tied to the
        target embedding (section 3.4). ``overrides`` replace any field.
        """
        if name not in PRESETS:
            raise ValueError(f"name must be one of {list(PRESETS)}, got {name!r}")
        settings = dict(PRESETS[name].model, share_embeddings=src_vocab_size == tgt_vocab_size, tie_output=True)
        settings.update(overrides)
        return cls(src_vocab_size, tgt_vocab_size, **settings)

    @classmethod
    def base(cls, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> TransformerConfig:
        """The paper's base model: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (65M parameters).

        With equal vocabulary sizes the embeddings are shared and tied to the output, as in the paper.
        """
        return cls.from_preset("base", src_vocab_size, tgt_vocab_size, **overrides)

    @classmethod
    def big(cls, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any) -> TransformerConfig:
        """The paper's big model: N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M parameters)."""
        return cls.from_preset("big", src_vocab_size, tgt_vocab_size, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-serialisable), e.g. for checkpoints."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise a ValueError naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {unknown}")
        return cls(**values)


class FeedForward(nn.Module):
    """Position-wise FFN(x) = max(0, x W1 + b1) W2 + b2, ``[batch, seq, d_model] -> same`` (eq. 2)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in dropout, residual and LayerNorm."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = MultiHeadAttention(config.d_model, config.num_heads, config.attention_dropout)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.ffn_dropout)
        self.norm1 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.norm2 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def _attend(self, x: torch.Tensor, mask: torch.Tensor | None, need_weights: bool):
        if need_weights:
            return self.self_attn(x, x, x, mask=mask, need_weights=True)
        return self.self_attn(x, x, x, mask=mask), None

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x [batch, n, d_model]``, key-padding ``mask [batch, 1, 1, n]`` -> ``(x, weights or None)``.

        ``weights`` is ``[batch, heads, n, n]`` when ``need_weights``.
        """
        if self.norm_first:
            attn, weights = self._attend(self.norm1(x), mask, need_weights)
            x = x + self.dropout(attn)
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            attn, weights = self._attend(x, mask, need_weights)
            x = self.norm1(x + self.dropout(attn))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return x, weights


class KVCache:
    """The decoder's :class:`~companion.attention.AttentionCache` objects, one pair per layer, for incremental
    (token-by-token) decoding with :meth:`Transformer.decode`.

    ``self_attn[i]`` grows by one position per step (layer i's self-attention keys and values
    ``[batch, heads, t, d_head]``); ``cross_attn[i]`` holds the projected encoder memory, computed at the first
    step and reused. ``length`` counts the target positions already decoded (it also gives the position of the
    next token).
    """

    def __init__(self, num_layers: int) -> None:
        self.self_attn = [AttentionCache() for _ in range(num_layers)]
        self.cross_attn = [AttentionCache(static=True) for _ in range(num_layers)]
        self.length = 0

    @property
    def self_kv(self) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """Per layer ``(keys, values)`` of the self-attention cache, or None before the first step."""
        return [_pair(c) for c in self.self_attn]

    @property
    def cross_kv(self) -> list[tuple[torch.Tensor, torch.Tensor] | None]:
        """Per layer ``(keys, values)`` of the projected encoder memory, or None before the first step."""
        return [_pair(c) for c in self.cross_attn]

    def reorder(self, index: torch.Tensor, include_cross: bool = True) -> None:
        """Select batch rows ``index`` (beam search re-ranking or dropping finished sentences)."""
        for cache in self.self_attn + (self.cross_attn if include_cross else []):
            cache.reorder(index)


def _pair(cache: AttentionCache) -> tuple[torch.Tensor, torch.Tensor] | None:
    return None if cache.key is None or cache.value is None else (cache.key, cache.value)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward; each with dropout, residual, norm."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn = MultiHeadAttention(config.d_model, config.num_heads, config.attention_dropout)
        self.cross_attn = MultiHeadAttention(config.d_model, config.num_heads, config.attention_dropout)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.ffn_dropout)
        self.norm1 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.norm2 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.norm3 = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def _self_attend(self, y, cache: KVCache | None, layer: int, need_weights: bool):
        layer_cache = None if cache is None else cache.self_attn[layer]
        if need_weights:
            return self.self_attn(y, y, y, need_weights=True, is_causal=True, cache=layer_cache, check_inputs=False)
        return self.self_attn(y, y, y, is_causal=True, cache=layer_cache, check_inputs=False), None

    def _cross_attend(self, y, memory, memory_mask, cache: KVCache | None, layer: int, need_weights: bool):
        layer_cache = None if cache is None else cache.cross_attn[layer]
        if need_weights:
            return self.cross_attn(
                y, memory, memory, mask=memory_mask, need_weights=True, cache=layer_cache, check_inputs=False
            )
        return self.cross_attn(y, memory, memory, mask=memory_mask, cache=layer_cache, check_inputs=False), None

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """``y [batch, t, d_model]`` (target side), ``memory [batch, n, d_model]`` (encoder output),
        ``memory_mask [batch, 1, 1, n]``. With ``cache``, ``y`` holds only the new positions.

        Returns ``(y, (self_weights [batch, heads, t, t_total], cross_weights [batch, heads, t, n]) or None)``.
        """
        if self.norm_first:
            attn, w_self = self._self_attend(self.norm1(y), cache, layer, need_weights)
            y = y + self.dropout(attn)
            attn, w_cross = self._cross_attend(self.norm2(y), memory, memory_mask, cache, layer, need_weights)
            y = y + self.dropout(attn)
            y = y + self.dropout(self.ffn(self.norm3(y)))
        else:
            attn, w_self = self._self_attend(y, cache, layer, need_weights)
            y = self.norm1(y + self.dropout(attn))
            attn, w_cross = self._cross_attend(y, memory, memory_mask, cache, layer, need_weights)
            y = self.norm2(y + self.dropout(attn))
            y = self.norm3(y + self.dropout(self.ffn(y)))
        return y, ((w_self, w_cross) if need_weights else None)


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer` (plus a final LayerNorm for pre-LN)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_encoder_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        """``x [batch, n, d_model]`` -> ``(x, [weights [batch, heads, n, n] per layer] or None)``."""
        maps = []
        for layer in self.layers:
            x, weights = layer(x, mask, need_weights)
            maps.append(weights)
        if self.norm is not None:
            x = self.norm(x)
        return x, (maps if need_weights else None)


class Decoder(nn.Module):
    """A stack of :class:`DecoderLayer` (plus a final LayerNorm for pre-LN)."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_decoder_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None

    def forward(self, y, memory, memory_mask=None, cache: KVCache | None = None, need_weights: bool = False):
        """``y [batch, t, d_model]`` -> ``(y, [(self, cross) weights per layer] or None)``."""
        maps = []
        for i, layer in enumerate(self.layers):
            y, weights = layer(y, memory, memory_mask, cache, i, need_weights)
            maps.append(weights)
        if self.norm is not None:
            y = self.norm(y)
        return y, (maps if need_weights else None)


class Transformer(nn.Module):
    """Encoder-decoder Transformer for sequence-to-sequence tasks.

    ``forward(src, tgt)`` is teacher forcing: ``tgt`` is the decoder input (the target shifted right,
    starting with a begin-of-sentence token) and the result holds next-token logits for every position.
    Masks are built inside from ``config.pad_id`` (source key padding) and causality (target). Targets
    must be right-padded: padding after a real token never influences it, by causality.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        self.config = config
        d = config.d_model
        self.src_embed = nn.Embedding(config.src_vocab_size, d)
        self.tgt_embed = self.src_embed if config.share_embeddings else nn.Embedding(config.tgt_vocab_size, d)
        position = PositionalEncoding if config.positional == "sinusoidal" else LearnedPositionalEncoding
        self.src_pos = position(d, config.max_len, config.dropout)
        self.tgt_pos = position(d, config.max_len, config.dropout)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = Linear(d, config.tgt_vocab_size, bias=not config.tie_output)
        self._reset_parameters()
        if config.tie_output:
            self.generator.weight = self.tgt_embed.weight

    def _reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if "embed" in name:
                nn.init.normal_(p, mean=0.0, std=self.config.d_model**-0.5)
            elif p.dim() > 1 and not name.endswith("pos.weight"):
                nn.init.xavier_uniform_(p)

    # -- the three entry points --------------------------------------------------------------------------
    @overload
    def encode(self, src: torch.Tensor, need_weights: Literal[False] = False) -> tuple[torch.Tensor, torch.Tensor]: ...

    @overload
    def encode(
        self, src: torch.Tensor, need_weights: Literal[True]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]: ...

    def encode(self, src: torch.Tensor, need_weights: bool = False):
        """Source token ids ``[batch, n]`` -> ``(memory [batch, n, d_model], src_mask [batch, 1, 1, n])``.

        With ``need_weights`` a third element lists each encoder layer's weights ``[batch, heads, n, n]``.
        """
        check_token_ids("src", src, self.config.src_vocab_size)
        return self.encode_unchecked(src, need_weights)

    @overload
    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: Literal[False] = False,
    ) -> torch.Tensor: ...

    @overload
    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        *,
        need_weights: Literal[True],
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]: ...

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ):
        """Target ids ``[batch, t]`` and encoder output -> next-token logits ``[batch, t, tgt_vocab]``.

        With a ``cache`` (from :meth:`new_cache`), ``tgt`` holds only the positions not yet decoded; their
        positions continue from ``cache.length``. With ``need_weights`` also returns the per-layer
        ``(self, cross)`` attention weights.
        """
        check_token_ids("tgt", tgt, self.config.tgt_vocab_size)
        check_tensor("memory", memory, dims=3)
        check_last_dim("memory", memory, self.config.d_model)
        if memory.shape[0] != tgt.shape[0]:
            raise ValueError(f"memory and tgt must have the same batch size, got {memory.shape[0]} and {tgt.shape[0]}")
        if src_mask is not None:
            check_tensor("src_mask", src_mask)
            expected = (memory.shape[0], 1, 1, memory.shape[1])
            if tuple(src_mask.shape) != expected or src_mask.dtype != torch.bool:
                raise ValueError(
                    f"src_mask must be the boolean key-padding mask [batch, 1, 1, n] = {list(expected)} that "
                    f"encode() returns, got {src_mask.dtype} of shape {list(src_mask.shape)}"
                )
        return self.decode_unchecked(tgt, memory, src_mask, cache, need_weights)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[batch, tgt_len, tgt_vocab]`` for ``src [batch, n]``, ``tgt [batch, t]``."""
        check_token_ids("src", src, self.config.src_vocab_size)
        check_token_ids("tgt", tgt, self.config.tgt_vocab_size)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must have the same batch size, got {src.shape[0]} and {tgt.shape[0]}")
        memory, src_mask = self.encode_unchecked(src)
        return self.decode_unchecked(tgt, memory, src_mask)

    # -- the same without the argument checks ---------------------------------------------------------
    def encode_unchecked(self, src: torch.Tensor, need_weights: bool = False):
        """:meth:`encode` without checking ``src``: for callers that checked it once already, and for graph
        capture (the id range check reads the ids back to the host, which ``torch.export`` cannot follow)."""
        src_mask = padding_mask(src, self.config.pad_id)
        x = self.src_pos(self.src_embed(src) * math.sqrt(self.config.d_model))
        memory, maps = self.encoder(x, src_mask, need_weights)
        return (memory, src_mask, maps) if need_weights else (memory, src_mask)

    def decode_unchecked(
        self,
        tgt,
        memory,
        src_mask=None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        *,
        last_only: bool = False,
    ):
        """:meth:`decode` without checking its arguments, for the callers of :meth:`encode_unchecked` (a search
        checks its inputs once, not at every step). ``last_only`` projects only the last position onto the
        vocabulary (logits ``[batch, 1, tgt_vocab]``): all a search needs from a whole prefix."""
        start = 0 if cache is None else cache.length
        y = self.tgt_pos(self.tgt_embed(tgt) * math.sqrt(self.config.d_model), start)
        y, maps = self.decoder(y, memory, src_mask, cache, need_weights)
        if cache is not None:
            cache.length += tgt.shape[1]
        logits = self.generator(y[:, -1:] if last_only else y)
        return (logits, maps) if need_weights else logits

    # -- conveniences --------------------------------------------------------------------------------
    def new_cache(self) -> KVCache:
        """An empty :class:`KVCache` for incremental decoding with :meth:`decode`."""
        return KVCache(len(self.decoder.layers))

    @torch.no_grad()
    def attention_maps(self, src: torch.Tensor, tgt: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """All attention weights for one teacher-forced pass, for plots.

        Returns a dict with ``"encoder"`` (per layer ``[batch, heads, n, n]``), ``"decoder_self"``
        (``[batch, heads, t, t]``) and ``"cross"`` (``[batch, heads, t, n]``).
        """
        memory, src_mask, enc = self.encode(src, need_weights=True)
        _, dec = self.decode(tgt, memory, src_mask, need_weights=True)
        return {"encoder": enc, "decoder_self": [s for s, _ in dec], "cross": [c for _, c in dec]}

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Number of distinct parameters (tied matrices counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Run the body with dropout off (``model.eval()``), then restore the model's previous train/eval mode."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
