"""Decoding a trained Transformer: greedy search, beam search, and text-to-text translation.

There is one greedy search (:func:`search_greedy`) and one beam search (:func:`search_beam`). Both run a batch
of source sentences at once over a **step function** (:class:`DecoderStep`): given the prefixes of the rows
still decoding (``<bos>`` and the tokens chosen so far), it returns the logits of each row's next token, and it
is told when rows are reordered or dropped. What the step computes is its own business:

* :class:`CachedStep` feeds the decoder only the newest token and reuses the keys and values of the earlier
  positions from a :class:`~companion.model.KVCache` (what :func:`greedy_decode` and :func:`beam_search` use);
* :class:`RecomputeStep` reruns the decoder over the whole prefix at every step, the baseline the cache is
  measured against (``greedy_decode(..., use_cache=False)``, ``beam_search(..., use_cache=False)``);
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

from .beam import (
    BeamState,
    BeamStepRecord,
    Candidates,
    Finished,
    beam_search,
    best_hypothesis,
    score_hypotheses,
    search_beam,
)
from .greedy import GreedyStepRecord, greedy_decode, greedy_tie_gap, search_greedy
from .limits import (
    MAX_ALPHA,
    MAX_BEAM_SIZE,
    PAPER_ALPHA,
    PAPER_BEAM_SIZE,
    check_search_inputs,
    length_penalty,
    max_output_lengths,
)
from .steps import CachedStep, DecoderStep, ModelStep, RecomputeStep, model_step
from .translate import check_alphas, translate, translate_alphas, translate_ids, translate_ids_alphas

__all__ = [
    "MAX_ALPHA",
    "MAX_BEAM_SIZE",
    "PAPER_BEAM_SIZE",
    "PAPER_ALPHA",
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
    "greedy_tie_gap",
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
    "translate_alphas",
    "translate_ids_alphas",
    "check_alphas",
]
