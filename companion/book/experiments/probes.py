"""Small synthetic tasks and models that probe what multiple attention heads buy (chapter 4).

Two tasks, each with the smallest model that can solve it:

1. :func:`two_pointer_task` with :class:`SequenceClassifier`. A sequence of ``seq_len`` value tokens is
   followed by one *query token* that names two positions ``(p1, p2)``; the label is the ordered pair
   ``(x[p1], x[p2])``, encoded as ``x[p1] * num_values + x[p2]``. Which position is "first" is known only to
   the query, so the model has to look at two places at once and keep them apart.
2. :func:`offset_mixing_task` with :class:`PositionalMixer`. The input is random Gaussian vectors; the target
   at position i takes its first feature group from position ``i + offsets[0]``, its second from
   ``i + offsets[1]``, and so on (cyclically). In :class:`PositionalMixer` queries and keys see only the
   positions, so every head's attention pattern is the same for every input, and
   :func:`mixing_error_bound` gives the smallest error h such heads can reach: ``max(0, 1 - h / k)`` of the
   target's variance with k offsets (the derivation is in chapter 4).

:func:`fit` trains either model on tensors with Adam; :func:`accuracy` and :func:`relative_error` score them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..._validation import check_integer, check_last_dim, check_positive_int, check_tensor, check_token_ids
from ...attention import MultiHeadAttention
from ...model import Encoder, TransformerConfig
from ...positional import LearnedPositionalEncoding
from . import training
from .training import warmup_cosine_schedule

__all__ = [
    "PointerTask",
    "two_pointer_task",
    "SequenceClassifier",
    "offset_mixing_task",
    "mixing_error_bound",
    "PositionalMixer",
    "fit",
    "accuracy",
    "relative_error",
]


# -- 1. two pointers ------------------------------------------------------------------------------------------


@dataclass
class PointerTask:
    """Examples of the two-pointer task (see :func:`two_pointer_task`).

    Attributes:
        tokens: ``[num, seq_len + 1]`` long: ``seq_len`` value ids in ``[0, num_values)``, then the query id.
        labels: ``[num]`` long: ``x[p1] * num_values + x[p2]``.
        pointers: ``[num, 2]`` long: the two positions ``(p1, p2)`` the query names (``p1 != p2``).
        seq_len, num_values: the task's size.
    """

    tokens: torch.Tensor
    labels: torch.Tensor
    pointers: torch.Tensor
    seq_len: int
    num_values: int

    @property
    def vocab_size(self) -> int:
        """Value ids plus one query id per ordered pair of distinct positions."""
        return self.num_values + self.seq_len * (self.seq_len - 1)

    @property
    def num_classes(self) -> int:
        """Number of possible labels, ``num_values ** 2``."""
        return self.num_values**2

    def query_id(self, p1: int, p2: int) -> int:
        """Token id of the query naming positions ``(p1, p2)``."""
        for name, p in (("p1", p1), ("p2", p2)):
            check_integer(f"{name} (a position of seq_len={self.seq_len})", p, minimum=0, maximum=self.seq_len - 1)
        if p1 == p2:
            raise ValueError(f"p1 and p2 must differ, got {p1} for both")
        return self.num_values + p1 * (self.seq_len - 1) + (p2 if p2 < p1 else p2 - 1)

    def __len__(self) -> int:
        return self.tokens.shape[0]


def two_pointer_task(num_examples: int, seq_len: int = 8, num_values: int = 8, seed: int = 0) -> PointerTask:
    """Random examples of the two-pointer task: find the values at two positions named by a query token.

    Values are drawn uniformly from ``[0, num_values)`` at every position; the ordered pair ``(p1, p2)`` is
    drawn uniformly among the pairs of distinct positions. The same arguments always give the same examples.
    """
    check_positive_int("num_examples", num_examples)
    check_positive_int("seq_len", seq_len)
    check_positive_int("num_values", num_values)
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2 (two distinct positions), got {seq_len}")
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(0, num_values, (num_examples, seq_len), generator=generator)  # [num, seq_len]
    p1 = torch.randint(0, seq_len, (num_examples,), generator=generator)
    shift = torch.randint(1, seq_len, (num_examples,), generator=generator)
    p2 = (p1 + shift) % seq_len  # uniform over the positions other than p1
    pointers = torch.stack([p1, p2], dim=1)  # [num, 2]
    picked = values.gather(1, pointers)  # [num, 2]: x[p1], x[p2]
    labels = picked[:, 0] * num_values + picked[:, 1]
    query = num_values + p1 * (seq_len - 1) + torch.where(p2 < p1, p2, p2 - 1)
    tokens = torch.cat([values, query[:, None]], dim=1)  # [num, seq_len + 1]
    return PointerTask(tokens, labels, pointers, seq_len, num_values)


class SequenceClassifier(nn.Module):
    """Token embeddings + learned positions -> a stack of companion encoder layers -> a linear readout of the
    last position.

    The layers are :class:`~companion.model.EncoderLayer` (pre-LN, no dropout), so the attention is the companion's
    :class:`~companion.attention.MultiHeadAttention`; the number of parameters does not depend on ``num_heads``.

    Args:
        vocab_size: number of token ids; num_classes: number of labels.
        d_model, num_heads, num_layers: width, heads (must divide ``d_model``) and depth.
        d_ff: feed-forward width (default ``4 * d_model``).
        max_len: longest sequence accepted.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        d_model: int = 32,
        num_heads: int = 4,
        num_layers: int = 1,
        d_ff: int | None = None,
        max_len: int = 64,
    ) -> None:
        super().__init__()
        check_positive_int("num_classes", num_classes)
        self.layer_config = TransformerConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            d_model=d_model,
            num_heads=num_heads,
            num_encoder_layers=num_layers,
            num_decoder_layers=0,
            d_ff=d_ff or 4 * d_model,
            dropout=0.0,
            max_len=max_len,
            norm_first=True,
        )
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEncoding(d_model, max_len, dropout=0.0)
        self.encoder = Encoder(self.layer_config)
        self.readout = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor, need_weights: bool = False):
        """Logits ``[batch, num_classes]`` for ``tokens [batch, seq]``; with ``need_weights`` also the
        attention weights of every layer, ``[batch, heads, seq, seq]`` each."""
        tokens = check_token_ids("tokens", tokens, self.vocab_size)
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"tokens has {tokens.shape[1]} positions, more than max_len={self.max_len}")
        x, maps = self.encoder(self.pos(self.embed(tokens)), None, need_weights)
        logits = self.readout(x[:, -1])
        return (logits, maps) if need_weights else logits


