"""Decoding experiments for the decoding chapter: a beam search that shows its work, sweeps, search errors,
sampling and the memory of the key/value cache.

:func:`traced_beam_search` follows exactly the rules of :func:`companion.decode.beam_search` (same candidates, same
finishing and stopping rules, so the same outputs and scores), but keeps what the core search throws away:

* every *finished* hypothesis with its summed log-probability and the length its length penalty uses, so the
  choice between them can be redone for any ``alpha`` without searching again (in this search ``alpha`` only
  ranks the finished hypotheses: which ones get finished does not depend on it);
* optionally, every step's candidates and surviving hypotheses, for printing the search step by step.

Everything here works on token ids; the chapter turns them into text with the tokenizers of a checkpoint.
Shapes: ``src [batch, n]`` right-padded source ids; ``k`` the beam size; ``V`` the target vocabulary.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..._validation import check_positive_int, check_token_ids
from ...data import BOS_ID, EOS_ID, pad_sequences
from ...decode import length_penalty, max_output_lengths, record_greedy_step, score_hypotheses
from ...model import Transformer, eval_mode

__all__ = [
    "Finished",
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
]


# ----------------------------------------------------------------------------------------------------------
# The beam search, with its work shown
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finished:
    """A finished hypothesis: ``tokens`` (no ``<bos>``/``<eos>``), their summed log-probability ``log_prob``
    (``<eos>`` included when it ended with one) and ``length``, the length its penalty uses (the step at which
    it finished: ``len(tokens) + 1`` when it ended with ``<eos>``, ``len(tokens)`` at the length limit)."""

    tokens: tuple[int, ...]
    log_prob: float
    length: int

    def score(self, alpha: float) -> float:
        """The beam's ranking score ``log_prob / lp(length)`` with GNMT's penalty ``((5 + length) / 6) ** alpha``."""
        return self.log_prob / float(length_penalty(self.length, alpha))


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
        return max(self.finished, key=lambda hyp: hyp.score(alpha))

    @property
    def full(self) -> bool:
        return len(self.finished) >= self.beam_size


def _check_model_and_src(model: object, src: object) -> torch.Tensor:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    return check_token_ids("src", src, model.config.src_vocab_size)


def _check_max_extra_len(max_extra_len: object) -> None:
    if isinstance(max_extra_len, bool) or not isinstance(max_extra_len, int) or max_extra_len < 0:
        raise ValueError(f"max_extra_len must be a non-negative integer, got {max_extra_len!r}")


def _next_log_probs(
    model: Transformer, last: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache, bos_id: int
) -> torch.Tensor:
    """``[rows, V]`` log-probabilities of the next token given the newest tokens ``last [rows, 1]`` and the
    ``cache``; ``<pad>`` and ``<bos>`` are never generated (the same rule as the core searches)."""
    logits = model.decode(last, memory, src_mask, cache=cache)[:, -1].float()
    logits[:, model.config.pad_id] = float("-inf")
    logits[:, bos_id] = float("-inf")
    return F.log_softmax(logits, dim=-1)


@torch.no_grad()
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
    """Beam search over ``src [batch, n]`` that returns, per sentence, all finished hypotheses (and with
    ``record_steps`` every step's candidates and survivors).

    The rules are those of :func:`companion.decode.beam_search`: per sentence, extend each of the ``k`` running
    hypotheses by every token; take the ``2k`` best extensions by summed log-probability; those among the first
    ``k`` that end in ``<eos>`` are finished (until ``k`` are finished); the ``k`` best that do not end in
    ``<eos>`` go on. A sentence stops with ``k`` finished hypotheses, or at its length limit (source length +
    ``max_extra_len``), where its running hypotheses are finished as they are. ``trace.best(alpha)`` then equals
    the core's output with that ``alpha``.
    """
    src = _check_model_and_src(model, src)
    check_positive_int("beam_size", beam_size)
    _check_max_extra_len(max_extra_len)
    k = beam_size
    with eval_mode(model):
        memory, src_mask = model.encode(src)  # [S, n, d_model], [S, 1, 1, n]
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        memory, src_mask = memory.repeat_interleave(k, dim=0), src_mask.repeat_interleave(k, dim=0)
        traces = [BeamTrace(k) for _ in range(src.shape[0])]
        active = list(range(src.shape[0]))  # sentences still searching; rows are (position in active) * k + beam
        scores = torch.full((len(active), k), float("-inf"))
        scores[:, 0] = 0.0  # the k beams start identical: keep one, so the first step has no duplicates
        tokens = src.new_full((len(active) * k, 1), bos_id)  # [rows, 1 + step]: <bos> and the tokens so far
        cache = model.new_cache()
        step = 0
        while active:
            step += 1
            log_probs = _next_log_probs(model, tokens[:, -1:], memory, src_mask, cache, bos_id)  # [rows, V]
            vocab = log_probs.shape[-1]
            total = scores[:, :, None] + log_probs.view(len(active), k, vocab)  # [S, k, V]
            cand_scores, flat = total.view(len(active), k * vocab).topk(min(2 * k, k * vocab), dim=-1)  # [S, 2k]
            cand_beams, cand_tokens = flat // vocab, flat % vocab
            # the k best candidates that do not end in <eos> go on
            going_on = cand_scores.masked_fill(cand_tokens == eos_id, float("-inf")).topk(k, dim=-1).indices
            new_scores = cand_scores.gather(1, going_on)  # [S, k]
            new_beams, new_tokens = cand_beams.gather(1, going_on), cand_tokens.gather(1, going_on)
            rows = (torch.arange(len(active))[:, None] * k + new_beams).reshape(-1)  # [S * k]
            prefixes = tokens[:, 1:].tolist()
            cand_lists = (cand_scores.tolist(), cand_beams.tolist(), cand_tokens.tolist())
            for i, sentence in enumerate(active):
                trace = traces[sentence]
                c_scores, c_beams, c_tokens = (values[i] for values in cand_lists)
                finished_now = []
                for rank in range(k):  # <eos> among the first k candidates: a finished hypothesis
                    if c_tokens[rank] == eos_id and c_scores[rank] != float("-inf") and not trace.full:
                        hyp = Finished(tuple(prefixes[i * k + c_beams[rank]]), c_scores[rank], step)
                        trace.finished.append(hyp)
                        finished_now.append(hyp)
                if record_steps:
                    trace.steps.append(
                        BeamStep(
                            step,
                            [(tuple(prefixes[i * k + b]) + (t,), s, b) for s, b, t in zip(c_scores, c_beams, c_tokens)],
                            finished_now,
                            [
                                (tuple(prefixes[i * k + b]) + (t,), s)
                                for s, b, t in zip(
                                    new_scores[i].tolist(), new_beams[i].tolist(), new_tokens[i].tolist()
                                )
                                if s != float("-inf")
                            ],
                        )
                    )
            scores = new_scores
            tokens = torch.cat([tokens[rows], new_tokens.reshape(-1, 1)], dim=1)
            cache.reorder(rows)
            keep = []
            for i, sentence in enumerate(active):
                trace = traces[sentence]
                if trace.full:
                    continue
                if step >= limits[sentence]:  # out of length: the running hypotheses finish as they are
                    for beam in range(k):
                        if scores[i, beam] != float("-inf"):
                            trace.finished.append(
                                Finished(tuple(tokens[i * k + beam, 1:].tolist()), float(scores[i, beam]), step)
                            )
                    continue
                keep.append(i)
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long)
                rows = (index[:, None] * k + torch.arange(k)).reshape(-1)
                cache.reorder(rows)
                memory, src_mask, tokens, scores = memory[rows], src_mask[rows], tokens[rows], scores[index]
                active = [active[i] for i in keep]
    return traces


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
# Greedy search with and without the key/value cache
# ----------------------------------------------------------------------------------------------------------
def _logits_without_cache(
    model: Transformer, prefix: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, bos_id: int
) -> torch.Tensor:
    """Next-token logits ``[rows, V]`` from the whole prefix ``[rows, t]``, recomputed from scratch."""
    logits = model.decode(prefix, memory, src_mask)[:, -1].float()
    logits[:, model.config.pad_id] = float("-inf")
    logits[:, bos_id] = float("-inf")
    return logits


@torch.no_grad()
def greedy_recompute(
    model: Transformer, src: torch.Tensor, *, max_extra_len: int = 50, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> list[list[int]]:
    """Greedy search *without* a cache: at every step the decoder reruns over the whole prefix ``[batch, t]``.

    Same rules and outputs as :func:`companion.decode.greedy_decode` (which feeds one token per step and caches the
    keys and values of the earlier ones); kept as the baseline the cache is measured against.
    """
    src = _check_model_and_src(model, src)
    _check_max_extra_len(max_extra_len)
    with eval_mode(model):
        memory, src_mask = model.encode(src)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        outputs: list[list[int]] = [[] for _ in range(src.shape[0])]
        done = [False] * src.shape[0]
        prefix = src.new_full((src.shape[0], 1), bos_id)
        while not all(done):
            tokens = _logits_without_cache(model, prefix, memory, src_mask, bos_id).argmax(dim=-1)
            for row, token in enumerate(tokens.tolist()):
                if done[row]:
                    continue
                if token == eos_id:
                    done[row] = True
                    continue
                outputs[row].append(token)
                done[row] = len(outputs[row]) >= limits[row]
            prefix = torch.cat([prefix, tokens[:, None]], dim=1)
    return outputs


@torch.no_grad()
def decode_fixed_steps(
    model: Transformer, src: torch.Tensor, steps: int, *, use_cache: bool, bos_id: int = BOS_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of exactly ``steps`` tokens per sentence (``<eos>`` does not stop it), with or without
    the key/value cache, for timing against the output length.

    Returns ``(tokens [batch, steps], logits [batch, steps, V])``: the chosen tokens and, per step, the logits
    they were chosen from (``<pad>``/``<bos>`` at -inf), so that the two ways can be compared exactly.
    """
    src = _check_model_and_src(model, src)
    check_positive_int("steps", steps)
    if steps >= model.config.max_len:
        raise ValueError(f"steps must be below the model's max_len={model.config.max_len}, got {steps}")
    with eval_mode(model):
        memory, src_mask = model.encode(src)
        prefix = src.new_full((src.shape[0], 1), bos_id)
        cache = model.new_cache() if use_cache else None
        all_logits = []
        for _ in range(steps):
            if use_cache:
                logits = model.decode(prefix[:, -1:], memory, src_mask, cache=cache)[:, -1].float()
                logits[:, model.config.pad_id] = float("-inf")
                logits[:, bos_id] = float("-inf")
            else:
                logits = _logits_without_cache(model, prefix, memory, src_mask, bos_id)
            all_logits.append(logits)
            prefix = torch.cat([prefix, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return prefix[:, 1:], torch.stack(all_logits, dim=1)


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
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
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
    length limit. ``top_k=1`` is greedy search; the draws use ``generator`` (seed it for repeatable output).
    """
    src = _check_model_and_src(model, src)
    _check_max_extra_len(max_extra_len)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    with eval_mode(model):
        memory, src_mask = model.encode(src)
        limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
        outputs: list[list[int]] = [[] for _ in range(src.shape[0])]
        running = list(range(src.shape[0]))  # sentence of each row still decoding
        cache = model.new_cache()
        last = src.new_full((len(running), 1), bos_id)
        while running:
            logits = model.decode(last, memory, src_mask, cache=cache)[:, -1].float()
            logits[:, model.config.pad_id] = float("-inf")
            logits[:, bos_id] = float("-inf")
            probs = torch.softmax(top_k_filter(logits / temperature, top_k), dim=-1)
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [rows]
            keep = record_greedy_step(tokens, running, outputs, limits, eos_id)  # the same bookkeeping as greedy
            if len(keep) < len(running):  # finished rows leave the batch, as in greedy_decode
                index = torch.tensor(keep, dtype=torch.long)
                cache.reorder(index)
                memory, src_mask, tokens = memory[index], src_mask[index], tokens[index]
                running = [running[row] for row in keep]
            last = tokens[:, None]
    return outputs


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
