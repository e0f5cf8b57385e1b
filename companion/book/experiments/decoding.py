"""Decoding experiments for the decoding chapter: a beam search that shows its work, sweeps, search errors,
sampling and the memory of the key/value cache.

:func:`traced_beam_search` is :func:`companion.decode.beam_search` with an observer (the same search, so the same
outputs and scores) that keeps what the search itself throws away:

* every *finished* hypothesis with its summed log-probability and the length its length penalty uses, so the
  choice between them can be redone for any ``alpha`` without searching again (in this search ``alpha`` only
  ranks the finished hypotheses: which ones get finished does not depend on it);
* optionally, every step's candidates and surviving hypotheses, for printing the search step by step.

The greedy searches here (without the cache, for a fixed number of steps, sampling) are
:func:`companion.decode.search_greedy` with another step function or another rule to pick a token.

Everything here works on token ids; the chapter turns them into text with the tokenizers of a checkpoint.
Shapes: ``src [batch, n]`` right-padded source ids; ``k`` the beam size; ``V`` the target vocabulary.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from ..._validation import check_bool, check_integer, check_number, check_positive_int
from ...data import BOS_ID, EOS_ID, pad_sequences
from ...decode import (
    BeamStepRecord,
    Finished,
    beam_search,
    best_hypothesis,
    check_search_inputs,
    greedy_decode,
    max_output_lengths,
    model_step,
    score_hypotheses,
    search_greedy,
)
from ...model import Transformer, eval_mode

__all__ = [
    "BeamStep",
    "BeamTrace",
    "traced_beam_search",
    "traced_beam_search_corpus",
    "greedy_recompute",
    "decode_fixed_steps",
    "sample_decode",
    "top_k_filter",
    "cache_nbytes",
    "length_sorted_batches",
    "score_corpus",
    "kv_cache_bytes",
    "parent_indices",
    "replay_beam",
    "StepRow",
    "beam_step_rows",
    "within_sentence_length_offsets",
    "shorter_wins",
]


# ----------------------------------------------------------------------------------------------------------
# The beam search, with its work shown
# ----------------------------------------------------------------------------------------------------------
@dataclass
class BeamStep:
    """One step of the search for one sentence.

    ``candidates``: the ``2k`` best one-token extensions, best first, as ``(tokens, log_prob, from_beam)``;
    ``finished``: the candidates that ended with ``<eos>`` and were kept as finished hypotheses;
    ``alive``: the ``k`` hypotheses that go on, as ``(tokens, log_prob)``, best first.
    """

    step: int
    candidates: list[tuple[tuple[int, ...], float, int]]
    finished: list[Finished]
    alive: list[tuple[tuple[int, ...], float]]


@dataclass
class BeamTrace:
    """Everything the search found for one sentence: its finished hypotheses (at most ``k``, or up to ``2k``
    when the length limit finishes the running ones too) and, when recorded, every step."""

    beam_size: int
    finished: list[Finished] = field(default_factory=list)
    steps: list[BeamStep] = field(default_factory=list)

    def best(self, alpha: float) -> Finished:
        """The finished hypothesis with the highest ``score(alpha)`` (the first one on a tie, as the core does)."""
        return best_hypothesis(self.finished, alpha)

    @property
    def full(self) -> bool:
        return len(self.finished) >= self.beam_size


class _Tracer:
    """An observer of :func:`companion.decode.beam_search` that keeps every finished hypothesis of each sentence
    and, with ``record_steps``, each step's candidates and survivors (:class:`BeamStep`)."""

    def __init__(self, beam_size: int, record_steps: bool) -> None:
        self.beam_size, self.record_steps = beam_size, record_steps
        self.traces: dict[int, BeamTrace] = {}

    def __call__(self, record: BeamStepRecord) -> None:
        for group, sentence in enumerate(record.sentences):
            self.traces.setdefault(sentence, BeamTrace(self.beam_size)).finished += record.finished[group]
        if self.record_steps:
            self._record_steps(record)

    def _record_steps(self, record: BeamStepRecord) -> None:
        k = self.beam_size
        parents, prefixes = record.parents[:, 1:].tolist(), record.prefixes[:, 1:].tolist()
        cand_scores, cand_beams, cand_tokens = (
            values.tolist() for values in (record.candidates.scores, record.candidates.beams, record.candidates.tokens)
        )
        for group, sentence in enumerate(record.sentences):
            candidates = [
                (tuple(parents[group * k + beam]) + (token,), score, beam)
                for score, beam, token in zip(cand_scores[group], cand_beams[group], cand_tokens[group])
            ]
            alive = [
                (tuple(prefixes[group * k + beam]), score)
                for beam, score in enumerate(record.scores[group].tolist())
                if score != float("-inf")
            ]
            finished = [hypothesis for hypothesis in record.finished[group] if hypothesis.ended_with_eos]
            self.traces[sentence].steps.append(BeamStep(record.step, candidates, finished, alive))


