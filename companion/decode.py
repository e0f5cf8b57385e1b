"""Decoding a trained Transformer: greedy search, beam search, and text-to-text translation.

Both searches run a whole batch of source sentences at once and decode incrementally: the decoder sees only
the newest token at each step and reuses the keys and values of earlier positions from a
:class:`~companion.model.KVCache`. Sentences that are finished drop out of the batch (the cache is
reordered to the rows still running), so a sentence's result does not depend on what else is in its batch.

The paper's settings (section 6.1) are the defaults: beam size 4, length penalty alpha = 0.6 and at most
``input length + 50`` output tokens. The length penalty is GNMT's (Wu et al., 2016):
``lp(length) = ((5 + length) / 6) ** alpha``, and a finished hypothesis is ranked by
``log P(y | x) / lp(|y|)``, where ``|y|`` counts the output tokens including the final ``<eos>``.

Neither search emits ``<pad>`` or ``<bos>``; the returned id lists hold neither ``<bos>`` nor ``<eos>``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal, overload

import torch
import torch.nn.functional as F

from ._validation import check_positive_int, check_token_ids
from .data import BOS_ID, EOS_ID, Tokenizer, pad_sequences
from .devices import resolve_device
from .errors import NonFiniteOutputError
from .model import Transformer, eval_mode

__all__ = [
    "length_penalty",
    "max_output_lengths",
    "record_greedy_step",
    "greedy_decode",
    "beam_search",
    "score_hypotheses",
    "translate",
    "translate_ids",
]


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (1 for ``alpha = 0``)."""
    return ((5 + length) / 6) ** alpha


def max_output_lengths(src: torch.Tensor, pad_id: int, max_extra_len: int, model_max_len: int) -> list[int]:
    """Per sentence, the most output tokens to generate: ``source length + max_extra_len``.

    ``src [batch, n]`` is right-padded; its length counts the non-pad tokens (``<eos>`` included). The limit
    is capped at ``model_max_len``, the longest target the model's positional table covers.
    """
    lengths = (src != pad_id).sum(dim=1)
    return [max(1, min(int(n) + max_extra_len, model_max_len)) for n in lengths]


def _check_inputs(model: object, src: object, max_extra_len: object, bos_id: int, eos_id: int) -> torch.Tensor:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    src = check_token_ids("src", src, model.config.src_vocab_size)
    if isinstance(max_extra_len, bool) or not isinstance(max_extra_len, int) or max_extra_len < 0:
        raise ValueError(f"max_extra_len must be a non-negative integer, got {max_extra_len!r}")
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        if not 0 <= value < model.config.tgt_vocab_size:
            raise ValueError(f"{name} must be a target token id in [0, {model.config.tgt_vocab_size}), got {value}")
    return src


def _next_logits(
    model: Transformer, last: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache, bos_id: int
) -> torch.Tensor:
    """Logits of the next token ``[rows, tgt_vocab]`` (float32) given the newest tokens ``last [rows, 1]``.

    ``<pad>`` and ``<bos>`` are never generated: their logits are set to -inf.
    """
    logits = model.decode(last, memory, src_mask, cache=cache)[:, -1].float()
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteOutputError(
            "the model's next-token scores hold inf or nan, so no token can be chosen: its weights are broken "
            "(a diverged run?). Decode with a checkpoint whose weights are finite."
        )
    logits[:, model.config.pad_id] = float("-inf")
    logits[:, bos_id] = float("-inf")
    return logits


def _next_log_probs(
    model: Transformer, last: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache, bos_id: int
) -> torch.Tensor:
    """Log-probabilities of the next token ``[rows, tgt_vocab]``; ``<pad>`` and ``<bos>`` get -inf."""
    return F.log_softmax(_next_logits(model, last, memory, src_mask, cache, bos_id), dim=-1)


def record_greedy_step(
    tokens: torch.Tensor, running: list[int], outputs: list[list[int]], limits: list[int], eos_id: int
) -> list[int]:
    """Greedy bookkeeping for one step: append each running row's new token ``tokens [rows]`` to its sentence's
    output; returns the rows still decoding (not ended by ``<eos>``, not at their length limit).

    ``running[row]`` is the sentence index of each row still decoding, ``outputs[sentence]`` the ids produced so
    far and ``limits[sentence]`` its length limit (:func:`max_output_lengths`). Shared by :func:`greedy_decode`
    and decoders written for comparison (the decoding benchmark's baseline without a cache).
    """
    keep = []
    for row, (sentence, token) in enumerate(zip(running, tokens.tolist())):
        if token == eos_id:
            continue
        outputs[sentence].append(token)
        if len(outputs[sentence]) < limits[sentence]:
            keep.append(row)
    return keep


