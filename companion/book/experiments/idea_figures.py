"""Pictures of the ideas, drawn from real tensors, for chapters 2 to 5.

Each function computes what it shows with the library (``companion.attention``, ``companion.positional``) and
returns the matplotlib Figure together with the tensors it drew, so a chapter can check the picture's numbers:

- :func:`draw_query_meets_keys` (chapter 2): one query against every key, the scores, the softmax row and the
  weighted sum of the values.
- :func:`draw_head_split` (chapter 4): ``[n, d_model]`` split into ``h`` heads of ``d_k`` columns, each head's
  attention, and the concatenation back to ``[n, d_model]``.
- :func:`draw_masks` (chapter 3): the padding mask, the causal mask, their combination and the cross-attention
  padding mask, as boolean matrices (query rows, key columns).
- :func:`draw_sinusoid_strip` (chapter 5): the sinusoidal table as a heat-strip, position by dimension.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..._validation import check_integer, check_positive_int
from ...attention import causal_mask, padding_mask
from ...positional import sinusoidal_encoding
from .assembled_figures import box_colour

__all__ = ["draw_query_meets_keys", "draw_head_split", "draw_masks", "draw_sinusoid_strip"]

_CMAP = "viridis"


def _annotate(ax, matrix, fmt: str = "{:.2f}", fontsize: float = 8) -> None:
    """Write each cell's value on a heat map of ``matrix [rows, cols]`` (white on dark cells)."""
    low, high = float(matrix.min()), float(matrix.max())
    middle = (low + high) / 2
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            value = float(matrix[i, j])
            colour = "white" if value < middle else "black"
            ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=fontsize, color=colour)


def draw_query_meets_keys(num_keys: int = 5, d_k: int = 4, d_v: int = 3, query_index: int = 2, seed: int = 0):
    """One token's query meeting every key: scores, softmax row, weighted sum of the values.

    Draws four panels from seeded random ``q [d_k]``, ``K [num_keys, d_k]`` and ``V [num_keys, d_v]``:
    the query and the keys, the scores ``K q / sqrt(d_k)`` (one per key), the softmax of that row, and the
    values weighted by it with their sum, the output ``[d_v]``.

    Args:
        num_keys: number of key-value pairs (tokens), at least 2.
        d_k, d_v: widths of queries/keys and of values.
        query_index: which token the query belongs to (only its label).
        seed: seed of the random vectors.

    Returns:
        ``(fig, parts)`` where ``parts`` holds the tensors drawn: ``"q" [d_k]``, ``"K" [num_keys, d_k]``,
        ``"V" [num_keys, d_v]``, ``"scores" [num_keys]``, ``"weights" [num_keys]`` and ``"output" [d_v]``.
    """
    import matplotlib.pyplot as plt

    check_integer("num_keys", num_keys, minimum=2)
    check_positive_int("d_k", d_k)
    check_positive_int("d_v", d_v)
    check_integer("query_index", query_index, minimum=0, maximum=num_keys - 1)
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(num_keys, d_k, generator=generator)
    values = torch.randn(num_keys, d_v, generator=generator)
    query = torch.randn(d_k, generator=generator)
    scores = keys @ query / math.sqrt(d_k)  # [num_keys]
    weights = torch.softmax(scores, dim=0)  # [num_keys]
    output = weights @ values  # [d_v]
    parts = {"q": query, "K": keys, "V": values, "scores": scores, "weights": weights, "output": output}

    fig, axes = plt.subplots(
        1, 4, figsize=(13, 3.6), gridspec_kw={"width_ratios": [d_k + 1, 1.6, 1.6, d_v + 1]}, layout="constrained"
    )
    tokens = [f"token {j}" for j in range(num_keys)]
    ax = axes[0]
    stacked = torch.cat([query[None], keys])  # [1 + num_keys, d_k]
    ax.imshow(stacked.numpy(), cmap="coolwarm", vmin=-2.5, vmax=2.5)
    _annotate(ax, stacked, fontsize=7)
    ax.axhline(0.5, color="black", linewidth=2)
    ax.set_yticks(range(num_keys + 1), [f"query of token {query_index}"] + [f"key of {t}" for t in tokens])
    ax.set_xticks(range(d_k), [f"dim {i}" for i in range(d_k)], fontsize=7)
    ax.set_title("1. one query, every key")
    for ax, vector, title in (
        (axes[1], scores, "2. scores\n$q \\cdot k_j / \\sqrt{d_k}$"),
        (axes[2], weights, "3. softmax row\n(sums to 1)"),
    ):
        ax.imshow(vector[:, None].numpy(), cmap=_CMAP)
        _annotate(ax, vector[:, None])
        ax.set_yticks(range(num_keys), tokens)
        ax.set_xticks([])
        ax.set_title(title, fontsize=10)
    ax = axes[3]
    weighted = weights[:, None] * values  # [num_keys, d_v]
    table = torch.cat([weighted, output[None]])  # [num_keys + 1, d_v]
    ax.imshow(table.numpy(), cmap="coolwarm", vmin=-1.5, vmax=1.5)
    _annotate(ax, table, fontsize=7)
    ax.axhline(num_keys - 0.5, color="black", linewidth=2)
    ax.set_yticks(
        range(num_keys + 1),
        [f"{w:.2f} \u00d7 value of {t}" for w, t in zip(weights.tolist(), tokens)] + ["sum = output"],
    )
    ax.yaxis.tick_right()
    ax.set_xticks(range(d_v), [f"dim {i}" for i in range(d_v)], fontsize=7)
    ax.set_title("4. weighted values and their sum")
    fig.suptitle(f"What attention does for token {query_index}: compare, normalise, mix", fontsize=11)
    return fig, parts