def traced_beam_search(
    model: Transformer,
    src: torch.Tensor,
    beam_size: int = 4,
    *,
    max_extra_len: int = 50,
    record_steps: bool = False,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[BeamTrace]:
    """:func:`companion.decode.beam_search` over ``src [batch, n]`` with an observer that returns, per sentence,
    all finished hypotheses (and with ``record_steps`` every step's candidates and survivors).

    The rules are the core's: per sentence, extend each of the ``k`` running hypotheses by every token; take the
    ``2k`` best extensions by summed log-probability; those among the first ``k`` that end in ``<eos>`` are
    finished (until ``k`` are finished); the ``k`` best that do not end in ``<eos>`` go on. A sentence stops with
    ``k`` finished hypotheses, or at its length limit (source length + ``max_extra_len``), where its running
    hypotheses are finished as they are. ``trace.best(alpha)`` then equals the core's output with that ``alpha``
    (``alpha`` only ranks the finished hypotheses: which ones finish does not depend on it).
    """
    check_bool("record_steps", record_steps)
    tracer = _Tracer(beam_size, record_steps)
    beam_search(
        model, src, beam_size=beam_size, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id, on_step=tracer
    )
    return [tracer.traces[sentence] for sentence in range(len(tracer.traces))]


def length_sorted_batches(sources: Sequence[Sequence[int]], batch_size: int) -> Iterable[list[int]]:
    """Indices of ``sources`` in batches of ``batch_size``, longest first (as
    :func:`companion.decode.translate_ids`)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def traced_beam_search_corpus(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    beam_size: int,
    *,
    batch_size: int = 100,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[list[BeamTrace], float]:
    """:func:`traced_beam_search` over a corpus of id lists (each ending in ``<eos>``), in length-sorted batches.

    Returns the traces in the order of ``sources`` and the wall time of the search in seconds.
    """
    check_positive_int("batch_size", batch_size)
    traces: list[BeamTrace | None] = [None] * len(sources)
    start = time.perf_counter()
    for chunk in length_sorted_batches(sources, batch_size):
        src = pad_sequences([sources[i] for i in chunk], model.config.pad_id)
        for i, trace in zip(
            chunk, traced_beam_search(model, src, beam_size, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id)
        ):
            traces[i] = trace
    return traces, time.perf_counter() - start  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------------------
# One step of the beam, as a table (for the chapter's step-by-step explorable)
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepRow:
    """One of the ``2k`` best candidates of a step: ``tokens`` (the whole extended prefix, no ``<bos>``; the last
    token may be ``<eos>``), its summed log-probability ``log_prob``, ``parent`` (its prefix's rank in the beam
    before the step, 0 = best) and ``fate``: ``"kept"`` (goes on running), ``"finished"`` (ended with ``<eos>``
    and was kept as a finished hypothesis) or ``"pruned"`` (dropped: ranked below the beam, or an ``<eos>``
    candidate outside the first ``k``)."""

    tokens: tuple[int, ...]
    log_prob: float
    parent: int
    fate: str


def beam_step_rows(steps: Sequence[BeamStep], step: int, *, eos_id: int = EOS_ID) -> list[StepRow]:
    """The candidates of step ``step`` (1-based) of one sentence's recorded search (``traced_beam_search(...,
    record_steps=True)[i].steps``), best first, each with what the search did with it (:class:`StepRow`)."""
    check_positive_int("step", step)
    if step > len(steps):
        raise ValueError(f"step must be at most the number of recorded steps ({len(steps)}), got {step}")
    record = steps[step - 1]
    before = [()] if step == 1 else [tokens for tokens, _ in steps[step - 2].alive]
    rank = {tokens: i for i, tokens in enumerate(before)}
    kept = {tokens for tokens, _ in record.alive}
    finished = {hypothesis.tokens for hypothesis in record.finished}
    rows = []
    for tokens, log_prob, _ in record.candidates:
        if tokens in kept:
            fate = "kept"
        elif tokens[-1] == eos_id and tokens[:-1] in finished:  # an <eos> candidate kept as a finished hypothesis
            fate = "finished"
            finished.discard(tokens[:-1])
        else:
            fate = "pruned"
        rows.append(StepRow(tokens, log_prob, rank.get(tokens[:-1], -1), fate))
    return rows


# ----------------------------------------------------------------------------------------------------------
# The cache under beam search: reorder by parent
# ----------------------------------------------------------------------------------------------------------
def parent_indices(steps: Sequence[BeamStep]) -> list[list[int]]:
    """Per recorded step of one sentence, the parent of each surviving hypothesis: the index, in the previous
    step's ``alive`` list (before step 1: the one empty prefix), of the prefix it extends.

    ``parents[s][i]`` is the row that hypothesis ``i`` of step ``s + 1`` continues, so the key/value cache must be
    reordered with ``cache.reorder(torch.tensor(parents[s]))`` before the decoder is fed its newest tokens.
    """
    previous: list[tuple[int, ...]] = [()]
    parents = []
    for record in steps:
        where = {tokens: i for i, tokens in enumerate(previous)}
        row = []
        for tokens, _ in record.alive:
            if tokens[:-1] not in where:
                raise ValueError(f"step {record.step}: hypothesis {tokens} extends no hypothesis of the step before")
            row.append(where[tokens[:-1]])
        parents.append(row)
        previous = [tokens for tokens, _ in record.alive]
    return parents


@torch.no_grad()
def replay_beam(
    model: Transformer,
    src: torch.Tensor,
    steps: Sequence[BeamStep],
    *,
    use_cache: bool,
    reorder: bool = True,
    bos_id: int = BOS_ID,
) -> list[torch.Tensor]:
    """The next-token logits ``[rows, V]`` of every step's surviving hypotheses of one sentence ``src [1, n]``
    (``steps`` recorded by :func:`traced_beam_search`), computed again in one of three ways:

    * ``use_cache=False``: the decoder over each whole prefix ``[rows, t]`` (the reference);
    * ``use_cache=True``: one :class:`~companion.model.KVCache` fed only the newest token of each hypothesis;
      before each step its rows are reordered by :func:`parent_indices` (``cache.reorder``), so that row ``i``
      holds the keys and values of hypothesis ``i``'s own prefix: the same logits as recomputing;
    * ``use_cache=True, reorder=False``: the cache is left in place (row ``i`` keeps what former row ``i``
      held; a changed row count keeps the first rows, and the first step still copies the ``<bos>`` row):
      the logits go wrong as soon as a hypothesis extends a parent in another row.

    Element ``s`` of the result scores the continuations of ``steps[s].alive``.
    """
    src = check_search_inputs(model, src, bos_id=bos_id)
    if src.shape[0] != 1:
        raise ValueError(f"src must hold one sentence [1, n], got shape {list(src.shape)}")
    check_bool("use_cache", use_cache)
    check_bool("reorder", reorder)
    parents = parent_indices(steps)
    out: list[torch.Tensor] = []
    with eval_mode(model):
        memory, src_mask = model.encode(src)  # [1, n, d_model], [1, 1, 1, n]
        cache = model.new_cache()
        if use_cache:
            model.decode(torch.full((1, 1), bos_id, device=src.device), memory, src_mask, cache=cache)
        previous_rows = 1
        for record, rows_parents in zip(steps, parents):
            rows = len(record.alive)
            tokens = torch.tensor([list(t) for t, _ in record.alive], device=src.device)  # [rows, step]
            mem, mask = memory.expand(rows, -1, -1), src_mask.expand(rows, -1, -1, -1)
            if not use_cache:
                prefixes = torch.cat([torch.full((rows, 1), bos_id, device=src.device), tokens], dim=1)
                out.append(model.decode(prefixes, mem, mask)[:, -1])
                continue
            if reorder or previous_rows == 1:
                index = torch.tensor(rows_parents, device=src.device)
            else:
                index = torch.arange(rows, device=src.device).clamp(max=previous_rows - 1)
            cache.reorder(index)
            out.append(model.decode(tokens[:, -1:], mem, mask, cache=cache)[:, -1])
            previous_rows = rows
    return out


# ----------------------------------------------------------------------------------------------------------
# The length bias, compared within each sentence
# ----------------------------------------------------------------------------------------------------------
def within_sentence_length_offsets(traces: Sequence[BeamTrace]) -> list[tuple[int, float, float]]:
    """For every finished hypothesis of every sentence whose finished hypotheses have at least two different
    lengths: ``(sentence, length - the sentence's mean length, log_prob - the sentence's mean log_prob)``.

    Subtracting each sentence's means compares hypotheses only with others *of the same sentence*, so a long
    source (long and improbable outputs alike) cannot pass for a length effect, as it would when hypotheses of all
    sentences are pooled.
    """
    offsets = []
    for sentence, trace in enumerate(traces):
        lengths = [h.length for h in trace.finished]
        if len(set(lengths)) < 2:
            continue
        mean_length = sum(lengths) / len(lengths)
        mean_log_prob = sum(h.log_prob for h in trace.finished) / len(lengths)
        offsets += [(sentence, h.length - mean_length, h.log_prob - mean_log_prob) for h in trace.finished]
    return offsets


def shorter_wins(traces: Sequence[BeamTrace], alpha: float) -> tuple[int, int]:
    """Over every pair of finished hypotheses of one sentence with different lengths: ``(pairs in which the
    shorter one has the higher score(alpha), all such pairs)``. Ties count as no win."""
    check_number("alpha", alpha, low=0)
    wins = pairs = 0
    for trace in traces:
        finished = trace.finished
        for i, a in enumerate(finished):
            for b in finished[i + 1 :]:
                if a.length == b.length:
                    continue
                short, long = (a, b) if a.length < b.length else (b, a)
                pairs += 1
                wins += short.score(alpha) > long.score(alpha)
    return wins, pairs


# ----------------------------------------------------------------------------------------------------------
# Greedy search with and without the key/value cache
# ----------------------------------------------------------------------------------------------------------
def greedy_recompute(
    model: Transformer, src: torch.Tensor, *, max_extra_len: int = 50, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> list[list[int]]:
    """Greedy search *without* a cache: at every step the decoder reruns over the whole prefix ``[batch, t]`` and
    projects its last position onto the vocabulary (:class:`companion.decode.RecomputeStep`).

    Same rules and outputs as :func:`companion.decode.greedy_decode` (which feeds one token per step and caches the
    keys and values of the earlier ones); the baseline the cache is measured against.
    """
    return greedy_decode(model, src, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id, use_cache=False)


@torch.no_grad()
def decode_fixed_steps(
    model: Transformer, src: torch.Tensor, steps: int, *, use_cache: bool, bos_id: int = BOS_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of exactly ``steps`` tokens per sentence (``<eos>`` does not stop it), with or without
    the key/value cache, for timing against the output length.

    Returns ``(tokens [batch, steps], logits [batch, steps, V])``: the chosen tokens and, per step, the logits
    they were chosen from (``<pad>``/``<bos>`` at -inf), so that the two ways can be compared exactly.
    """
    src = check_search_inputs(model, src, bos_id=bos_id)
    check_positive_int("steps", steps)
    if steps >= model.config.max_len:
        raise ValueError(f"steps must be below the model's max_len={model.config.max_len}, got {steps}")
    check_bool("use_cache", use_cache)
    logits: list[torch.Tensor] = []
    with eval_mode(model):
        step = model_step(model, src, bos_id=bos_id, use_cache=use_cache)
        tokens = search_greedy(
            step,
            [steps] * src.shape[0],
            bos_id=bos_id,
            eos_id=None,  # no end token: every sentence runs for exactly `steps` tokens
            device=src.device,
            on_step=lambda record: logits.append(record.logits),
        )
    return torch.tensor(tokens, device=src.device), torch.stack(logits, dim=1)


