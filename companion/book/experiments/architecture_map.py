"""The whole Transformer as one schematic map, with one chapter's part highlighted ("you are here").

Chapters 2 to 9 each open with this figure. It draws the paper's Figure 1 as a fixed schematic (one encoder layer
and one decoder layer stand for the N of each stack): token inputs, embeddings and positional encodings, the
encoder's self-attention and feed-forward sub-layers, the decoder's masked self-attention, cross-attention and
feed-forward sub-layers, every add & norm, the output projection and softmax, the loss used in training, the
masks the attention sub-layers take, and the decoding loop that feeds each chosen token back into the decoder.

:func:`draw_architecture_map` draws it with the boxes of one chapter in full colour, a red edge and a star, and
every other box faded. The colours are the ones of the chapter "The Transformer assembled"
(:func:`companion.book.experiments.assembled_figures.box_colour`), so a sub-layer has the same colour in every
figure of the book. :data:`HIGHLIGHTS` lists the choices and the components each one lights up; every patch the
map draws carries its component's name as its ``gid``, which is how the tests find them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._validation import check_choice
from .assembled_figures import box_colour

__all__ = ["Component", "COMPONENTS", "HIGHLIGHTS", "highlighted_components", "faded", "draw_architecture_map"]


@dataclass(frozen=True)
class Component:
    """One box of the map.

    Attributes:
        name: identifier, also the ``gid`` of the box's patch (e.g. ``"enc_self_attn"``).
        label: the text in the box.
        x, y: centre of the box, in the map's data coordinates.
        width: box width (height is the same for every box).
        colour: the book's colour for this kind of sub-layer (full strength; faded when not highlighted).
    """

    name: str
    label: str
    x: float
    y: float
    width: float
    colour: str


_ENC_X, _DEC_X = 0.0, 6.6
_WIDTH, _DEC_WIDTH, _HEIGHT, _STEP = 3.4, 3.8, 0.5, 0.72
_TAG_X, _TAG_WIDTH = _DEC_X + 3.55, 2.5


def _row(r: float) -> float:
    return r * _STEP


def _component(name: str, label: str, x: float, row: float, kind: str | None = None, width: float = _WIDTH):
    return Component(name, label, x, _row(row), width, box_colour(kind if kind is not None else label))


COMPONENTS: tuple[Component, ...] = (
    # encoder column
    _component("src_tokens", "source tokens", _ENC_X, 0, kind="tokens"),
    _component("src_embed", "input embedding", _ENC_X, 1),
    _component("src_pos", "+ positional encoding", _ENC_X, 2),
    _component("enc_self_attn", "multi-head self-attention", _ENC_X, 3),
    _component("enc_norm1", "add & norm", _ENC_X, 4),
    _component("enc_ffn", "feed-forward", _ENC_X, 5),
    _component("enc_norm2", "add & norm", _ENC_X, 6),
    # decoder column
    _component("tgt_tokens", "target shifted right / outputs so far", _DEC_X, 0, kind="tokens", width=_DEC_WIDTH),
    _component("tgt_embed", "output embedding", _DEC_X, 1, width=_DEC_WIDTH),
    _component("tgt_pos", "+ positional encoding", _DEC_X, 2, width=_DEC_WIDTH),
    _component("dec_self_attn", "masked multi-head self-attention", _DEC_X, 3, kind="attention", width=_DEC_WIDTH),
    _component("dec_norm1", "add & norm", _DEC_X, 4, width=_DEC_WIDTH),
    _component("dec_cross_attn", "multi-head cross-attention", _DEC_X, 5, width=_DEC_WIDTH),
    _component("dec_norm2", "add & norm", _DEC_X, 6, width=_DEC_WIDTH),
    _component("dec_ffn", "feed-forward", _DEC_X, 7, width=_DEC_WIDTH),
    _component("dec_norm3", "add & norm", _DEC_X, 8, width=_DEC_WIDTH),
    _component("out_linear", "linear (output projection)", _DEC_X, 9, width=_DEC_WIDTH),
    _component("out_softmax", "softmax", _DEC_X, 10, width=_DEC_WIDTH),
    _component("next_token", "next-token probabilities", _DEC_X, 11, kind="tokens", width=_DEC_WIDTH),
    # what the attention sub-layers are given, and what training compares the output with
    _component("mask_enc", "padding mask", 3.05, 3, kind="mask", width=1.7),
    _component("mask_dec_self", "causal + padding mask", _TAG_X, 3, kind="mask", width=_TAG_WIDTH),
    _component("mask_cross", "source padding mask", _TAG_X, 5, kind="mask", width=_TAG_WIDTH),
    _component("loss", "loss vs. reference\n(label smoothing)", _TAG_X, 10, kind="softmax", width=_TAG_WIDTH),
)
"""Every box of the map, in drawing order."""

_BY_NAME = {c.name: c for c in COMPONENTS}
_LOOP = "decoding_loop"  # the arrow that feeds each chosen token back (not a box, but it can be highlighted)
_MODEL_BOXES = (
    "src_embed src_pos enc_self_attn enc_norm1 enc_ffn enc_norm2 tgt_embed tgt_pos dec_self_attn dec_norm1 "
    "dec_cross_attn dec_norm2 dec_ffn dec_norm3 out_linear out_softmax"
).split()

HIGHLIGHTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "attention": ("chapter 2: the attention sub-layers", ("enc_self_attn", "dec_self_attn", "dec_cross_attn")),
    "masking": (
        "chapter 3: masked self-attention and the padding masks",
        ("dec_self_attn", "mask_enc", "mask_dec_self", "mask_cross"),
    ),
    "multi-head": (
        "chapter 4: every attention sub-layer is multi-head",
        ("enc_self_attn", "dec_self_attn", "dec_cross_attn"),
    ),
    "positional": ("chapter 5: the positional encodings", ("src_pos", "tgt_pos")),
    "whole": ("chapter 6: the whole model, assembled", tuple(_MODEL_BOXES)),
    "training": (
        "chapter 7: teacher-forced input, softmax output, label-smoothed loss",
        ("tgt_tokens", "out_softmax", "next_token", "loss"),
    ),
    "decoding": (
        "chapter 8: the decoder, run one token at a time in a loop",
        (
            "tgt_tokens",
            "tgt_embed",
            "tgt_pos",
            "dec_self_attn",
            "dec_norm1",
            "dec_cross_attn",
            "dec_norm2",
            "dec_ffn",
            "dec_norm3",
            "out_linear",
            "out_softmax",
            "next_token",
            _LOOP,
        ),
    ),
    "performance": (
        "chapter 9: attention and feed-forward, where the time goes",
        ("enc_self_attn", "enc_ffn", "dec_self_attn", "dec_cross_attn", "dec_ffn"),
    ),
}
"""``{highlight: (the "you are here" caption, the components it lights up)}``."""


def highlighted_components(highlight: str) -> tuple[str, ...]:
    """The names of the components (``gid`` of their patches) that ``highlight`` lights up."""
    check_choice("highlight", highlight, list(HIGHLIGHTS))
    return HIGHLIGHTS[highlight][1]


def faded(colour: str, strength: float = 0.3) -> tuple[float, float, float, float]:
    """``colour`` mixed with white: ``strength`` of the colour, the rest white (RGBA, opaque)."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(colour)
    return (1 - strength * (1 - r), 1 - strength * (1 - g), 1 - strength * (1 - b), 1.0)


