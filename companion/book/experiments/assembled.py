"""Experiments of the chapter "The Transformer assembled".

Four groups, each built on the public core (``companion.Transformer`` and its layers) and never copying it:

* **Shapes and the architecture figure** (in ``companion.book.experiments.assembled_figures``).
  :func:`record_shapes` runs one batch through a real :class:`companion.model.Transformer` with forward hooks and
  records, in call order, every sub-layer's output shape; :func:`draw_architecture` draws the paper's Figure 1 from
  those records alone.
* **The feed-forward network.** :func:`ffn_as_conv1d` (the same FFN as two 1x1 convolutions) and
  :func:`layer_flops` (matrix-multiply FLOPs of one layer and of its sub-layers, counted by PyTorch).
* **Post-LN against pre-LN.** :func:`gradient_norms_at_init` (per-layer gradient norms of a fresh model) and
  :func:`train_small` (a small training run with or without learning-rate warmup).
* **The paper's Table 1** (in ``companion.book.experiments.table1``). Four layer types over a sequence
  (:class:`RestrictedSelfAttention`, :class:`StepwiseRNN`, convolutions, full self-attention), the dependency
  matrix of one layer read off its Jacobian (:func:`dependency_matrix`), the maximum path length through a stack
  of such layers (:func:`max_path_length`), FLOPs (:func:`count_flops`) and the number of operations run one
  after another (:func:`count_operations`).

This module holds the feed-forward network and the post-LN/pre-LN experiments and re-exports the other two
modules' names, so that the chapter reaches everything as ``exp.<name>`` after
``from companion.book.experiments import assembled as exp``. Shapes follow the book's conventions:
``[batch, seq, d_model]`` batch-first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..._validation import check_integer, check_number, check_positive_int
from ...data import Batch
from ...model import EncoderLayer, FeedForward, Transformer, TransformerConfig
from ...train import label_smoothed_loss
from .assembled_figures import (
    ShapeRecord,
    box_colour,
    draw_architecture,
    draw_residual_variants,
    record_shapes,
    shape_symbols,
)
from .table1 import (
    TABLE1_KINDS,
    RestrictedSelfAttention,
    StepwiseRNN,
    count_flops,
    count_operations,
    dependency_matrix,
    make_table1_layer,
    max_path_length,
)
from .training import fit

__all__ = [
    "ShapeRecord",
    "record_shapes",
    "shape_symbols",
    "box_colour",
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


def layer_flops(layer: EncoderLayer, n: int) -> dict[str, int]:
    """Counted matrix-multiply FLOPs of one encoder layer on ``[1, n, d_model]``, whole and by sub-layer.

    Attention runs with ``need_weights=True`` (the explicit path whose two products PyTorch can count; the fused
    kernel is not counted on CPU). Returns ``{"layer", "attention", "ffn"}``.
    """
    if not isinstance(layer, EncoderLayer):
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