def draw_head_split(seq_len: int = 4, d_model: int = 8, num_heads: int = 2, seed: int = 0):
    """The split into heads and the concatenation, as coloured matrices.

    ``X [seq_len, d_model]`` is projected (here a seeded random ``W_Q``), cut into ``num_heads`` blocks of
    ``d_k = d_model / num_heads`` columns, one per head; each head's self-attention output ``[seq_len, d_k]`` is
    computed with its own block of queries, keys and values; the outputs are concatenated back to
    ``[seq_len, d_model]`` and mixed by ``W_O``.

    Returns:
        ``(fig, parts)``: ``"heads"``, a list of ``num_heads`` tensors ``[seq_len, d_k]`` (the per-head outputs),
        ``"concat" [seq_len, d_model]`` and ``"output" [seq_len, d_model]`` (after ``W_O``).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    check_integer("seq_len", seq_len, minimum=1)
    check_positive_int("d_model", d_model)
    check_positive_int("num_heads", num_heads)
    if d_model % num_heads:
        raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model}, num_heads={num_heads}")
    d_k = d_model // num_heads
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(seq_len, d_model, generator=generator)
    w_q, w_k, w_v, w_o = (torch.randn(d_model, d_model, generator=generator) / math.sqrt(d_model) for _ in range(4))
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # [seq_len, d_model] each

    def split(t: torch.Tensor) -> torch.Tensor:  # [seq_len, d_model] -> [heads, seq_len, d_k]
        return t.view(seq_len, num_heads, d_k).transpose(0, 1)

    weights = torch.softmax(split(q) @ split(k).transpose(-2, -1) / math.sqrt(d_k), dim=-1)  # [h, n, n]
    heads = weights @ split(v)  # [heads, seq_len, d_k]
    concat = heads.transpose(0, 1).reshape(seq_len, d_model)
    output = concat @ w_o
    parts = {"heads": list(heads), "weights": weights, "concat": concat, "output": output}

    palette = plt.get_cmap("tab10")
    fig, axes = plt.subplots(
        1,
        4 + num_heads - 1,
        figsize=(3.0 * (3 + num_heads), 3.2),
        gridspec_kw={"width_ratios": [d_model] + [d_k + 1] * num_heads + [d_model, d_model]},
        layout="constrained",
    )
    first, head_axes, concat_ax, out_ax = axes[0], axes[1 : 1 + num_heads], axes[-2], axes[-1]

    def grid(ax, matrix, title, head_of_column=None):
        ax.imshow(matrix.numpy(), cmap="Greys", vmin=-3, vmax=3, alpha=0.35)
        for j in range(matrix.shape[1]):
            colour = palette(head_of_column(j)) if head_of_column else "#999999"
            ax.add_patch(
                Rectangle((j - 0.5, -0.5), 1, matrix.shape[0], facecolor=colour, alpha=0.35, edgecolor="white")
            )
        _annotate(ax, matrix, "{:.1f}", fontsize=6.5)
        ax.set_xticks(range(matrix.shape[1]), [str(j) for j in range(matrix.shape[1])], fontsize=7)
        ax.set_yticks(range(seq_len), [f"token {i}" for i in range(seq_len)], fontsize=7)
        ax.set_title(title, fontsize=9)

    grid(first, q, f"queries $XW^Q$ [{seq_len}, {d_model}]\ncolumns cut into {num_heads} heads", lambda j: j // d_k)
    for h, ax in enumerate(head_axes):
        grid(ax, heads[h], f"head {h + 1}: attention on\nits own {d_k} columns [{seq_len}, {d_k}]", lambda j, h=h: h)
    grid(concat_ax, concat, f"concatenated [{seq_len}, {d_model}]", lambda j: j // d_k)
    grid(out_ax, output, f"mixed by $W^O$ [{seq_len}, {d_model}]\n(every column sees every head)")
    fig.suptitle(
        f"Multi-head attention: split d_model = {d_model} into {num_heads} heads of d_k = {d_k}, attend, concatenate",
        fontsize=11,
    )
    return fig, parts


def draw_masks(src_lengths: Sequence[int] = (5, 3), tgt_lengths: Sequence[int] = (4, 2), sentence: int = 1):
    """The attention masks of one padded batch as boolean matrices (rows: queries, columns: keys).

    Builds a batch of source and target sentences with the given real lengths, padded to the longest, and draws
    for sentence ``sentence`` of it: the source padding mask as the encoder self-attention sees it
    ``[n, n]``, the causal mask ``[t, t]``, the decoder self-attention mask (causal and target padding)
    ``[t, t]``, and the cross-attention mask (source padding) ``[t, n]``. True (may attend) is dark.

    Returns:
        ``(fig, masks)`` with the four boolean tensors drawn, keyed ``"encoder padding"``, ``"causal"``,
        ``"decoder self"`` and ``"cross"``.
    """
    import matplotlib.pyplot as plt

    if not src_lengths or len(src_lengths) != len(tgt_lengths):
        raise ValueError(
            "src_lengths and tgt_lengths must be non-empty and equally long, "
            f"got {list(src_lengths)} and {list(tgt_lengths)}"
        )
    for name, lengths in (("src_lengths", src_lengths), ("tgt_lengths", tgt_lengths)):
        for length in lengths:
            check_positive_int(name, length)
    check_integer("sentence", sentence, minimum=0, maximum=len(src_lengths) - 1)
    pad = 0
    n, t = max(src_lengths), max(tgt_lengths)
    src = torch.tensor([[1] * length + [pad] * (n - length) for length in src_lengths])  # [batch, n]
    tgt = torch.tensor([[1] * length + [pad] * (t - length) for length in tgt_lengths])  # [batch, t]
    src_keys = padding_mask(src, pad)[sentence, 0]  # [1, n]
    tgt_keys = padding_mask(tgt, pad)[sentence, 0]  # [1, t]
    masks = {
        "encoder padding": src_keys.expand(n, n),
        "causal": causal_mask(t),
        "decoder self": causal_mask(t) & tgt_keys,
        "cross": src_keys.expand(t, n),
    }
    titles = {
        "encoder padding": f"padding mask\n(encoder self-attention) [{n}, {n}]",
        "causal": f"causal mask [{t}, {t}]",
        "decoder self": f"causal & target padding\n(decoder self-attention) [{t}, {t}]",
        "cross": f"source padding\n(cross-attention) [{t}, {n}]",
    }
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6), layout="constrained")
    for ax, (name, mask) in zip(axes, masks.items()):
        ax.imshow(mask.float().numpy(), cmap="Greens", vmin=-0.3, vmax=1.2)
        for i in range(mask.shape[0]):
            for j in range(mask.shape[1]):
                on = bool(mask[i, j])
                ax.text(
                    j,
                    i,
                    "\u2713" if on else "\u00d7",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white" if on else "black",
                )
        keys = src_lengths[sentence] if name in ("encoder padding", "cross") else tgt_lengths[sentence]
        queries = src_lengths[sentence] if name == "encoder padding" else tgt_lengths[sentence]
        if name == "causal":  # the causal mask alone knows nothing of padding
            keys, queries = t, t
        ax.set_xticks(range(mask.shape[1]), [str(j) if j < keys else "pad" for j in range(mask.shape[1])], fontsize=7)
        ax.set_yticks(
            range(mask.shape[0]), [str(i) if i < queries else "pad" for i in range(mask.shape[0])], fontsize=7
        )
        ax.set_xlabel("key position")
        ax.set_title(titles[name], fontsize=9)
    axes[0].set_ylabel("query position")
    fig.suptitle(
        f"Masks for sentence {sentence} of a batch (source lengths {list(src_lengths)}, target lengths "
        f"{list(tgt_lengths)}): \u2713 may attend, \u00d7 hidden",
        fontsize=11,
    )
    return fig, masks


def draw_sinusoid_strip(num_positions: int = 64, d_model: int = 64):
    """The sinusoidal positional encoding as a heat-strip: one row per position, one column per dimension.

    Returns:
        ``(fig, table)`` with ``table [num_positions, d_model]`` from :func:`companion.positional.sinusoidal_encoding`.
    """
    import matplotlib.pyplot as plt

    check_positive_int("num_positions", num_positions)
    check_integer("d_model", d_model, minimum=2)
    table = sinusoidal_encoding(num_positions, d_model)  # [num_positions, d_model]
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    image = ax.imshow(table.T.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xlabel("position in the sequence")
    ax.set_ylabel("dimension (even: sine, odd: cosine)")
    ax.set_title(
        f"Sinusoidal positional encoding, {num_positions} positions \u00d7 {d_model} dimensions: "
        "fast waves at the top, slow at the bottom",
        fontsize=10,
    )
    fig.colorbar(image, ax=ax, label="value", shrink=0.8)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_facecolor(box_colour("positional"))
    return fig, table