@torch.no_grad()
def greedy_decode(
    model: Transformer, src: torch.Tensor, *, max_extra_len: int = 50, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> list[list[int]]:
    """Pick the most probable token at every step, for each sentence of ``src [batch, n]`` (right-padded).

    Returns one list of token ids per sentence, without ``<bos>``/``<eos>``; a sentence that reaches its
    length limit (:func:`max_output_lengths`) without ``<eos>`` is returned as generated so far.
    """
    src = _check_inputs(model, src, max_extra_len, bos_id, eos_id)
    with eval_mode(model):
        memory, src_mask = model.encode(src)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        outputs: list[list[int]] = [[] for _ in range(src.shape[0])]
        running = list(range(src.shape[0]))  # sentence index of each row still decoding
        cache = model.new_cache()
        last = src.new_full((len(running), 1), bos_id)
        while running:
            # the most probable token: argmax of the logits (the softmax would not change which one it is)
            tokens = _next_logits(model, last, memory, src_mask, cache, bos_id).argmax(dim=-1)
            keep = record_greedy_step(tokens, running, outputs, limits, eos_id)
            if len(keep) < len(running):
                index = torch.tensor(keep, dtype=torch.long, device=src.device)
                cache.reorder(index)
                memory, src_mask, tokens = memory[index], src_mask[index], tokens[index]
                running = [running[row] for row in keep]
            last = tokens[:, None]
    return outputs


class _Hypotheses:
    """The finished hypotheses of one sentence: ``(normalised score, token ids)``, at most ``beam_size``."""

    def __init__(self, beam_size: int) -> None:
        self.beam_size = beam_size
        self.items: list[tuple[float, list[int]]] = []

    @property
    def full(self) -> bool:
        return len(self.items) >= self.beam_size

    def add(self, score: float, tokens: list[int], force: bool = False) -> None:
        """Keep a hypothesis while fewer than ``beam_size`` are finished (always with ``force``)."""
        if force or not self.full:
            self.items.append((score, tokens))

    def best(self) -> tuple[float, list[int]]:
        return max(self.items, key=lambda item: item[0])


@overload
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    return_scores: Literal[False] = False,
) -> list[list[int]]: ...


@overload
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    return_scores: Literal[True],
) -> tuple[list[list[int]], list[float]]: ...


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    return_scores: bool = False,
) -> list[list[int]] | tuple[list[list[int]], list[float]]:
    """Beam search for each sentence of ``src [batch, n]`` (right-padded), all sentences at once.

    At every step each of the ``beam_size`` running hypotheses of a sentence is extended by every token and
    the ``2 * beam_size`` best extensions (by summed log-probability) are ranked. An extension by ``<eos>``
    among the first ``beam_size`` ranks becomes a finished hypothesis, scored ``log P / lp(length)``; the best
    ``beam_size`` others keep running. A sentence stops when it has ``beam_size`` finished hypotheses or
    reaches its length limit (:func:`max_output_lengths`; the running ones then count as finished). The best
    finished hypothesis wins. With ``beam_size=1`` this is exactly :func:`greedy_decode`.

    Returns the token ids per sentence (no ``<bos>``/``<eos>``), and with ``return_scores=True`` the pair
    ``(ids, scores)`` (the flag is a literal at each call site, so the type is known statically).
    """
    src = _check_inputs(model, src, max_extra_len, bos_id, eos_id)
    check_positive_int("beam_size", beam_size)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha < float("inf"):
        raise ValueError(f"alpha must be a finite non-negative number, got {alpha!r}")
    with eval_mode(model):
        finished = _beam_search(model, src, beam_size, float(alpha), max_extra_len, bos_id, eos_id)
    best = [hypotheses.best() for hypotheses in finished]
    tokens = [tokens for _, tokens in best]
    return (tokens, [score for score, _ in best]) if return_scores else tokens


