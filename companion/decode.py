"""Decoding a trained Transformer: greedy search, beam search, and text-to-text translation.

There is one greedy search (:func:`search_greedy`) and one beam search (:func:`search_beam`). Both run a batch
of source sentences at once over a **step function** (:class:`DecoderStep`): given the prefixes of the rows
still decoding (``<bos>`` and the tokens chosen so far), it returns the logits of each row's next token, and it
is told when rows are reordered or dropped. What the step computes is its own business:

* :class:`CachedStep` feeds the decoder only the newest token and reuses the keys and values of the earlier
  positions from a :class:`~companion.model.KVCache` (what :func:`greedy_decode` and :func:`beam_search` use);
* :class:`RecomputeStep` reruns the decoder over the whole prefix at every step, the baseline the cache is
  measured against (``greedy_decode(..., use_cache=False)``);
* :mod:`companion.export` steps through the exported ONNX graphs, the chapter's experiments through a model
  with their own rules.

An optional observer (``on_step=``) sees every step: the candidates, the survivors and the hypotheses that
finished (the decoding chapter's traced beam search is :func:`beam_search` with an observer). Sentences that
are finished drop out of the batch (the step function is told), so a sentence's result does not depend on
what else is in its batch.

The paper's settings (section 6.1) are the defaults: beam size 4, length penalty alpha = 0.6 and at most
``input length + 50`` output tokens. The length penalty is GNMT's (Wu et al., 2016):
``lp(length) = ((5 + length) / 6) ** alpha``, and a finished hypothesis is ranked by
``log P(y | x) / lp(|y|)``, where ``|y|`` counts the output tokens including the final ``<eos>``.

Neither search emits ``<pad>`` or ``<bos>``; the returned id lists hold neither ``<bos>`` nor ``<eos>``. The
inputs are checked once, at the public entry points; nothing is checked again at each step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, overload

import torch
import torch.nn.functional as F

from ._validation import check_bool, check_id_list, check_integer, check_number, check_positive_int, check_token_ids
from .data import BOS_ID, EOS_ID, Tokenizer, pad_sequences
from .devices import resolve_device
from .errors import NonFiniteOutputError
from .model import Transformer, eval_mode

__all__ = [
    "MAX_ALPHA",
    "length_penalty",
    "max_output_lengths",
    "check_search_inputs",
    "DecoderStep",
    "ModelStep",
    "CachedStep",
    "RecomputeStep",
    "model_step",
    "GreedyStepRecord",
    "search_greedy",
    "greedy_decode",
    "Finished",
    "best_hypothesis",
    "Candidates",
    "BeamState",
    "BeamStepRecord",
    "search_beam",
    "beam_search",
    "score_hypotheses",
    "translate",
    "translate_ids",
]

# The largest length-penalty alpha accepted (here and by the command line's --alpha): the paper tuned alpha in
# [0.6, 1.0]; far above that the penalty ((5 + length) / 6) ** alpha only ever prefers the longest hypothesis
# (and from alpha ~ 320 it overflows a float).
MAX_ALPHA = 10.0
_MAX_EXTRA_LEN = 50  # the paper's length limit: input length + 50 (the searches' default)


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


def check_search_inputs(
    model: object, src: object, *, max_extra_len: object = 0, bos_id: object = BOS_ID, eos_id: object = EOS_ID
) -> torch.Tensor:
    """The checks a search runs once, at its entry: ``model`` a companion Transformer, ``src [batch, n]`` source
    ids in its vocabulary, ``max_extra_len`` a non-negative integer, ``bos_id``/``eos_id`` target token ids.

    Returns ``src``. Raises TypeError or ValueError naming the argument.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    src = check_token_ids("src", src, model.config.src_vocab_size)
    check_integer("max_extra_len", max_extra_len, minimum=0)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        check_integer(f"{name} (a target token id)", value, minimum=0, maximum=model.config.tgt_vocab_size - 1)
    return src


def _check_id_lists(name: str, rows: object, vocab_size: int) -> list[list[int]]:
    """Check a sequence of token-id lists (one per sentence); each is checked by ``check_id_list``."""
    if isinstance(rows, (str, bytes, torch.Tensor)) or not isinstance(rows, Sequence):
        raise TypeError(f"{name} must be a list of token-id lists (one per sentence), got {type(rows).__name__}")
    return [check_id_list(f"{name}[{i}]", row, vocab_size) for i, row in enumerate(rows)]


