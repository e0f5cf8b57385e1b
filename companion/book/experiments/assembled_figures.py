"""Figure 1 of the paper drawn from a real model, for the chapter "The Transformer assembled".

:func:`record_shapes` runs one batch through a :class:`companion.model.Transformer` with forward hooks and records,
in call order, every sub-layer's output shape; :func:`draw_architecture` draws the paper's Figure 1 from those
records alone (:func:`shape_symbols` names the sizes), :func:`draw_residual_variants` the post-LN and pre-LN
residual blocks side by side, and :func:`box_colour` gives a sub-layer's colour in these figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ...model import Transformer, TransformerConfig

__all__ = [
    "ShapeRecord",
    "record_shapes",
    "shape_symbols",
    "box_colour",
    "draw_architecture",
    "draw_residual_variants",
]


# ---------------------------------------------------------------------------------------------------------
# Shapes recorded by forward hooks, and Figure 1 drawn from them
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeRecord:
    """One sub-layer call seen by a forward hook.

    Attributes:
        order: position in the call sequence (0 = first module run).
        label: what the box shows, e.g. ``"self-attention"`` or ``"add & norm"``.
        module: the module's dotted name inside the model, e.g. ``"encoder.layers.0.norm1"``.
        side: ``"encoder"`` or ``"decoder"`` (the output projection counts as decoder).
        layer: index of the encoder/decoder layer, or None outside the layers.
        shape: the output tensor's shape.
        inputs: shapes of the tensors the sub-layer read, by role (e.g. cross-attention's ``"Q from"`` and
            ``"K, V from"``); empty when there is only one input of the output's shape.
    """

    order: int
    label: str
    module: str
    side: str
    layer: int | None
    shape: tuple[int, ...]
    inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _sublayer_labels(norm_first: bool, decoder: bool) -> dict[str, str]:
    """Box labels for the modules of one layer. Post-LN norms follow an addition ("add & norm"); pre-LN norms
    come before their sub-layer, whose output is then added to the residual stream."""
    add = " + add" if norm_first else ""
    norm = "layer norm" if norm_first else "add & norm"
    labels = {
        "self_attn.out_proj": ("masked self-attention" if decoder else "self-attention") + add,
        "ffn": "feed-forward" + add,
        "norm1": norm,
        "norm2": norm,
    }
    if decoder:
        labels.update({"cross_attn.out_proj": "cross-attention" + add, "norm3": norm})
    return labels


def record_shapes(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> list[ShapeRecord]:
    """Run ``model(src, tgt)`` once with forward hooks and return every sub-layer call in call order.

    Args:
        model: a :class:`companion.model.Transformer` (post-LN or pre-LN, any depth).
        src: source ids ``[batch, n]``; tgt: decoder input ids ``[batch, t]``.

    Returns:
        list: a record for each of the two embeddings, their scaling by sqrt(d_model) plus positional
        encoding, every attention,
        feed-forward and LayerNorm module of every layer (attention output taken at its output projection
        W^O), the final LayerNorms of a pre-LN model, and the output projection (logits
        ``[batch, t, tgt_vocab]``). A last record ``"softmax"`` has the logits' shape: the model returns
        logits, and the softmax is applied by the loss or the decoder.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion.Transformer, got {type(model).__name__}")
    records: list[ShapeRecord] = []
    handles = []
    memory_shape: dict[int, tuple[int, ...]] = {}

    def add(label: str, module: str, side: str, layer: int | None, inputs: dict | None = None):
        def hook(_module, _args, output):
            out = output[0] if isinstance(output, tuple) else output
            extra = dict(inputs) if inputs else {}
            if label.startswith("cross-attention") and layer in memory_shape:
                extra = {"Q from decoder": memory_shape[layer][0], "K, V from encoder": memory_shape[layer][1]}
            records.append(ShapeRecord(len(records), label, module, side, layer, tuple(out.shape), extra))

        return hook

    encoder_done = [False]  # the target embedding runs after the encoder (this matters when it is shared)

    def embed_hook(name: str):
        def hook(_module, _args, output):
            side = "decoder" if encoder_done[0] else "encoder"
            records.append(ShapeRecord(len(records), "embedding", name, side, None, tuple(output.shape)))

        return hook

    def pos_hook(side: str, name: str):
        def hook(_module, _args, output):
            records.append(
                ShapeRecord(len(records), "x sqrt(d) + positional encoding", name, side, None, tuple(output.shape))
            )

        return hook

    def mark_encoder_done(_module, _args, _output):
        encoder_done[0] = True

    def memory_hook(layer: int):
        def hook(_module, args):
            memory_shape[layer] = (tuple(args[0].shape), tuple(args[1].shape))

        return hook

    try:
        shared = model.tgt_embed is model.src_embed
        handles.append(
            model.src_embed.register_forward_hook(embed_hook("src_embed (shared)" if shared else "src_embed"))
        )
        if not shared:
            handles.append(model.tgt_embed.register_forward_hook(embed_hook("tgt_embed")))
        handles.append(model.encoder.register_forward_hook(mark_encoder_done))
        handles.append(model.src_pos.register_forward_hook(pos_hook("encoder", "src_pos")))
        handles.append(model.tgt_pos.register_forward_hook(pos_hook("decoder", "tgt_pos")))
        for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
            for i, layer in enumerate(stack.layers):
                if side == "decoder":
                    handles.append(layer.register_forward_pre_hook(memory_hook(i)))
                for sub, label in _sublayer_labels(model.config.norm_first, side == "decoder").items():
                    module = layer.get_submodule(sub)
                    handles.append(module.register_forward_hook(add(label, f"{side}.layers.{i}.{sub}", side, i)))
            if stack.norm is not None:
                handles.append(stack.norm.register_forward_hook(add("final layer norm", f"{side}.norm", side, None)))
        handles.append(model.generator.register_forward_hook(add("linear (logits)", "generator", "decoder", None)))
        with torch.no_grad():
            logits = model(src, tgt)
    finally:
        for handle in handles:
            handle.remove()
    records.append(
        ShapeRecord(len(records), "softmax", "(in the loss / decoder)", "decoder", None, tuple(logits.shape))
    )
    return records