# -- 2. offset mixing ---------------------------------------------------------------------------------------------


def offset_mixing_task(
    num_examples: int, seq_len: int, d_model: int, offsets: Sequence[int], seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``x [num, seq_len, d_model]`` (standard normal) and targets ``y`` of the same shape.

    The features are cut into ``k = len(offsets)`` equal contiguous groups; group g of ``y[:, i]`` is group g of
    ``x[:, (i + offsets[g]) % seq_len]``. Offsets must be distinct modulo ``seq_len`` and ``k`` must divide
    ``d_model``.
    """
    check_positive_int("num_examples", num_examples)
    check_positive_int("seq_len", seq_len)
    check_positive_int("d_model", d_model)
    offsets = list(offsets)
    if not offsets:
        raise ValueError("offsets must be a non-empty sequence of ints, got none")
    for i, offset in enumerate(offsets):
        check_integer(f"offsets[{i}]", offset, error=TypeError)
    if len({o % seq_len for o in offsets}) != len(offsets):
        raise ValueError(f"offsets must be distinct modulo seq_len={seq_len}, got {offsets}")
    if d_model % len(offsets):
        raise ValueError(f"the number of offsets ({len(offsets)}) must divide d_model={d_model}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_examples, seq_len, d_model, generator=generator)
    width = d_model // len(offsets)
    groups = [torch.roll(x[..., g * width : (g + 1) * width], shifts=-o, dims=1) for g, o in enumerate(offsets)]
    return x, torch.cat(groups, dim=-1)


def mixing_error_bound(num_heads: int, num_lookups: int) -> float:
    """Smallest relative error ``max(0, 1 - num_heads / num_lookups)`` that heads with input-independent
    attention can reach on :func:`offset_mixing_task` with ``num_lookups`` offsets (Gaussian inputs)."""
    check_positive_int("num_heads", num_heads)
    check_positive_int("num_lookups", num_lookups)
    return max(0.0, 1.0 - num_heads / num_lookups)


class PositionalMixer(nn.Module):
    """One :class:`~companion.attention.MultiHeadAttention` whose queries and keys are learned position vectors
    and whose values are the input: ``MHA(query=P, key=P, value=x)``.

    Because the attention weights depend only on the learned table ``P [seq_len, d_model]``, each head applies
    the same mixing matrix to every input; the heads differ only in which positions they mix and which feature
    subspace they carry.
    """

    def __init__(self, seq_len: int, d_model: int, num_heads: int) -> None:
        super().__init__()
        check_positive_int("seq_len", seq_len)
        self.seq_len = seq_len
        self.positions = nn.Parameter(torch.randn(seq_len, d_model))  # [seq_len, d_model]
        self.attention = MultiHeadAttention(d_model, num_heads)

    def forward(self, x: torch.Tensor, need_weights: bool = False):
        """``x [batch, seq_len, d_model]`` -> mixed ``[batch, seq_len, d_model]`` (and ``[batch, heads, seq_len,
        seq_len]`` weights with ``need_weights``)."""
        x = check_tensor("x", x, dims=3)
        check_last_dim("x", x, self.attention.d_model)
        if x.shape[1] != self.seq_len:
            raise ValueError(f"x must have seq_len={self.seq_len} positions, got shape {tuple(x.shape)}")
        p = self.positions.expand(x.shape[0], -1, -1)
        return self.attention(p, p, x, need_weights=need_weights)


# -- training and scoring -----------------------------------------------------------------------------------------


def fit(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    steps: int,
    batch_size: int = 128,
    lr: float = 3e-3,
    warmup: int = 30,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` so that ``loss_fn(model(inputs[rows]), targets[rows])`` goes down; returns every step's loss.

    Each step draws ``batch_size`` random rows (seeded by ``seed``), takes one Adam step (betas 0.9, 0.98)
    with the gradient norm clipped to 1, and the learning rate rises linearly to ``lr`` over ``warmup`` steps,
    then follows a cosine down to ``lr / 10`` (:func:`companion.book.experiments.training.fit` with
    :func:`~companion.book.experiments.training.warmup_cosine_schedule`). The model is left in eval mode.
    """
    check_tensor("inputs", inputs)
    check_tensor("targets", targets)
    if inputs.shape[0] != targets.shape[0] or inputs.shape[0] == 0:
        raise ValueError(
            f"inputs and targets must hold the same positive number of rows, got "
            f"{tuple(inputs.shape)} and {tuple(targets.shape)}"
        )
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable (output, target) -> 0-d loss tensor, got {loss_fn!r}")

    def random_rows(generator: torch.Generator) -> torch.Tensor:
        return torch.randint(0, inputs.shape[0], (batch_size,), generator=generator)

    def rows_loss(model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
        return loss_fn(model(inputs[rows]), targets[rows])

    return training.fit(
        model,
        random_rows,
        rows_loss,
        steps,
        lr=lr,
        seed=seed,
        betas=(0.9, 0.98),
        schedule=warmup_cosine_schedule(warmup, steps),
        clip_norm=1.0,
    )


@torch.no_grad()
def accuracy(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor, batch_size: int = 1024) -> float:
    """Fraction of rows whose arg-max logit is the label (model in eval mode, no gradients)."""
    check_tensor("labels", labels, dims=1)
    check_tensor("tokens", tokens)
    if tokens.shape[0] != labels.shape[0]:
        raise ValueError(
            f"tokens and labels must hold the same number of rows, got {tokens.shape[0]} and {labels.shape[0]}"
        )
    model.eval()
    correct = sum(
        int((model(t).argmax(-1) == y).sum()) for t, y in zip(tokens.split(batch_size), labels.split(batch_size))
    )
    return correct / labels.shape[0]


@torch.no_grad()
def relative_error(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """``mean((prediction - target)**2) / mean(target**2)``: 0 is perfect, 1 is as bad as predicting 0."""
    check_tensor("prediction", prediction)
    check_tensor("target", target)
    if prediction.shape != target.shape:
        raise ValueError(
            f"prediction and target must have the same shape, got {tuple(prediction.shape)} and {tuple(target.shape)}"
        )
    return float(((prediction - target) ** 2).mean() / (target**2).mean())