# ---------------------------------------------------------------------------------------------------------
# Step functions: the next token's logits for every row still decoding
# ---------------------------------------------------------------------------------------------------------
class DecoderStep(Protocol):
    """What a search asks of the model at each step. A row is one hypothesis of one sentence."""

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        """``prefixes [rows, t]`` (``<bos>`` and the tokens so far) -> next-token logits ``[rows, vocab]`` (float32),
        with the tokens that are never generated (``<pad>``, ``<bos>``) at -inf."""
        ...

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        """From now on, row ``i`` is former row ``rows[i]`` (``rows [new_rows]``: dropped rows are gone, a row may be
        repeated). ``same_sources``: every row keeps reading the source sentence it read (beams of a sentence
        swapping their prefixes), so nothing that depends on the source alone has to move."""
        ...


def _never_generated(logits: torch.Tensor, pad_id: int, bos_id: int) -> torch.Tensor:
    """``logits [rows, vocab]`` as float32 with ``<pad>`` and ``<bos>`` at -inf; refuses inf or nan scores."""
    logits = logits.float()
    if not bool(torch.isfinite(logits).all()):
        raise NonFiniteOutputError(
            "the model's next-token scores hold inf or nan, so no token can be chosen: its weights are broken "
            "(a diverged run?). Decode with a checkpoint whose weights are finite."
        )
    logits[:, pad_id] = float("-inf")
    logits[:, bos_id] = float("-inf")
    return logits


class ModelStep:
    """A step function over a :class:`~companion.model.Transformer` (the base of :class:`CachedStep` and
    :class:`RecomputeStep`): ``memory [rows, n, d_model]`` and ``src_mask [rows, 1, 1, n]`` are the encoder's
    output for each row; ``<pad>`` and ``bos_id`` are never generated."""

    def __init__(self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, *, bos_id: int) -> None:
        self.model, self.memory, self.src_mask, self.bos_id = model, memory, src_mask, bos_id

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        if not same_sources:
            self.memory, self.src_mask = self.memory[rows], self.src_mask[rows]


class CachedStep(ModelStep):
    """Incremental decoding: each step feeds only the newest token ``prefixes[:, -1:]``; the keys and values of
    the earlier positions come from a :class:`~companion.model.KVCache`."""

    def __init__(self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, *, bos_id: int) -> None:
        super().__init__(model, memory, src_mask, bos_id=bos_id)
        self.cache = model.new_cache()

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        logits = self.model.decode_unchecked(prefixes[:, -1:], self.memory, self.src_mask, cache=self.cache)
        return _never_generated(logits[:, -1], self.model.config.pad_id, self.bos_id)

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        self.cache.reorder(rows, include_cross=not same_sources)  # cross-attention keys depend on the source only
        super().select(rows, same_sources=same_sources)


class RecomputeStep(ModelStep):
    """Decoding without a cache: each step reruns the decoder over the whole prefix ``[rows, t]`` and projects
    only its last position onto the vocabulary (as a loop around a plain ``nn.Transformer`` does). The same
    tokens as :class:`CachedStep`; the baseline that the cache is measured against."""

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        logits = self.model.decode_unchecked(prefixes, self.memory, self.src_mask, last_only=True)
        return _never_generated(logits[:, -1], self.model.config.pad_id, self.bos_id)


def model_step(
    model: Transformer, src: torch.Tensor, *, bos_id: int = BOS_ID, copies: int = 1, use_cache: bool = True
) -> ModelStep:
    """Encode ``src [batch, n]`` (ids already checked) and return the step function over ``batch * copies`` rows
    (row ``sentence * copies + j``: ``copies`` hypotheses per sentence, for beam search)."""
    memory, src_mask = model.encode_unchecked(src)  # [batch, n, d_model], [batch, 1, 1, n]
    if copies > 1:
        memory, src_mask = memory.repeat_interleave(copies, dim=0), src_mask.repeat_interleave(copies, dim=0)
    return (CachedStep if use_cache else RecomputeStep)(model, memory, src_mask, bos_id=bos_id)


# ---------------------------------------------------------------------------------------------------------
# Greedy search
# ---------------------------------------------------------------------------------------------------------
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
    """The most probable token of each row (the argmax of the logits: a softmax would not change which one)."""
    return logits.argmax(dim=-1)


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