def shape_symbols(config: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> dict[int, str]:
    """Names for the sizes of one run, ``{size: symbol}``; sizes shared by two names get no symbol."""
    names = {"B": batch, "n": src_len, "t": tgt_len, "d": config.d_model, "V": config.tgt_vocab_size}
    counts: dict[int, int] = {}
    for value in names.values():
        counts[value] = counts.get(value, 0) + 1
    return {value: name for name, value in names.items() if counts[value] == 1}


def _shape_text(shape: tuple[int, ...], symbols: dict[int, str]) -> str:
    text = "[" + ", ".join(str(s) for s in shape) + "]"
    if symbols and all(s in symbols for s in shape):
        text += " = [" + ", ".join(symbols[s] for s in shape) + "]"
    return text


_BOX_COLOURS = {
    "positional": "#f6dede",
    "attention": "#f9d7a6",
    "feed-forward": "#bfe3f2",
    "norm": "#f4f1a3",
    "embedding": "#f6c6c6",
    "linear": "#d6c9ef",
    "softmax": "#c9efc9",
}


def box_colour(label: str) -> str:
    for key, colour in _BOX_COLOURS.items():
        if key in label:
            return colour
    return "#eeeeee"


def draw_architecture(
    records: Sequence[ShapeRecord], symbols: dict[int, str] | None = None, ax=None, title: str | None = None
):
    """Draw the encoder-decoder as boxes, one per record of :func:`record_shapes`, labelled with its shape.

    The encoder's records go up the left column and the decoder's up the right one, in the order the hooks saw
    them; each layer gets a frame; arrows join consecutive boxes, grey arcs are the residual connections (into
    every box whose label says "add"), and an arrow from the encoder's last box feeds every cross-attention box
    (its keys and values). Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    if not records:
        raise ValueError("records must hold at least one ShapeRecord, got an empty sequence")
    symbols = symbols or {}
    columns = {
        "encoder": [r for r in records if r.side == "encoder"],
        "decoder": [r for r in records if r.side == "decoder"],
    }
    rows = max(len(c) for c in columns.values())
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 0.62 * rows + 1.6))
    else:
        fig = ax.figure
    width, height, step = 3.6, 0.46, 0.62
    x_of = {"encoder": 0.0, "decoder": 5.2}
    centre: dict[int, tuple[float, float]] = {}
    for side, column in columns.items():
        x = x_of[side]
        frames: dict[int, list[float]] = {}
        for row, record in enumerate(column):
            y = row * step
            centre[record.order] = (x, y)
            if record.layer is not None:
                frames.setdefault(record.layer, []).append(y)
            ax.add_patch(
                FancyBboxPatch(
                    (x - width / 2, y - height / 2),
                    width,
                    height,
                    boxstyle="round,pad=0.02",
                    facecolor=box_colour(record.label),
                    edgecolor="black",
                    linewidth=0.8,
                    zorder=2,
                )
            )
            ax.text(
                x,
                y,
                f"{record.label}   {_shape_text(record.shape, symbols)}",
                ha="center",
                va="center",
                fontsize=7.5,
                zorder=3,
            )
            if row:
                ax.add_patch(
                    FancyArrowPatch(
                        (x, y - step + height / 2),
                        (x, y - height / 2),
                        arrowstyle="-|>",
                        mutation_scale=8,
                        color="black",
                        zorder=1,
                    )
                )
            if "add" in record.label and row >= 2:  # residual: the input of the sub-layer joins its output
                outer = x - width / 2 if side == "encoder" else x + width / 2
                ax.add_patch(
                    FancyArrowPatch(
                        (outer, y - 2 * step + 0.1),
                        (outer, y),
                        connectionstyle=f"arc3,rad={-0.6 if side == 'encoder' else 0.6}",
                        arrowstyle="-|>",
                        mutation_scale=7,
                        color="grey",
                        linewidth=0.8,
                        zorder=1,
                    )
                )
        for layer, ys in frames.items():
            ax.add_patch(
                FancyBboxPatch(
                    (x - width / 2 - 0.25, min(ys) - height / 2 - 0.08),
                    width + 0.5,
                    max(ys) - min(ys) + height + 0.16,
                    boxstyle="round,pad=0.02",
                    facecolor="none",
                    edgecolor="grey",
                    linestyle="--",
                    zorder=1,
                )
            )
            side_x = x - width / 2 - 0.75 if side == "encoder" else x + width / 2 + 0.75
            ax.text(
                side_x,
                (min(ys) + max(ys)) / 2,
                f"{side} layer {layer + 1}",
                rotation=90,
                ha="center",
                va="center",
                fontsize=8,
                color="dimgrey",
            )
    if columns["encoder"]:
        top = columns["encoder"][-1]
        ex, ey = centre[top.order]
        ax.text(ex, ey + step * 0.75, "encoder output (memory)", ha="center", fontsize=8, style="italic")
        for record in columns["decoder"]:
            if record.label.startswith("cross-attention"):
                dx, dy = centre[record.order]
                ax.add_patch(
                    FancyArrowPatch(
                        (ex + width / 2, ey + 0.05),
                        (dx - width / 2, dy),
                        connectionstyle="arc3,rad=-0.15",
                        arrowstyle="-|>",
                        mutation_scale=9,
                        color="tab:red",
                        zorder=1,
                    )
                )
    ax.text(x_of["encoder"], -step * 0.9, "source ids [B, n]", ha="center", fontsize=8)
    ax.text(x_of["decoder"], -step * 0.9, "decoder input ids [B, t] (target shifted right)", ha="center", fontsize=8)
    ax.set_xlim(-2.9, 8.1)
    ax.set_ylim(-step * 1.3, rows * step)
    ax.axis("off")
    legend = "  ".join(f"{name} = {value}" for value, name in sorted(symbols.items(), key=lambda kv: kv[1]))
    ax.set_title(title or f"The Transformer, drawn from forward hooks on one batch   ({legend})", fontsize=10)
    return fig


def draw_residual_variants(ax_post, ax_pre) -> None:
    """The two ways of wrapping a sub-layer F with a residual connection and LayerNorm, side by side.

    Post-LN (the paper): ``x_{l+1} = LN(x_l + F(x_l))``; pre-LN: ``x_{l+1} = x_l + F(LN(x_l))``.
    """
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    def box(ax, y, label, colour):
        ax.add_patch(
            FancyBboxPatch((-0.9, y - 0.22), 1.8, 0.44, boxstyle="round,pad=0.02", facecolor=colour, edgecolor="black")
        )
        ax.text(0, y, label, ha="center", va="center", fontsize=9)

    def arrow(ax, start, end, colour="black", rad=0.0):
        ax.add_patch(
            FancyArrowPatch(
                start, end, arrowstyle="-|>", mutation_scale=10, color=colour, connectionstyle=f"arc3,rad={rad}"
            )
        )

    def plus(ax, y):
        ax.add_patch(
            FancyBboxPatch((-0.15, y - 0.15), 0.3, 0.3, boxstyle="circle", facecolor="white", edgecolor="black")
        )
        ax.text(0, y, "+", ha="center", va="center", fontsize=11)

    for ax, norm_first in ((ax_post, False), (ax_pre, True)):
        ax.text(0, -0.2, "$x_l$", ha="center", fontsize=11)
        if norm_first:
            box(ax, 1.0, "LayerNorm", _BOX_COLOURS["norm"])
            box(ax, 2.0, "sub-layer F", _BOX_COLOURS["attention"])
            plus(ax, 3.0)
            arrow(ax, (0, 0.05), (0, 0.78))
            arrow(ax, (0, 1.22), (0, 1.78))
            arrow(ax, (0, 2.22), (0, 2.85))
            arrow(ax, (0, 0.3), (0.15, 3.0), "tab:red", rad=0.55)
            arrow(ax, (0, 3.15), (0, 3.75))
            ax.text(0, 3.85, "$x_{l+1} = x_l + F(\\mathrm{LN}(x_l))$", ha="center", fontsize=10)
            ax.text(1.25, 1.6, "residual stream\n(never normalised)", color="tab:red", fontsize=8, ha="center")
            ax.set_title("pre-LN (norm_first=True)")
        else:
            box(ax, 1.0, "sub-layer F", _BOX_COLOURS["attention"])
            plus(ax, 2.0)
            box(ax, 3.0, "LayerNorm", _BOX_COLOURS["norm"])
            arrow(ax, (0, 0.05), (0, 0.78))
            arrow(ax, (0, 1.22), (0, 1.85))
            arrow(ax, (0, 0.3), (0.15, 2.0), "tab:red", rad=0.55)
            arrow(ax, (0, 2.15), (0, 2.78))
            arrow(ax, (0, 3.22), (0, 3.75))
            ax.text(0, 3.85, "$x_{l+1} = \\mathrm{LN}(x_l + F(x_l))$", ha="center", fontsize=10)
            ax.text(1.25, 1.1, "residual", color="tab:red", fontsize=8, ha="center")
            ax.set_title("post-LN (the paper)")
        ax.set_xlim(-2, 2)
        ax.set_ylim(-0.5, 4.3)
        ax.axis("off")
