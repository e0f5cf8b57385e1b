"""Greedy search: every sentence still decoding appends its most probable next token."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .._validation import check_bool
from ..data import BOS_ID, EOS_ID
from ..model import Transformer, eval_mode
from ._blocks import first_argmax
from .limits import check_search_inputs, max_output_lengths
from .steps import DecoderStep, model_step


@dataclass(frozen=True)
class GreedyStepRecord:
    """What an observer of :func:`search_greedy` sees at step ``step`` (1 for the first output token):
    ``sentences[row]`` is the sentence of each row still decoding, ``logits [rows, vocab]`` what the step
    function returned and ``tokens [rows]`` the tokens chosen from them."""

    step: int
    sentences: list[int]
    logits: torch.Tensor
    tokens: torch.Tensor


def _most_probable(logits: torch.Tensor) -> torch.Tensor:
    """The most probable token of each row of ``logits [rows, vocab]``: the argmax (a softmax would not change
    which one), the first one where several tie, found block by block (:func:`~companion.decode._blocks.first_argmax`:
    on CPU a whole-row ``argmax`` is several times slower than the blocks' maxima)."""
    return first_argmax(logits)


def search_greedy(
    step: DecoderStep,
    limits: Sequence[int],
    *,
    bos_id: int = BOS_ID,
    eos_id: int | None = EOS_ID,
    device: torch.device | str = "cpu",
    pick: Callable[[torch.Tensor], torch.Tensor] = _most_probable,
    on_step: Callable[[GreedyStepRecord], None] | None = None,
) -> list[list[int]]:
    """Greedy search: at each step every sentence still decoding appends its most probable next token.

    ``limits[sentence]`` is the most output tokens of each sentence (:func:`max_output_lengths`); a sentence
    stops at ``<eos>`` (not appended; ``eos_id=None``: every sentence runs to its limit) or at its limit.
    ``pick`` chooses each row's token from its logits ``[rows, vocab]`` (default: the most probable; sampling
    draws one instead). Returns the ids per sentence, without ``<bos>``/``<eos>``.
    """
    outputs: list[list[int]] = [[] for _ in limits]
    running = list(range(len(limits)))  # the sentence of each row still decoding
    prefixes = torch.full((len(running), 1), bos_id, dtype=torch.long, device=device)
    t = 0
    while running:
        t += 1
        logits = step(prefixes)
        tokens = pick(logits)  # [rows]
        if on_step is not None:
            on_step(GreedyStepRecord(t, running, logits, tokens))
        keep = []
        for row, (sentence, token) in enumerate(zip(running, tokens.tolist())):
            if token == eos_id:
                continue
            outputs[sentence].append(token)
            if len(outputs[sentence]) < limits[sentence]:
                keep.append(row)
        prefixes = torch.cat([prefixes, tokens[:, None]], dim=1)
        if len(keep) < len(running):  # finished sentences leave the batch
            index = torch.tensor(keep, dtype=torch.long, device=prefixes.device)
            step.select(index)
            prefixes, running = prefixes[index], [running[row] for row in keep]
    return outputs


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    *,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
    on_step: Callable[[GreedyStepRecord], None] | None = None,
) -> list[list[int]]:
    """Pick the most probable token at every step, for each sentence of ``src [batch, n]`` (right-padded).

    Returns one list of token ids per sentence, without ``<bos>``/``<eos>``; a sentence that reaches its
    length limit (:func:`max_output_lengths`) without ``<eos>`` is returned as generated so far.
    ``use_cache=False`` recomputes the whole prefix at every step (:class:`RecomputeStep`: same tokens, slower);
    ``on_step`` observes every step (:class:`GreedyStepRecord`).

    Runs under :func:`torch.inference_mode` (no autograd bookkeeping per operation: a few percent faster than
    ``torch.no_grad`` for a small model): the tensors an ``on_step`` observer receives are inference tensors,
    to read or keep as they are (``.clone()`` one to edit it in place).
    """
    src = check_search_inputs(model, src, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id)
    check_bool("use_cache", use_cache)
    return _greedy(model, src, max_extra_len, bos_id, eos_id, use_cache=use_cache, on_step=on_step)


def _greedy(
    model: Transformer,
    src: torch.Tensor,
    max_extra_len: int,
    bos_id: int,
    eos_id: int,
    *,
    use_cache: bool = True,
    on_step: Callable[[GreedyStepRecord], None] | None = None,
) -> list[list[int]]:
    """:func:`greedy_decode` on checked inputs."""
    with eval_mode(model):
        step = model_step(model, src, bos_id=bos_id, use_cache=use_cache)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        return search_greedy(step, limits, bos_id=bos_id, eos_id=eos_id, device=src.device, on_step=on_step)


@torch.no_grad()
def greedy_tie_gap(
    model: Transformer,
    src_ids: Sequence[int],
    a: Sequence[int],
    b: Sequence[int],
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> float:
    """How close to a tie two greedy outputs of one source sentence part: ``|logit(a_k) - logit(b_k)|``, from
    ``model``'s next-token logits (recomputed over the common prefix ``a[:k]``), at the first position ``k``
    where the token lists ``a`` and ``b`` differ (``<eos>`` stands in where one of them ends).

    Two float implementations of the same greedy search (with and without the cache, PyTorch and ONNX) round
    differently, so they may pick different tokens where the model scores two tokens within rounding of each
    other; a gap of the order of 1e-5 says that is what happened, a large gap that one of them is wrong.
    Raises ``ValueError`` when ``a`` and ``b`` are equal (they never part).
    """
    if list(a) == list(b):
        raise ValueError("a and b are the same token list: there is no position where they part")
    k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    token_a, token_b = (a[k] if k < len(a) else eos_id), (b[k] if k < len(b) else eos_id)
    with eval_mode(model):
        memory, src_mask = model.encode(torch.tensor([list(src_ids)]))
        logits = model.decode(torch.tensor([[bos_id, *a[:k]]]), memory, src_mask)[0, -1]
    return float((logits[token_a] - logits[token_b]).abs())