@torch.no_grad()
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


# ---------------------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------------------
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
        scores, index = total.topk(min(2 * k, k * vocab), dim=-1)
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
    on_step: Callable[[BeamStepRecord], None] | None = None,
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
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> list[list[int]] | tuple[list[list[int]], list[float]]:
    """Beam search (:func:`search_beam`) for each sentence of ``src [batch, n]`` (right-padded), with the cache.

    The best finished hypothesis of each sentence wins, ranked by ``log P / lp(length)`` (``alpha`` in
    ``[0, MAX_ALPHA]``). With ``beam_size=1`` this is exactly :func:`greedy_decode`. ``on_step`` observes every
    step (:class:`BeamStepRecord`).

    Returns the token ids per sentence (no ``<bos>``/``<eos>``), and with ``return_scores=True`` the pair
    ``(ids, scores)`` (the flag is a literal at each call site, so the type is known statically).
    """
    src = check_search_inputs(model, src, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id)
    check_positive_int("beam_size", beam_size)
    alpha = check_number("alpha", alpha, low=0, high=MAX_ALPHA)
    best = _beam(model, src, beam_size, alpha, max_extra_len, bos_id, eos_id, on_step=on_step)
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
    on_step: Callable[[BeamStepRecord], None] | None = None,
) -> list[Finished]:
    """:func:`beam_search` on checked inputs: the best finished hypothesis per sentence."""
    with eval_mode(model):
        step = model_step(model, src, bos_id=bos_id, copies=beam_size)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        finished = search_beam(
            step, limits, beam_size, bos_id=bos_id, eos_id=eos_id, device=src.device, on_step=on_step
        )
    return [best_hypothesis(hypotheses, alpha) for hypotheses in finished]


# ---------------------------------------------------------------------------------------------------------
# Scoring a given output, and translating
# ---------------------------------------------------------------------------------------------------------
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


def _check_translation_options(
    model: object, beam_size: object, alpha: object, batch_size: object, bos_id: object, eos_id: object
) -> float:
    """The checks of :func:`translate` and :func:`translate_ids`; returns ``alpha`` as a float."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    check_positive_int("batch_size", batch_size)
    check_positive_int("beam_size", beam_size)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        check_integer(f"{name} (a target token id)", value, minimum=0, maximum=model.config.tgt_vocab_size - 1)
    return check_number("alpha", alpha, low=0, high=MAX_ALPHA)


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
    if not isinstance(tgt_tokenizer, Tokenizer):
        raise TypeError(f"tgt_tokenizer must be a companion Tokenizer, got {type(tgt_tokenizer).__name__}")
    bos_id, eos_id = tgt_tokenizer.bos_id, tgt_tokenizer.eos_id
    alpha = _check_translation_options(model, beam_size, alpha, batch_size, bos_id, eos_id)
    sources = _encode_sources(list(sentences), src_tokenizer, model.config.max_len)
    ids = _decode_sources(model, sources, beam_size, alpha, batch_size, device, bos_id, eos_id)
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
    alpha = _check_translation_options(model, beam_size, alpha, batch_size, bos_id, eos_id)
    rows = _check_id_lists("sources", sources, model.config.src_vocab_size)
    for i, row in enumerate(rows):
        if not row:
            raise ValueError(f"sources[{i}] is empty: every source needs at least its <eos> id")
    return _decode_sources(model, rows, beam_size, alpha, batch_size, device, bos_id, eos_id)


def _decode_sources(
    model: Transformer,
    rows: list[list[int]],
    beam_size: int,
    alpha: float,
    batch_size: int,
    device: torch.device | str | None,
    bos_id: int,
    eos_id: int,
) -> list[list[int]]:
    """Decode checked source id lists in length-sorted batches; the outputs in the order of ``rows``."""
    device = resolve_device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]), reverse=True)
    outputs: list[list[int]] = [[] for _ in rows]
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src = pad_sequences([rows[i] for i in chunk], model.config.pad_id).to(device)
            if beam_size == 1:
                hypotheses = _greedy(model, src, _MAX_EXTRA_LEN, bos_id, eos_id)
            else:
                best = _beam(model, src, beam_size, alpha, _MAX_EXTRA_LEN, bos_id, eos_id)
                hypotheses = [list(hypothesis.tokens) for hypothesis in best]
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
