"""Experiments of the chapter "The Transformer assembled".

Five groups, each built on the public core (``companion.Transformer`` and its layers) and never copying it:

* **Shapes and the architecture figure.** :func:`record_shapes` runs one batch through a real
  :class:`companion.model.Transformer` with forward hooks and records, in call order, every sub-layer's output shape;
  :func:`draw_architecture` draws the paper's Figure 1 from those records alone.
* **The feed-forward network.** :func:`ffn_as_conv1d` (the same FFN as two 1x1 convolutions) and
  :func:`layer_flops` (matrix-multiply FLOPs of one layer and of its sub-layers, counted by PyTorch).
* **Post-LN against pre-LN.** :func:`gradient_norms_at_init` (per-layer gradient norms of a fresh model) and
  :func:`train_small` (a small training run with or without learning-rate warmup).
* **The paper's Table 1.** Four layer types over a sequence (:class:`RestrictedSelfAttention`,
  :class:`StepwiseRNN`, convolutions, full self-attention), the dependency matrix of one layer read off its
  Jacobian (:func:`dependency_matrix`), the maximum path length through a stack of such layers
  (:func:`max_path_length`), FLOPs (:func:`count_flops`) and the number of operations run one after another
  (:func:`count_operations`).

Shapes follow the book's conventions: ``[batch, seq, d_model]`` batch-first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import companion
from companion import FeedForward, Transformer, TransformerConfig
from companion._validation import check_choice, check_integer, check_number, check_positive_int
from companion.book.experiments.training import fit
from companion.data import Batch
from companion.train import label_smoothed_loss

__all__ = [
    "ShapeRecord",
    "record_shapes",
    "shape_symbols",
    "draw_architecture",
    "draw_residual_variants",
    "ffn_as_conv1d",
    "apply_conv_ffn",
    "layer_flops",
    "layer_parameter_counts",
    "gradient_norms_at_init",
    "TrainResult",
    "train_small",
    "warmup_schedule",
    "RestrictedSelfAttention",
    "StepwiseRNN",
    "make_table1_layer",
    "dependency_matrix",
    "max_path_length",
    "count_flops",
    "count_operations",
    "TABLE1_KINDS",
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


def _box_colour(label: str) -> str:
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
                    facecolor=_box_colour(record.label),
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


# ---------------------------------------------------------------------------------------------------------
# The position-wise feed-forward network
# ---------------------------------------------------------------------------------------------------------


def ffn_as_conv1d(ffn: FeedForward) -> nn.Sequential:
    """The same network as two convolutions with kernel size 1 (the paper's second description, section 3.3).

    ``Conv1d(d_model, d_ff, 1) -> ReLU -> Conv1d(d_ff, d_model, 1)`` with the FFN's weights copied; apply it
    with :func:`apply_conv_ffn`, which moves the features into the channel dimension.
    """
    if not isinstance(ffn, FeedForward):
        raise TypeError(f"ffn must be a companion.FeedForward, got {type(ffn).__name__}")
    first, second = ffn.linear1, ffn.linear2
    convs = []
    for linear in (first, second):
        conv = nn.Conv1d(linear.in_features, linear.out_features, kernel_size=1, bias=linear.bias is not None)
        with torch.no_grad():
            conv.weight.copy_(linear.weight.unsqueeze(-1))  # [out, in] -> [out, in, 1]
            if linear.bias is not None and conv.bias is not None:
                conv.bias.copy_(linear.bias)
        convs.append(conv)
    return nn.Sequential(convs[0], nn.ReLU(), convs[1])


def apply_conv_ffn(conv: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``x [batch, seq, d_model]`` -> ``[batch, seq, d_model]`` through the convolutional FFN."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a [batch, seq, d_model] tensor, got {getattr(x, 'shape', type(x))}")
    return conv(x.transpose(1, 2)).transpose(1, 2)


def count_flops(fn: Callable[[], object]) -> int:
    """Floating-point operations of the matrix products (and convolutions) that ``fn()`` runs, counted by
    :class:`torch.utils.flop_counter.FlopCounterMode` (a multiply-add counts 2)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def layer_flops(layer: companion.EncoderLayer, n: int) -> dict[str, int]:
    """Counted matrix-multiply FLOPs of one encoder layer on ``[1, n, d_model]``, whole and by sub-layer.

    Attention runs with ``need_weights=True`` (the explicit path whose two products PyTorch can count; the fused
    kernel is not counted on CPU). Returns ``{"layer", "attention", "ffn"}``.
    """
    if not isinstance(layer, companion.EncoderLayer):
        raise TypeError(f"layer must be a companion.EncoderLayer, got {type(layer).__name__}")
    check_positive_int("n", n)
    d = layer.self_attn.d_model
    x = torch.randn(1, n, d)
    with torch.no_grad():
        whole = count_flops(lambda: layer(x, need_weights=True))
        attention = count_flops(lambda: layer.self_attn(x, x, x, need_weights=True))
        ffn = count_flops(lambda: layer.ffn(x))
    return {"layer": whole, "attention": attention, "ffn": ffn}


def layer_parameter_counts(layer: nn.Module) -> dict[str, int]:
    """Parameters of an encoder or decoder layer by kind: ``attention``, ``ffn``, ``norm`` and ``total``."""
    counts = {"attention": 0, "ffn": 0, "norm": 0}
    for name, p in layer.named_parameters():
        kind = "attention" if "attn" in name else "ffn" if name.startswith("ffn") else "norm"
        counts[kind] += p.numel()
    counts["total"] = sum(counts.values())
    return counts


# ---------------------------------------------------------------------------------------------------------
# Post-LN against pre-LN: gradients at initialisation and small training runs
# ---------------------------------------------------------------------------------------------------------


def _mean_token_loss(model: nn.Module, batch: Batch, pad_id: int) -> torch.Tensor:
    """Mean cross-entropy per target token of ``model(batch.src, batch.tgt_in)`` (no label smoothing)."""
    logits = model(batch.src, batch.tgt_in)
    loss, _, tokens = label_smoothed_loss(logits, batch.tgt_out, 0.0, pad_id)
    return loss / tokens


def _grad_norm(module: nn.Module, weight_only: bool = False) -> float:
    """L2 norm of the gradients of ``module``'s parameters (its ``weight`` alone with ``weight_only``)."""
    params: list[torch.Tensor] = [module.get_parameter("weight")] if weight_only else list(module.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    return math.sqrt(sum(float(g.pow(2).sum()) for g in grads))


def gradient_norms_at_init(config: TransformerConfig, batch: Batch, seed: int = 0) -> dict[str, list[float]]:
    """Gradient norms of each layer's parameters for a freshly initialised model on one batch.

    The loss is the mean token cross-entropy of ``batch`` (dropout off). Returns ``{"encoder": [...],
    "decoder": [...], "decoder_ffn_w2": [...]}``: the L2 norm of the gradient of all parameters of each layer
    (index 0 = the layer nearest the input), and of each decoder layer's second FFN weight W_2 alone (the
    quantity plotted by Xiong et al., 2020, Figure 3).
    """
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    _mean_token_loss(model, batch, config.pad_id).backward()

    return {
        "encoder": [_grad_norm(layer) for layer in model.encoder.layers],
        "decoder": [_grad_norm(layer) for layer in model.decoder.layers],
        "decoder_ffn_w2": [
            _grad_norm(layer.get_submodule("ffn.linear2"), weight_only=True) for layer in model.decoder.layers
        ],
    }


def warmup_schedule(peak_lr: float, warmup: int) -> Callable[[int], float]:
    """Learning rate at optimizer step ``step`` (from 1): linear from ``peak_lr / warmup`` to ``peak_lr`` over
    ``warmup`` steps, constant after; ``warmup=0`` is the constant ``peak_lr`` from the first step."""
    check_number("peak_lr", peak_lr, low=0, low_inclusive=False)
    check_integer("warmup", warmup, minimum=0)
    return lambda step: peak_lr * (min(1.0, step / warmup) if warmup else 1.0)


@dataclass
class TrainResult:
    """What :func:`train_small` returns: the model and the per-step training loss and gradient norm."""

    model: Transformer
    losses: list[float]
    grad_norms: list[float]

    def final_loss(self, last: int = 20) -> float:
        """Mean training loss over the last ``last`` steps."""
        tail = self.losses[-last:]
        return sum(tail) / len(tail)


def train_small(
    config: TransformerConfig, batches: Sequence[Batch], steps: int, lr: Callable[[int], float], seed: int = 0
) -> TrainResult:
    """Train a fresh :class:`companion.model.Transformer` (built after ``torch.manual_seed(seed)``) for ``steps`` Adam
    steps with the paper's betas 0.9/0.98 and eps 1e-9, no label smoothing, cycling through ``batches``;
    ``lr(step)`` gives the learning rate of step 1, 2, ... (e.g. :func:`warmup_schedule`).

    The loop is the book's shared one, :func:`companion.book.experiments.training.fit`. A loss that becomes NaN or
    infinite is recorded as ``inf`` and training stops there (the model diverged).
    """
    check_positive_int("steps", steps)
    if not batches:
        raise ValueError("batches must not be empty")
    if not callable(lr):
        raise TypeError(f"lr must be a callable step -> learning rate, got {lr!r}")
    torch.manual_seed(seed)
    model = Transformer(config)
    grad_norms: list[float] = []

    def loss_fn(module: nn.Module, batch: Batch) -> torch.Tensor:
        return _mean_token_loss(module, batch, config.pad_id)

    losses = fit(
        model,
        [batches[i % len(batches)] for i in range(steps)],
        loss_fn,
        steps,
        lr=1.0,
        schedule=lambda completed: lr(completed + 1),  # base 1.0: the multiplier is the rate
        betas=(0.9, 0.98),
        eps=1e-9,
        seed=seed,
        stop_on_nonfinite=True,
        on_step=lambda _step, _loss, norm: grad_norms.append(norm),
    )
    return TrainResult(model.eval(), losses, grad_norms)


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
        mha = companion.MultiHeadAttention(d_model, 1).double()
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