# ----------------------------------------------------------------------------------------------------------
# The key/value cache: what it costs
# ----------------------------------------------------------------------------------------------------------
def cache_nbytes(cache: object) -> int:
    """Bytes of all distinct tensors reachable from ``cache`` (its attributes, lists, tuples and dicts).

    Works without knowing how the cache object is organised, so it measures whatever the model keeps.
    """
    seen: set[int] = set()
    visited: set[int] = set()
    total = 0

    def visit(value: object) -> None:
        nonlocal total
        if isinstance(value, torch.Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                total += value.numel() * value.element_size()
            return
        if id(value) in visited or isinstance(value, (str, bytes, int, float, bool, type(None))):
            return
        visited.add(id(value))
        if isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple, set)):
            for item in value:
                visit(item)
        elif hasattr(value, "__dict__"):
            for item in vars(value).values():
                visit(item)

    visit(cache)
    return total


def kv_cache_bytes(
    num_layers: int, rows: int, tgt_len: int, src_len: int, d_model: int, bytes_per_element: int = 4
) -> int:
    """Bytes a decoder's key/value cache holds after ``tgt_len`` steps.

    Per layer and per row (sentence, or beam of a sentence): keys and values of the ``tgt_len`` decoded positions
    for self-attention and of the ``src_len`` source positions for cross-attention, each ``d_model`` wide
    (``heads * d_head``): ``2 * num_layers * rows * (tgt_len + src_len) * d_model * bytes_per_element``.
    """
    for name, value in (
        ("num_layers", num_layers),
        ("rows", rows),
        ("d_model", d_model),
        ("bytes_per_element", bytes_per_element),
    ):
        check_positive_int(name, value)
    for name, value in (("tgt_len", tgt_len), ("src_len", src_len)):
        check_integer(name, value, minimum=0)
    return 2 * num_layers * rows * (tgt_len + src_len) * d_model * bytes_per_element


