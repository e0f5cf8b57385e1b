"""Length generalisation on synthetic tasks: train on short sequences, test on longer ones.

The paper chose sinusoidal positions partly because they "may allow the model to extrapolate to sequence
lengths longer than the ones encountered during training" (Vaswani et al., 2017, section 3.5). Chapter 5 tests
that hypothesis: train a model on :func:`companion.data.synthetic.synthetic_pairs` with lengths up to ``L``,
then measure it on lengths beyond ``L``. Two measurements separate two ways of failing:

* :func:`length_report` decodes greedily (:func:`companion.decode.greedy_decode`) and scores whole outputs:
  exact match, per-token accuracy and the mean output length (a model that never saw long targets may simply
  stop too early).
* :func:`position_accuracy` is teacher-forced: given the correct prefix, is the most probable *content* token
  (the special ids ``<pad> <unk> <bos> <eos>`` excluded) at target position ``p`` the right one? It measures
  whether the model can still find the token for position ``p``, leaving aside when it decides to stop.

Every example of one length is drawn with its own seed (``seed + length``), so adding or removing lengths does
not change the examples of the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..._validation import check_positive_int
from ...data import BOS_ID, EOS_ID, SPECIAL_TOKENS, synthetic_pairs
from ...decode import greedy_decode
from ...model import Transformer, eval_mode

__all__ = ["LengthResult", "length_report", "position_accuracy"]

_FIRST_CONTENT_ID = len(SPECIAL_TOKENS)  # ids 0-3 are <pad> <unk> <bos> <eos>


@dataclass(frozen=True)
class LengthResult:
    """Greedy-decoding scores of one source length.

    Attributes:
        length: the source (and target) length, without ``<eos>``.
        exact_match: fraction of outputs identical to the target (right tokens and right length).
        token_accuracy: fraction of the ``length`` target positions whose output token is right (a missing
            token, because the output stopped early, counts as wrong).
        mean_output_length: mean number of generated tokens before ``<eos>``.
    """

    length: int
    exact_match: float
    token_accuracy: float
    mean_output_length: float


def _check_model(model: object) -> Transformer:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    return model


def _check_vocab(model: Transformer, vocab_size: int) -> None:
    check_positive_int("vocab_size", vocab_size)
    largest = min(model.config.src_vocab_size, model.config.tgt_vocab_size)
    if not _FIRST_CONTENT_ID < vocab_size <= largest:
        raise ValueError(
            f"vocab_size must be in ({_FIRST_CONTENT_ID}, {largest}] (special ids 0-3 plus at least one symbol, "
            f"within the model's vocabularies), got {vocab_size}"
        )


def _check_length(model: Transformer, name: str, value: object) -> int:
    length = check_positive_int(name, value)
    if length + 1 > model.config.max_len:  # the source gets <eos>, the decoder input <bos>
        raise ValueError(
            f"{name} must be at most max_len - 1 = {model.config.max_len - 1} (one slot for <eos>/<bos>), got {length}"
        )
    return length


def _pairs(task: str, length: int, num_examples: int, vocab_size: int, seed: int) -> list[tuple[list[int], list[int]]]:
    return synthetic_pairs(
        task, num_examples, min_len=length, max_len=length, vocab_size=vocab_size, seed=seed + length
    )


@torch.no_grad()
def length_report(
    model: Transformer,
    task: str,
    lengths: Sequence[int],
    *,
    vocab_size: int,
    examples_per_length: int = 100,
    seed: int = 0,
    max_extra_len: int = 5,
) -> list[LengthResult]:
    """Greedy-decode ``examples_per_length`` fresh examples of ``task`` for every length in ``lengths``.

    Args:
        model: a trained companion :class:`~companion.model.Transformer` (put in eval mode while decoding).
        task: ``"copy"``, ``"reverse"`` or ``"sort"`` (see :func:`companion.data.synthetic.synthetic_pairs`).
        lengths: source lengths to test (each needs ``length + 1 <= model.config.max_len``).
        vocab_size: the task's vocabulary (ids ``4 .. vocab_size - 1`` are the symbols), as in training.
        examples_per_length: examples drawn for each length (with seed ``seed + length``).
        seed: base seed of the examples.
        max_extra_len: the output may run this many tokens past the source length (``<eos>`` included).

    Returns:
        One :class:`LengthResult` per length, in the order given.
    """
    model = _check_model(model)
    _check_vocab(model, vocab_size)
    check_positive_int("examples_per_length", examples_per_length)
    lengths = list(lengths)
    if not lengths:
        raise ValueError("lengths must hold at least one length, got an empty sequence")
    lengths = [_check_length(model, f"lengths[{i}]", n) for i, n in enumerate(lengths)]
    device = next(model.parameters()).device
    results = []
    for length in lengths:
        pairs = _pairs(task, length, examples_per_length, vocab_size, seed)
        src = torch.tensor([source + [EOS_ID] for source, _ in pairs], dtype=torch.long, device=device)
        outputs = greedy_decode(model, src, max_extra_len=max_extra_len)
        exact = sum(output == target for output, (_, target) in zip(outputs, pairs))
        right = sum(sum(a == b for a, b in zip(output, target)) for output, (_, target) in zip(outputs, pairs))
        results.append(
            LengthResult(
                length=length,
                exact_match=exact / len(pairs),
                token_accuracy=right / (length * len(pairs)),
                mean_output_length=sum(len(output) for output in outputs) / len(pairs),
            )
        )
    return results


@torch.no_grad()
def position_accuracy(
    model: Transformer, task: str, length: int, *, vocab_size: int, num_examples: int = 100, seed: int = 0
) -> torch.Tensor:
    """Teacher-forced accuracy at every target position, ``[length]`` (float, on the CPU).

    The decoder reads ``<bos>`` and the correct target prefix; at position ``p`` the prediction is the most
    probable *content* token (the task's symbols ``4 .. vocab_size - 1``; the special tokens, ``<eos>``
    included, are excluded), so a model
    that would stop too early can still score. Entry ``p`` is the fraction of the ``num_examples`` examples
    (drawn with seed ``seed + length``, as in :func:`length_report`) whose prediction at ``p`` is right.
    """
    model = _check_model(model)
    _check_vocab(model, vocab_size)
    length = _check_length(model, "length", length)
    check_positive_int("num_examples", num_examples)
    device = next(model.parameters()).device
    pairs = _pairs(task, length, num_examples, vocab_size, seed)
    src = torch.tensor([source + [EOS_ID] for source, _ in pairs], dtype=torch.long, device=device)
    tgt_in = torch.tensor([[BOS_ID] + target for _, target in pairs], dtype=torch.long, device=device)
    target = torch.tensor([target for _, target in pairs], dtype=torch.long, device=device)  # [batch, length]
    with eval_mode(model):
        logits = model(src, tgt_in)[:, :length]  # [batch, length, vocab]
    predicted = logits[..., _FIRST_CONTENT_ID:vocab_size].argmax(dim=-1) + _FIRST_CONTENT_ID
    return (predicted == target).float().mean(dim=0).cpu()
