"""Matmul FLOPs of one training step of :class:`companion.Transformer`, counted from the real (non-pad) tokens.

Convention (as in the PaLM / nanoGPT MFU estimates): a matmul of an ``[m, k]`` by a ``[k, n]`` matrix costs
``2 m k n`` FLOPs forward and twice that backward, so a weight matrix touched by a token costs 6 FLOPs per
parameter per token for forward + backward. Embedding look-ups, norms, softmax and element-wise work are not
counted. Per layer, with ``d = d_model`` and ``f = d_ff``:

* encoder layer, per source token: Q, K, V, O projections ``4 d^2`` + feed-forward ``2 d f`` parameters;
  attention scores and weighted sum: ``2 * 2 * n * d`` forward per token over ``n`` real source keys;
* decoder layer, per target token: self-attention Q, K, V, O ``4 d^2``, cross-attention Q and O ``2 d^2``,
  feed-forward ``2 d f``; per *source* token: the cross-attention K and V projections ``2 d^2``;
  self-attention over ``i + 1`` keys for target position ``i`` (causal), cross-attention over ``n`` keys;
* output projection: ``d * V`` parameters per target token.
"""

from __future__ import annotations

import torch

from companion import TransformerConfig


def training_flops(config: TransformerConfig, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor) -> float:
    """FLOPs (forward + backward) of one step on sentences with the given real lengths ``[batch]``."""
    weights, attention = training_flops_parts(config, src_lengths, tgt_lengths)
    return weights + attention


def training_flops_parts(
    config: TransformerConfig, src_lengths: torch.Tensor, tgt_lengths: torch.Tensor
) -> tuple[float, float]:
    """``(weight matmul FLOPs, attention FLOPs)`` of one forward + backward step."""
    d, f, v = config.d_model, config.d_ff, config.tgt_vocab_size
    n = src_lengths.double()
    t = tgt_lengths.double()
    src_tokens, tgt_tokens = float(n.sum()), float(t.sum())
    enc = config.num_encoder_layers
    dec = config.num_decoder_layers
    weight_flops = 6.0 * (
        src_tokens * enc * (4 * d * d + 2 * d * f)
        + tgt_tokens * dec * (6 * d * d + 2 * d * f)
        + src_tokens * dec * (2 * d * d)
        + tgt_tokens * d * v
    )
    # Attention: scores (2 * keys * d) and weighted sum (2 * keys * d) per query, forward; x3 with backward.
    keys = enc * float((n * n).sum()) + dec * float((t * (t + 1) / 2).sum() + (t * n).sum())
    attention_flops = 3.0 * 4.0 * d * keys
    return weight_flops, attention_flops