# ----------------------------------------------------------------------------------------------------------
# Sampling, the contrast to search
# ----------------------------------------------------------------------------------------------------------
def top_k_filter(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row of ``logits [rows, V]``, set the others to -inf
    (``None``: keep all). Ties at the k-th value are all kept."""
    if top_k is None:
        return logits
    check_positive_int("top_k", top_k)
    if top_k >= logits.shape[-1]:
        return logits
    threshold = logits.topk(top_k, dim=-1).values[:, -1:]  # [rows, 1]
    return logits.masked_fill(logits < threshold, float("-inf"))


@torch.no_grad()
def sample_decode(
    model: Transformer,
    src: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    max_extra_len: int = 50,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> list[list[int]]:
    """Ancestral sampling with the key/value cache: at every step draw the next token from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` most probable tokens.

    ``src [batch, n]``; returns one id list per sentence (no ``<bos>``/``<eos>``), stopping at ``<eos>`` or the
    length limit. ``top_k=1`` is greedy search; the draws use ``generator`` (seed it for repeatable output). The
    loop is :func:`companion.decode.search_greedy`'s, with a draw in place of the argmax.
    """
    src = check_search_inputs(model, src, max_extra_len=max_extra_len, bos_id=bos_id, eos_id=eos_id)
    temperature = check_number("temperature", temperature, low=0, low_inclusive=False)
    if top_k is not None:
        check_positive_int("top_k", top_k)

    def draw(logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(top_k_filter(logits / temperature, top_k), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [rows]

    with eval_mode(model):
        step = model_step(model, src, bos_id=bos_id)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        return search_greedy(step, limits, bos_id=bos_id, eos_id=eos_id, device=src.device, pick=draw)


# ----------------------------------------------------------------------------------------------------------
# Search errors and model errors
# ----------------------------------------------------------------------------------------------------------
def score_corpus(
    model: Transformer,
    sources: Sequence[Sequence[int]],
    hypotheses: Sequence[Sequence[int]],
    *,
    alpha: float,
    batch_size: int = 200,
) -> list[float]:
    """:func:`companion.decode.score_hypotheses` over a corpus: the normalised model score ``log P(y | x) / lp(|y|)``
    of each hypothesis (ids without ``<bos>``/``<eos>``) given its source (ids ending in ``<eos>``)."""
    if len(sources) != len(hypotheses):
        raise ValueError(f"sources and hypotheses must be equally long, got {len(sources)} and {len(hypotheses)}")
    check_positive_int("batch_size", batch_size)
    scores: list[float] = [0.0] * len(sources)
    for chunk in length_sorted_batches(sources, batch_size):
        src = pad_sequences([sources[i] for i in chunk], model.config.pad_id)
        for i, value in zip(chunk, score_hypotheses(model, src, [list(hypotheses[i]) for i in chunk], alpha=alpha)):
            scores[i] = value
    return scores