_ON_EDGE, _OFF_EDGE = "tab:red", "#a0a0a0"


def draw_architecture_map(highlight: str, ax=None):
    """Draw the whole Transformer with the part named by ``highlight`` in full colour ("you are here").

    Args:
        highlight: one of :data:`HIGHLIGHTS` (``"attention"``, ``"masking"``, ``"multi-head"``, ``"positional"``,
            ``"whole"``, ``"training"``, ``"decoding"``, ``"performance"``).
        ax: a matplotlib Axes to draw into; a new figure when None.

    Returns:
        the matplotlib Figure. Highlighted boxes are drawn in their full colour with a red edge and a star, the
        others faded (:func:`faded`) with a grey edge; each patch's ``gid`` is its component's name.

    Raises:
        ValueError: ``highlight`` is not one of the choices (the message lists them).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    from matplotlib.path import Path

    lit = set(highlighted_components(highlight))
    caption = HIGHLIGHTS[highlight][0]
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 6.8))
    else:
        fig = ax.figure

    def edge(name: str) -> dict:
        on = name in lit
        return {"edgecolor": _ON_EDGE if on else _OFF_EDGE, "linewidth": 2.0 if on else 0.8}

    def arrow(start, end, name: str | None = None, rad: float = 0.0, style: str = "-|>", **kwargs):
        on = name in lit
        ax.add_patch(
            FancyArrowPatch(
                start,
                end,
                arrowstyle=style,
                mutation_scale=9,
                connectionstyle=f"arc3,rad={rad}",
                color=_ON_EDGE if on else kwargs.pop("color", "#555555"),
                linewidth=2.0 if on else kwargs.pop("linewidth", 0.9),
                zorder=1,
                gid=name,
                **kwargs,
            )
        )

    half = _HEIGHT / 2
    for c in COMPONENTS:
        on = c.name in lit
        ax.add_patch(
            FancyBboxPatch(
                (c.x - c.width / 2, c.y - half),
                c.width,
                _HEIGHT,
                boxstyle="round,pad=0.02",
                facecolor=c.colour if on else faded(c.colour),
                zorder=2,
                gid=c.name,
                **edge(c.name),
            )
        )
        ax.text(
            c.x,
            c.y,
            c.label,
            ha="center",
            va="center",
            fontsize=7.5,
            color="black" if on else "#777777",
            fontweight="bold" if on else "normal",
            zorder=3,
        )
        if on:
            ax.text(c.x - c.width / 2 - 0.04, c.y, "\u2605", ha="right", va="center", color=_ON_EDGE, fontsize=10)

    # the two columns, bottom to top
    for names in (
        ["src_tokens", "src_embed", "src_pos", "enc_self_attn", "enc_norm1", "enc_ffn", "enc_norm2"],
        "tgt_tokens tgt_embed tgt_pos dec_self_attn dec_norm1 dec_cross_attn dec_norm2 dec_ffn dec_norm3 "
        "out_linear out_softmax next_token".split(),
    ):
        for lower, upper in zip(names, names[1:]):
            a, b = _BY_NAME[lower], _BY_NAME[upper]
            arrow((a.x, a.y + half), (b.x, b.y - half))
    # residual connections: each add & norm also receives its sub-layer's input
    for norm, below, side in (
        ("enc_norm1", "src_pos", -1),
        ("enc_norm2", "enc_norm1", -1),
        ("dec_norm1", "tgt_pos", 1),
        ("dec_norm2", "dec_norm1", 1),
        ("dec_norm3", "dec_norm2", 1),
    ):
        n, b = _BY_NAME[norm], _BY_NAME[below]
        x = n.x + side * n.width / 2
        arrow((x, b.y + half + 0.05), (x, n.y), rad=0.55 * -side, color="grey", linewidth=0.8)
    # layer frames: one layer drawn, N stacked
    for first, last, width, n_row in (
        ("enc_self_attn", "enc_norm2", _WIDTH, 4.5),
        ("dec_self_attn", "dec_norm3", _DEC_WIDTH, 7.5),
    ):
        low, high = _BY_NAME[first], _BY_NAME[last]
        y0, y1 = low.y - half - 0.12, high.y + half + 0.12
        left = low.x - width / 2 - 0.3
        ax.add_patch(
            FancyBboxPatch(
                (left, y0),
                width + 0.6,
                y1 - y0,
                boxstyle="round,pad=0.02",
                facecolor="none",
                edgecolor="#bbbbbb",
                linestyle="--",
                zorder=0,
                gid="frame",
            )
        )
        ax.text(left - 0.1, _row(n_row), "N \u00d7", ha="right", va="center", fontsize=9, color="dimgrey")
    # the encoder's output (memory) feeds every decoder layer's cross-attention: keys and values
    top, cross = _BY_NAME["enc_norm2"], _BY_NAME["dec_cross_attn"]
    ax.text(top.x, top.y + half + 0.12, "encoder output (memory)", ha="center", va="bottom", fontsize=7.5)
    arrow((top.x + top.width / 2, top.y), (cross.x - cross.width / 2, cross.y), rad=0.25, color="#555555")
    ax.text((top.x + cross.x) / 2, _row(6.2), "keys, values", ha="center", va="center", fontsize=7)
    # masks: a dotted line from each mask to the attention sub-layer that takes it
    for mask, attn in (
        ("mask_enc", "enc_self_attn"),
        ("mask_dec_self", "dec_self_attn"),
        ("mask_cross", "dec_cross_attn"),
    ):
        m, a = _BY_NAME[mask], _BY_NAME[attn]
        toward = 1 if m.x > a.x else -1
        arrow((m.x - toward * m.width / 2, m.y), (a.x + toward * a.width / 2, a.y), style="-", linestyle=":")
    # training compares the probabilities with the reference
    loss, probs = _BY_NAME["loss"], _BY_NAME["next_token"]
    arrow((probs.x + probs.width / 2, probs.y), (loss.x, loss.y + half), rad=-0.3, style="-|>", linestyle="--")
    # the decoding loop: the chosen token goes back to the decoder's input
    src, dst = _BY_NAME["next_token"], _BY_NAME["tgt_tokens"]
    right = _TAG_X + _TAG_WIDTH / 2 + 0.45
    loop = Path(
        [
            (src.x, src.y + half),
            (src.x, src.y + half + 0.3),
            (right, src.y + half + 0.3),
            (right, dst.y),
            (dst.x + dst.width / 2, dst.y),
        ],
        [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.LINETO],
    )
    on = _LOOP in lit
    ax.add_patch(
        FancyArrowPatch(
            path=loop,
            arrowstyle="-|>",
            mutation_scale=10,
            color=_ON_EDGE if on else "#555555",
            linewidth=2.0 if on else 0.9,
            zorder=1,
            gid=_LOOP,
        )
    )
    ax.text(
        right + 0.12,
        _row(6.5),
        "decoding loop:\nthe chosen token\nis appended\nand fed back",
        ha="left",
        va="center",
        fontsize=7.5,
        color=_ON_EDGE if on else "#555555",
        fontweight="bold" if on else "normal",
    )
    ax.text(
        (_ENC_X - _WIDTH / 2 + right) / 2,
        src.y + half + 0.75,
        f"\u2605 you are here \u2014 {caption}",
        ha="center",
        va="bottom",
        fontsize=10,
        color=_ON_EDGE,
        fontweight="bold",
        bbox={"boxstyle": "round,pad=0.35", "facecolor": "white", "edgecolor": _ON_EDGE},
    )
    ax.set_xlim(_ENC_X - _WIDTH / 2 - 1.0, right + 2.0)
    ax.set_ylim(-half - 0.2, src.y + half + 1.4)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig
