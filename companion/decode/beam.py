"""Beam search (the paper's section 6.1: beam size 4, length penalty alpha = 0.6), and the teacher-forced score
of a given output under the same rules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

import torch
import torch.nn.functional as F

from .._validation import check_bool, check_number
from ..data import BOS_ID, EOS_ID, pad_sequences
from ..model import Transformer, eval_mode
from ._blocks import top_k
from .limits import (
    MAX_ALPHA,
    _check_id_lists,
    check_beam_size,
    check_search_inputs,
    length_penalty,
    max_output_lengths,
)
from .steps import DecoderStep, model_step


@dataclass(frozen=True)
class Finished:
    """A finished hypothesis: ``tokens`` (no ``<bos>``/``<eos>``), their summed log-probability ``log_prob``
    (``<eos>`` included when it ended with one) and ``length``, the length its penalty uses (the step at which
    it finished: ``len(tokens) + 1`` when it ended with ``<eos>``, ``len(tokens)`` at the length limit)."""

    tokens: tuple[int, ...]
    log_prob: float
    length: int

    @property
    def ended_with_eos(self) -> bool:
        return self.length > len(self.tokens)

    def score(self, alpha: float) -> float:
        """The ranking score ``log_prob / lp(length)`` with GNMT's penalty ``((5 + length) / 6) ** alpha``."""
        return self.log_prob / float(length_penalty(self.length, alpha))


def best_hypothesis(hypotheses: Sequence[Finished], alpha: float) -> Finished:
    """The hypothesis with the highest ``score(alpha)``, the first one on a tie."""
    return max(hypotheses, key=lambda hypothesis: hypothesis.score(alpha))


@dataclass(frozen=True)
class Candidates:
    """The ``2k`` best one-token extensions of each sentence's running hypotheses, best first; each
    ``[sentences, 2k]``: ``scores`` (summed log-probability of the extended hypothesis), ``beams`` (which of the
    ``k`` running hypotheses it extends) and ``tokens`` (the token it adds)."""

    scores: torch.Tensor
    beams: torch.Tensor
    tokens: torch.Tensor


@dataclass
class BeamState:
    """The state of a batched beam search with beam size ``k``.

    ``sentences[i]`` is the sentence of the i-th group still searching; its ``k`` running hypotheses are rows
    ``i * k + b`` of ``prefixes [groups * k, 1 + step]`` (``<bos>`` and the tokens so far), with summed
    log-probabilities ``scores [groups, k]`` (-inf: an empty slot). ``finished[sentence]`` holds each
    sentence's finished hypotheses, for every sentence of the batch.
    """

    k: int
    sentences: list[int]
    scores: torch.Tensor
    prefixes: torch.Tensor
    finished: list[list[Finished]] = field(default_factory=list)
    step: int = 0

    @classmethod
    def start(cls, batch: int, k: int, bos_id: int, device: torch.device | str) -> BeamState:
        """``k`` empty hypotheses per sentence; only the first is alive, so the first step has no duplicates."""
        scores = torch.full((batch, k), float("-inf"), device=device)
        scores[:, 0] = 0.0
        prefixes = torch.full((batch * k, 1), bos_id, dtype=torch.long, device=device)
        return cls(k, list(range(batch)), scores, prefixes, [[] for _ in range(batch)])

    def extend(self, log_probs: torch.Tensor) -> Candidates:
        """Score every one-token extension ``scores + log P(token | prefix)`` (``log_probs [groups * k, vocab]``)
        and keep the ``2k`` best of each sentence; this is the next step."""
        self.step += 1
        groups, k, vocab = len(self.sentences), self.k, log_probs.shape[-1]
        total = (self.scores[:, :, None] + log_probs.view(groups, k, vocab)).view(groups, k * vocab)
        scores, index = top_k(total, min(2 * k, k * vocab))  # torch.topk's result, found block by block
        return Candidates(scores, index // vocab, index % vocab)

    def finish_eos(self, candidates: Candidates, eos_id: int) -> list[list[Finished]]:
        """Candidates among the first ``k`` that end with ``<eos>`` finish (while a sentence has fewer than ``k``
        finished). Returns the hypotheses finished now, per group."""
        new: list[list[Finished]] = [[] for _ in self.sentences]
        k = self.k
        is_eos = (candidates.tokens[:, :k] == eos_id) & torch.isfinite(candidates.scores[:, :k])
        if not bool(is_eos.any()):
            return new
        for group, rank in is_eos.nonzero().tolist():
            sentence = self.sentences[group]
            if len(self.finished[sentence]) < k:
                row = group * k + int(candidates.beams[group, rank])
                hypothesis = Finished(
                    tuple(self.prefixes[row, 1:].tolist()), float(candidates.scores[group, rank]), self.step
                )
                self.finished[sentence].append(hypothesis)
                new[group].append(hypothesis)
        return new

    def advance(self, candidates: Candidates, eos_id: int) -> torch.Tensor:
        """The ``k`` best candidates that do not end with ``<eos>`` become the running hypotheses. Returns the row
        each new row continues, ``[groups * k]`` (always a row of the same sentence)."""
        going_on = candidates.scores.masked_fill(candidates.tokens == eos_id, float("-inf"))
        self.scores, position = going_on.topk(self.k, dim=-1)
        beams, tokens = candidates.beams.gather(1, position), candidates.tokens.gather(1, position)
        rows = (torch.arange(len(self.sentences), device=beams.device)[:, None] * self.k + beams).reshape(-1)
        self.prefixes = torch.cat([self.prefixes[rows], tokens.reshape(-1, 1)], dim=1)
        return rows

    def finish_at_limit(self, limits: Sequence[int]) -> list[list[Finished]]:
        """A sentence at its length limit with fewer than ``k`` finished hypotheses finishes its running ones as
        they are. Returns the hypotheses finished now, per group."""
        new: list[list[Finished]] = [[] for _ in self.sentences]
        for group, sentence in enumerate(self.sentences):
            if len(self.finished[sentence]) >= self.k or self.step < limits[sentence]:
                continue
            for beam, score in enumerate(self.scores[group].tolist()):
                if score != float("-inf"):
                    tokens = tuple(self.prefixes[group * self.k + beam, 1:].tolist())
                    new[group].append(Finished(tokens, score, self.step))
            self.finished[sentence] += new[group]
        return new

    def searching(self, limits: Sequence[int]) -> list[int]:
        """The groups whose sentence goes on: fewer than ``k`` finished and below its length limit."""
        return [
            group
            for group, sentence in enumerate(self.sentences)
            if len(self.finished[sentence]) < self.k and self.step < limits[sentence]
        ]

    def keep(self, groups: list[int]) -> torch.Tensor:
        """Keep only ``groups`` (the other sentences are done); returns the rows kept, ``[len(groups) * k]``."""
        index = torch.tensor(groups, dtype=torch.long, device=self.scores.device)
        rows = (index[:, None] * self.k + torch.arange(self.k, device=index.device)).reshape(-1)
        self.sentences = [self.sentences[group] for group in groups]
        self.scores, self.prefixes = self.scores[index], self.prefixes[rows]
        return rows


@dataclass(frozen=True)
class BeamStepRecord:
    """What an observer of :func:`search_beam` sees at step ``step``, before done sentences leave the batch:
    ``sentences[i]`` the sentence of group ``i``; ``parents [groups * k, step]`` the prefixes that were extended;
    ``candidates`` their ``2k`` best extensions; ``finished[i]`` the hypotheses group ``i`` finished now (those
    ending with ``<eos>`` first, then the running ones at the length limit); ``scores [groups, k]`` and
    ``prefixes [groups * k, 1 + step]`` the running hypotheses after the step."""

    step: int
    sentences: list[int]
    parents: torch.Tensor
    candidates: Candidates
    finished: list[list[Finished]]
    scores: torch.Tensor
    prefixes: torch.Tensor


def search_beam(
    step: DecoderStep,
    limits: Sequence[int],
    beam_size: int,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    device: torch.device | str = "cpu",
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> list[list[Finished]]:
    """Beam search over ``step`` (rows ``group * beam_size + beam``), for ``len(limits)`` sentences at once.

    At every step each running hypothesis is extended by every token and the ``2k`` best extensions of each
    sentence are ranked by summed log-probability. An extension by ``<eos>`` among the first ``k`` ranks
    finishes a hypothesis; the best ``k`` others keep running. A sentence stops when it has ``k`` finished
    hypotheses or reaches its length limit ``limits[sentence]`` (the running ones then finish as they are).
    Returns every sentence's finished hypotheses (:class:`Finished`), in the order they finished.
    """
    state = BeamState.start(len(limits), beam_size, bos_id, device)
    while state.sentences:
        parents = state.prefixes
        candidates = state.extend(F.log_softmax(step(parents), dim=-1))
        finished = state.finish_eos(candidates, eos_id)
        step.select(state.advance(candidates, eos_id), same_sources=True)
        for now, at_limit in zip(finished, state.finish_at_limit(limits)):
            now += at_limit
        if on_step is not None:
            on_step(
                BeamStepRecord(state.step, state.sentences, parents, candidates, finished, state.scores, state.prefixes)
            )
        going_on = state.searching(limits)
        if len(going_on) < len(state.sentences):
            step.select(state.keep(going_on))
    return state.finished


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
    use_cache: bool = True,
    on_step: Callable[[BeamStepRecord], None] | None = None,
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
    use_cache: bool = True,
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> tuple[list[list[int]], list[float]]: ...


@torch.inference_mode()
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
    use_cache: bool = True,
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> list[list[int]] | tuple[list[list[int]], list[float]]:
    """Beam search (:func:`search_beam`) for each sentence of ``src [batch, n]`` (right-padded), with the cache.

    The best finished hypothesis of each sentence wins, ranked by ``log P / lp(length)`` (``alpha`` in
    ``[0, MAX_ALPHA]``; ``beam_size`` in ``[1, MAX_BEAM_SIZE]``). With ``beam_size=1`` this is exactly
    :func:`greedy_decode`. ``use_cache=False`` recomputes the whole prefix at every step (:class:`RecomputeStep`:
    the same hypotheses, slower; the baseline ``bench/decode_speed.py`` measures the cache against, as for
    :func:`greedy_decode`). ``on_step`` observes every step (:class:`BeamStepRecord`; like
    :func:`greedy_decode`, the search runs under :func:`torch.inference_mode`, so its tensors are inference tensors).

    Returns the token ids per sentence (no ``<bos>``/``<eos>``), and with ``return_scores=True`` the pair
    ``(ids, scores)`` (the flag is a literal at each call site, so the type is known statically).
    """
    src = check_search_inputs(model, src, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id)
    check_beam_size(beam_size)
    alpha = check_number("alpha", alpha, low=0, high=MAX_ALPHA)
    check_bool("use_cache", use_cache)
    best = _beam(model, src, beam_size, alpha, max_extra_len, bos_id, eos_id, use_cache=use_cache, on_step=on_step)
    tokens = [list(hypothesis.tokens) for hypothesis in best]
    return (tokens, [hypothesis.score(alpha) for hypothesis in best]) if return_scores else tokens


def _beam(
    model: Transformer,
    src: torch.Tensor,
    beam_size: int,
    alpha: float,
    max_extra_len: int,
    bos_id: int,
    eos_id: int,
    *,
    use_cache: bool = True,
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> list[Finished]:
    """:func:`beam_search` on checked inputs: the best finished hypothesis per sentence."""
    finished = _beam_finished(
        model, src, beam_size, max_extra_len, bos_id, eos_id, use_cache=use_cache, on_step=on_step
    )
    return [best_hypothesis(hypotheses, alpha) for hypotheses in finished]


def _beam_finished(
    model: Transformer,
    src: torch.Tensor,
    beam_size: int,
    max_extra_len: int,
    bos_id: int,
    eos_id: int,
    *,
    use_cache: bool = True,
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> list[list[Finished]]:
    """Every sentence's finished hypotheses (:func:`search_beam` over the model, on checked inputs). Which
    hypotheses finish does not depend on ``alpha``: it only ranks them (:func:`best_hypothesis`), so one search
    serves every ``alpha``."""
    with eval_mode(model):
        step = model_step(model, src, bos_id=bos_id, copies=beam_size, use_cache=use_cache)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        return search_beam(step, limits, beam_size, bos_id=bos_id, eos_id=eos_id, device=src.device, on_step=on_step)


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
    src = check_search_inputs(model, src, bos_id=bos_id, eos_id=eos_id)
    alpha = check_number("alpha", alpha, low=0, high=MAX_ALPHA)
    rows = _check_id_lists("hypotheses", hypotheses, model.config.tgt_vocab_size)
    if len(rows) != src.shape[0]:
        raise ValueError(f"hypotheses must hold one list per source sentence ({src.shape[0]}), got {len(rows)}")
    pad = model.config.pad_id
    tgt_in = pad_sequences([[bos_id, *h] for h in rows], pad).to(src.device)
    tgt_out = pad_sequences([[*h, eos_id] for h in rows], pad).to(src.device)
    with eval_mode(model):
        memory, src_mask = model.encode_unchecked(src)
        logits = model.decode_unchecked(tgt_in, memory, src_mask).float()
    logits[..., pad] = float("-inf")
    logits[..., bos_id] = float("-inf")
    log_probs = F.log_softmax(logits, dim=-1).gather(-1, tgt_out[..., None]).squeeze(-1)
    log_probs = log_probs.masked_fill(tgt_out == pad, 0.0).sum(dim=1)
    return [float(lp) / float(length_penalty(len(h) + 1, alpha)) for lp, h in zip(log_probs, rows)]