def _beam_search(
    model: Transformer, src: torch.Tensor, k: int, alpha: float, max_extra_len: int, bos_id: int, eos_id: int
) -> list[_Hypotheses]:
    """The search loop. Rows are ``sentence * k + beam`` for the sentences still ``running``."""
    memory, src_mask = model.encode(src)
    limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
    memory, src_mask = memory.repeat_interleave(k, dim=0), src_mask.repeat_interleave(k, dim=0)
    finished = [_Hypotheses(k) for _ in range(src.shape[0])]
    running = list(range(src.shape[0]))
    scores = torch.full((len(running), k), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive so the first step has no duplicates
    tokens = src.new_full((len(running) * k, 1), bos_id)  # <bos> + generated tokens, per row
    cache = model.new_cache()
    step = 0
    while running:
        step += 1
        log_probs = _next_log_probs(model, tokens[:, -1:], memory, src_mask, cache, bos_id)
        cand_scores, cand_beams, cand_tokens = _top_candidates(scores, log_probs, k)
        _finish_eos(finished, running, cand_scores, cand_beams, cand_tokens, tokens, k, eos_id, step, alpha)
        scores, rows, new_tokens = _next_beams(cand_scores, cand_beams, cand_tokens, k, eos_id)
        tokens = torch.cat([tokens[rows], new_tokens.reshape(-1, 1)], dim=1)
        cache.reorder(rows, include_cross=False)  # rows stay within their sentence: cross keys are equal
        keep = _stop_or_keep(finished, running, scores, tokens, limits, k, step, alpha)
        if len(keep) < len(running):
            index = torch.tensor(keep, dtype=torch.long, device=src.device)
            rows = (index[:, None] * k + torch.arange(k, device=src.device)).reshape(-1)
            cache.reorder(rows)
            memory, src_mask, tokens, scores = memory[rows], src_mask[rows], tokens[rows], scores[index]
            running = [running[i] for i in keep]
    return finished


def _top_candidates(scores: torch.Tensor, log_probs: torch.Tensor, k: int):
    """The ``2k`` best one-token extensions per sentence, best first.

    ``scores [sentences, k]`` (summed log-probabilities of the running beams), ``log_probs [sentences * k,
    vocab]`` -> ``(scores, beam index, token)``, each ``[sentences, 2k]``.
    """
    vocab = log_probs.shape[-1]
    total = (scores[:, :, None] + log_probs.view(scores.shape[0], k, vocab)).view(scores.shape[0], k * vocab)
    top_scores, top_index = total.topk(min(2 * k, k * vocab), dim=-1)
    return top_scores, top_index // vocab, top_index % vocab


def _finish_eos(finished, running, cand_scores, cand_beams, cand_tokens, tokens, k, eos_id, step, alpha) -> None:
    """Record ``<eos>`` extensions ranked among the first ``k`` as finished hypotheses (best first)."""
    is_eos = (cand_tokens[:, :k] == eos_id) & torch.isfinite(cand_scores[:, :k])
    if not bool(is_eos.any()):
        return
    penalty = length_penalty(step, alpha)
    for sentence_row, rank in is_eos.nonzero().tolist():
        row = sentence_row * k + int(cand_beams[sentence_row, rank])
        score = float(cand_scores[sentence_row, rank]) / penalty
        finished[running[sentence_row]].add(score, tokens[row, 1:].tolist())


def _next_beams(cand_scores, cand_beams, cand_tokens, k: int, eos_id: int):
    """The ``k`` best candidates that do not end in ``<eos>``.

    Returns ``(scores [sentences, k], source rows [sentences * k], tokens [sentences, k])``.
    """
    masked = cand_scores.masked_fill(cand_tokens == eos_id, float("-inf"))
    scores, position = masked.topk(k, dim=-1)
    beams, tokens = cand_beams.gather(1, position), cand_tokens.gather(1, position)
    rows = (torch.arange(scores.shape[0], device=scores.device)[:, None] * k + beams).reshape(-1)
    return scores, rows, tokens


def _stop_or_keep(finished, running, scores, tokens, limits, k, step, alpha) -> list[int]:
    """Indices (into ``running``) of the sentences that go on; those at their length limit finish their
    running beams first."""
    keep = []
    for i, sentence in enumerate(running):
        hypotheses = finished[sentence]
        if hypotheses.full:
            continue
        if step >= limits[sentence]:
            penalty = length_penalty(step, alpha)
            for beam in range(k):
                if torch.isfinite(scores[i, beam]):
                    hypotheses.add(float(scores[i, beam]) / penalty, tokens[i * k + beam, 1:].tolist(), force=True)
            continue
        keep.append(i)
    return keep


@torch.no_grad()
def score_hypotheses(
    model: Transformer,
    src: torch.Tensor,
    hypotheses: Sequence[Sequence[int]],
    *,
    alpha: float = 0.6,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[float]:
    """Teacher-forced score ``log P(y + <eos> | x) / lp(len(y) + 1)`` of one hypothesis per source sentence.

    ``src [batch, n]``; ``hypotheses`` holds ``batch`` lists of ids without ``<bos>``/``<eos>``. Uses the
    same rules as the searches (``<pad>`` and ``<bos>`` are never generated), so it reproduces the scores
    that :func:`beam_search` reports for hypotheses that end in ``<eos>``.
    """
    src = _check_inputs(model, src, 0, bos_id, eos_id)
    if len(hypotheses) != src.shape[0]:
        raise ValueError(f"hypotheses must hold one list per source sentence ({src.shape[0]}), got {len(hypotheses)}")
    pad = model.config.pad_id
    tgt_in = pad_sequences([[bos_id, *h] for h in hypotheses], pad).to(src.device)
    tgt_out = pad_sequences([[*h, eos_id] for h in hypotheses], pad).to(src.device)
    with eval_mode(model):
        logits = model(src, tgt_in).float()
    logits[..., pad] = float("-inf")
    logits[..., bos_id] = float("-inf")
    log_probs = F.log_softmax(logits, dim=-1).gather(-1, tgt_out[..., None]).squeeze(-1)
    log_probs = log_probs.masked_fill(tgt_out == pad, 0.0).sum(dim=1)
    return [float(lp) / float(length_penalty(len(h) + 1, alpha)) for lp, h in zip(log_probs, hypotheses)]


def translate(
    model: Transformer,
    sentences: Sequence[str],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    device: torch.device | str | None = None,
) -> list[str]:
    """Translate ``sentences`` (plain text) and return detokenized translations in the same order.

    Sentences are sorted by length into batches of ``batch_size`` to limit padding. ``beam_size=1`` is
    greedy search. ``device`` (default: where the model is) receives the model and the batches. A source
    longer than the model's ``max_len`` is truncated with a warning; an empty sentence is decoded from
    ``<eos>`` alone.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of strings, got a single string")
    check_positive_int("batch_size", batch_size)
    check_positive_int("beam_size", beam_size)
    sources = _encode_sources(list(sentences), src_tokenizer, model.config.max_len)
    ids = translate_ids(
        model,
        sources,
        beam_size=beam_size,
        alpha=alpha,
        batch_size=batch_size,
        device=device,
        bos_id=tgt_tokenizer.bos_id,
        eos_id=tgt_tokenizer.eos_id,
    )
    return [tgt_tokenizer.decode(hypothesis) for hypothesis in ids]


def translate_ids(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[list[int]]:
    """Decode already tokenized sources (id lists ending in ``<eos>``); returns output ids in the same order.

    The id-level half of :func:`translate`, for machines without the tokenizers' libraries: sources are sorted
    by length into batches of ``batch_size``, decoded with beam search (``beam_size=1``: greedy search) on
    ``device`` (default: where the model is), and returned without ``<bos>``/``<eos>``.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("beam_size", beam_size)
    rows = [list(ids) for ids in sources]
    for i, row in enumerate(rows):
        if not row:
            raise ValueError(f"sources[{i}] is empty: every source needs at least its <eos> id")
    device = resolve_device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]), reverse=True)
    outputs: list[list[int]] = [[] for _ in rows]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = pad_sequences([rows[i] for i in chunk], model.config.pad_id).to(device)
        if beam_size == 1:
            hypotheses = greedy_decode(model, src, bos_id=bos_id, eos_id=eos_id)
        else:
            hypotheses = beam_search(model, src, beam_size=beam_size, alpha=alpha, bos_id=bos_id, eos_id=eos_id)
        for i, hypothesis in zip(chunk, hypotheses):
            outputs[i] = hypothesis
    return outputs


def _encode_sources(sentences: list[str], tokenizer: Tokenizer, max_len: int) -> list[list[int]]:
    """Token ids + ``<eos>`` per sentence, truncated (with one warning) to ``max_len`` ids."""
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"src_tokenizer must be a companion Tokenizer, got {type(tokenizer).__name__}")
    encoded = [ids + [tokenizer.eos_id] for ids in tokenizer.encode_batch(sentences)]
    too_long = sum(len(ids) > max_len for ids in encoded)
    if too_long:
        warnings.warn(
            f"translate: truncated {too_long} source sentence(s) to the model's max_len={max_len} tokens", stacklevel=3
        )
        encoded = [ids[: max_len - 1] + [tokenizer.eos_id] if len(ids) > max_len else ids for ids in encoded]
    return encoded
