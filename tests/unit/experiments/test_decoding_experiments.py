"""Tests for companion.book.experiments.decoding: the traced beam search equals the core one, the cache is exact and
its memory formula is right, sampling behaves, and bad input is refused with clear errors."""

from __future__ import annotations

import pytest
import torch

import companion
from companion import Transformer, TransformerConfig
from companion.book.experiments import decoding as D
from companion.data import BOS_ID, EOS_ID, PAD_ID, pad_sequences

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 19


def _model(eos_bias: float = 2.5) -> Transformer:
    """A small untrained model whose output layer favours <eos>, so searches finish both ways (by <eos> and at
    the length limit)."""
    torch.manual_seed(1)
    config = TransformerConfig(
        src_vocab_size=23,
        tgt_vocab_size=VOCAB,
        d_model=16,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=64,
    )
    model = Transformer(config).eval()
    with torch.no_grad():
        model.generator.bias[EOS_ID] += eos_bias
    return model


def _sources(num: int = 9, seed: int = 0) -> torch.Tensor:
    """``[num, n]`` right-padded sources of lengths 2..8, each ending with <eos>."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(num):
        length = 2 + i % 7
        rows.append(torch.randint(4, 23, (length - 1,), generator=generator).tolist() + [EOS_ID])
    return pad_sequences(rows, PAD_ID)


@pytest.mark.parametrize("beam_size", [1, 2, 3, 5])
@pytest.mark.parametrize("max_extra_len", [2, 8])
def test_traced_beam_search_equals_core_for_every_alpha(beam_size, max_extra_len):
    model, src = _model(), _sources()
    traces = D.traced_beam_search(model, src, beam_size, max_extra_len=max_extra_len)
    by_eos = at_limit = 0
    for alpha in (0.0, 0.6, 1.0, 2.0):
        tokens, scores = companion.beam_search(
            model, src, beam_size=beam_size, alpha=alpha, max_extra_len=max_extra_len, return_scores=True
        )
        best = [trace.best(alpha) for trace in traces]
        assert [list(hyp.tokens) for hyp in best] == tokens
        assert [hyp.score(alpha) for hyp in best] == pytest.approx(scores, abs=1e-5)
    for trace in traces:
        assert 1 <= len(trace.finished) <= 2 * beam_size
        by_eos += sum(hyp.length == len(hyp.tokens) + 1 for hyp in trace.finished)
        at_limit += sum(hyp.length == len(hyp.tokens) for hyp in trace.finished)
    assert by_eos > 0
    if max_extra_len == 2:
        assert at_limit > 0, "the short limit must finish some hypotheses without <eos>"


def test_finished_log_probs_are_the_teacher_forced_ones():
    model, src = _model(), _sources()
    traces = D.traced_beam_search(model, src, 3, max_extra_len=8)
    for row, trace in enumerate(traces):
        for hyp in trace.finished:
            if hyp.length == len(hyp.tokens) + 1:  # ended with <eos>: score_hypotheses adds the same <eos>
                unpadded = src[row][src[row] != PAD_ID][None]
                (score,) = companion.score_hypotheses(model, unpadded, [list(hyp.tokens)], alpha=0.0)
                assert score == pytest.approx(hyp.log_prob, abs=1e-4)


def test_recorded_steps_are_consistent():
    model, src = _model(), _sources(4)
    k = 3
    traces = D.traced_beam_search(model, src, k, max_extra_len=8, record_steps=True)
    for trace in traces:
        assert [s.step for s in trace.steps] == list(range(1, len(trace.steps) + 1))
        for step in trace.steps:
            assert len(step.candidates) == 2 * k
            values = [score for _, score, _ in step.candidates]
            assert values == sorted(values, reverse=True)
            assert all(len(tokens) == step.step for tokens, _, _ in step.candidates)
            assert len(step.alive) <= k and all(tokens[-1] != EOS_ID for tokens, _ in step.alive)
            # the survivors are the best candidates that do not end in <eos>
            expected = [(t, s) for t, s, _ in step.candidates if t[-1] != EOS_ID][: len(step.alive)]
            assert step.alive == expected
        assert sum(len(s.finished) for s in trace.steps) <= len(trace.finished)
    # the first step extends only <bos>: all candidates come from beam 0
    assert all(beam == 0 for _, _, beam in traces[0].steps[0].candidates)


def test_without_record_steps_nothing_is_recorded():
    traces = D.traced_beam_search(_model(), _sources(3), 2, max_extra_len=4)
    assert all(trace.steps == [] for trace in traces)


def test_corpus_search_keeps_the_order_of_the_sources():
    model, src = _model(), _sources(7)
    sources = [row[row != PAD_ID].tolist() for row in src]
    traces, seconds = D.traced_beam_search_corpus(model, sources, 2, batch_size=3)
    assert seconds >= 0
    direct = D.traced_beam_search(model, src, 2)
    for alone, batched in zip(direct, traces):
        assert alone.best(0.6).tokens == batched.best(0.6).tokens
    core = companion.translate_ids(model, sources, beam_size=2, alpha=0.6, batch_size=3)
    assert [list(trace.best(0.6).tokens) for trace in traces] == core


def test_greedy_recompute_equals_cached_greedy():
    model, src = _model(eos_bias=1.0), _sources()
    assert D.greedy_recompute(model, src, max_extra_len=6) == companion.greedy_decode(model, src, max_extra_len=6)


def test_fixed_steps_with_and_without_cache_agree():
    model, src = _model(eos_bias=0.0), _sources(5)
    cached, cached_logits = D.decode_fixed_steps(model, src, 12, use_cache=True)
    plain, plain_logits = D.decode_fixed_steps(model, src, 12, use_cache=False)
    assert cached.shape == (5, 12) and cached_logits.shape == (5, 12, VOCAB)
    assert torch.equal(cached, plain)
    finite = torch.isfinite(plain_logits)
    assert torch.equal(finite, torch.isfinite(cached_logits))
    torch.testing.assert_close(cached_logits[finite], plain_logits[finite], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("steps", [1, 7])
def test_cache_memory_matches_the_formula(steps):
    model, src = _model(), _sources(6)
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    tokens = torch.full((src.shape[0], 1), BOS_ID)
    with torch.no_grad():
        for _ in range(steps):
            logits = model.decode(tokens, memory, src_mask, cache=cache)
            tokens = logits[:, -1].argmax(-1, keepdim=True)
    config = model.config
    expected = D.kv_cache_bytes(config.num_decoder_layers, src.shape[0], steps, src.shape[1], config.d_model)
    assert D.cache_nbytes(cache) == expected
    assert D.cache_nbytes(model.new_cache()) == 0


def test_kv_cache_bytes_formula_and_errors():
    # the paper's base model: 6 layers, d_model 512, fp32, one sentence, 10 target + 20 source positions
    assert D.kv_cache_bytes(6, 1, 10, 20, 512) == 2 * 6 * 30 * 512 * 4
    assert D.kv_cache_bytes(6, 1, 10, 20, 512, bytes_per_element=2) == 2 * 6 * 30 * 512 * 2
    with pytest.raises(ValueError, match="tgt_len"):
        D.kv_cache_bytes(6, 1, -1, 20, 512)
    with pytest.raises(ValueError, match="rows"):
        D.kv_cache_bytes(6, 0, 1, 20, 512)


def test_cache_nbytes_counts_shared_tensors_once():
    t = torch.zeros(3, 4)
    holder = type("Holder", (), {})()
    holder.a, holder.b, holder.nested = t, [t, (t,)], {"x": torch.zeros(2, dtype=torch.float16)}
    assert D.cache_nbytes(holder) == 3 * 4 * 4 + 2 * 2


def test_top_k_filter():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, 0.5, 0.1, 0.9]])
    kept = D.top_k_filter(logits, 2)
    assert torch.isfinite(kept).tolist() == [[False, True, True, False], [True, True, False, True]]  # tie kept
    assert torch.equal(D.top_k_filter(logits, None), logits)
    assert torch.equal(D.top_k_filter(logits, 10), logits)
    with pytest.raises(ValueError, match="top_k"):
        D.top_k_filter(logits, 0)


def test_sampling_top_k_one_is_greedy_and_seeded_sampling_repeats():
    model, src = _model(eos_bias=1.0), _sources()
    greedy = companion.greedy_decode(model, src, max_extra_len=6)
    assert D.sample_decode(model, src, top_k=1, max_extra_len=6, generator=torch.Generator().manual_seed(0)) == greedy
    draws = [
        D.sample_decode(model, src, temperature=1.5, max_extra_len=6, generator=torch.Generator().manual_seed(3))
        for _ in range(2)
    ]
    assert draws[0] == draws[1]
    other = D.sample_decode(model, src, temperature=1.5, max_extra_len=6, generator=torch.Generator().manual_seed(4))
    assert other != draws[0]
    assert all(
        len(out) <= limit
        for out, limit in zip(draws[0], companion.decode.max_output_lengths(src, PAD_ID, 6, model.config.max_len))
    )


def test_score_corpus_matches_score_hypotheses():
    model, src = _model(), _sources(5)
    sources = [row[row != PAD_ID].tolist() for row in src]
    hypotheses = [[5, 6], [7], [], [8, 9, 10], [4]]
    scores = D.score_corpus(model, sources, hypotheses, alpha=0.6, batch_size=2)
    direct = companion.score_hypotheses(model, src, hypotheses, alpha=0.6)
    assert scores == pytest.approx(direct, abs=1e-5)


def test_bad_input_is_refused_with_clear_errors():
    model, src = _model(), _sources(2)
    with pytest.raises(TypeError, match="model must be a companion Transformer"):
        D.traced_beam_search(torch.nn.Linear(2, 2), src)
    with pytest.raises(ValueError, match="beam_size"):
        D.traced_beam_search(model, src, 0)
    with pytest.raises(ValueError, match="max_extra_len"):
        D.traced_beam_search(model, src, 2, max_extra_len=-1)
    with pytest.raises(ValueError, match="src"):
        D.traced_beam_search(model, torch.full((1, 3), 99))
    with pytest.raises(ValueError, match="temperature"):
        D.sample_decode(model, src, temperature=0)
    with pytest.raises(ValueError, match="steps"):
        D.decode_fixed_steps(model, src, 64, use_cache=True)
    with pytest.raises(ValueError, match="equally long"):
        D.score_corpus(model, [[4, EOS_ID]], [], alpha=0.6)


# ----------------------------------------------------------------------------------------------------------
# The cache under beam search, the step table, the within-sentence length bias
# ----------------------------------------------------------------------------------------------------------
def _recorded(sentence: int, beam_size: int = 3):
    model, src = _model(eos_bias=0.0), _sources()
    one = src[sentence : sentence + 1, : int((src[sentence] != PAD_ID).sum())]
    return model, one, D.traced_beam_search(model, one, beam_size, record_steps=True)[0]


def test_parent_indices_point_at_the_prefix_each_hypothesis_extends():
    _, _, trace = _recorded(3)
    parents = D.parent_indices(trace.steps)
    assert parents[0] == [0] * len(trace.steps[0].alive)
    for before, record, row in zip(trace.steps, trace.steps[1:], parents[1:]):
        for (tokens, _), parent in zip(record.alive, row):
            assert before.alive[parent][0] == tokens[:-1]
    assert any(row != sorted(row) or len(set(row)) < len(row) for row in parents[1:]), "the beam reorders its rows"


def test_parent_indices_refuse_a_broken_history():
    _, _, trace = _recorded(3)
    broken = [trace.steps[0], trace.steps[2]]
    with pytest.raises(ValueError, match="extends no hypothesis"):
        D.parent_indices(broken)


@pytest.mark.parametrize("sentence", [0, 4, 8])
def test_reordered_cache_equals_recomputing_and_an_unordered_one_does_not(sentence):
    model, one, trace = _recorded(sentence)
    reference = D.replay_beam(model, one, trace.steps, use_cache=False)
    cached = D.replay_beam(model, one, trace.steps, use_cache=True)
    stale = D.replay_beam(model, one, trace.steps, use_cache=True, reorder=False)
    assert len(reference) == len(cached) == len(trace.steps)
    for ref, got in zip(reference, cached):
        assert torch.allclose(ref, got, atol=1e-5)
    assert max((ref - got).abs().max().item() for ref, got in zip(reference, stale)) > 1e-2


def test_replay_beam_refuses_a_batch():
    model, src = _model(), _sources()
    with pytest.raises(ValueError, match="one sentence"):
        D.replay_beam(model, src[:2], [], use_cache=True)


def test_beam_step_rows_account_for_every_candidate():
    _, _, trace = _recorded(5)
    for step, record in enumerate(trace.steps, start=1):
        rows = D.beam_step_rows(trace.steps, step)
        assert [r.tokens for r in rows] == [c[0] for c in record.candidates]
        assert [r.tokens for r in rows if r.fate == "kept"] == [t for t, _ in record.alive]
        assert sorted(r.tokens[:-1] for r in rows if r.fate == "finished") == sorted(h.tokens for h in record.finished)
        assert all(r.tokens[-1] == EOS_ID for r in rows if r.fate == "finished")
        assert all(r.parent >= 0 for r in rows)
    with pytest.raises(ValueError, match="step"):
        D.beam_step_rows(trace.steps, len(trace.steps) + 1)


def _trace(*hypotheses: tuple[int, float]) -> D.BeamTrace:
    return D.BeamTrace(len(hypotheses), [companion.decode.Finished((5,) * (n - 1), lp, n) for n, lp in hypotheses])


def test_within_sentence_offsets_subtract_each_sentences_means():
    traces = [_trace((3, -2.0), (5, -4.0)), _trace((4, -1.0), (4, -3.0)), _trace((10, -20.0), (12, -21.0))]
    offsets = D.within_sentence_length_offsets(traces)
    assert [o[0] for o in offsets] == [0, 0, 2, 2]  # sentence 1 has one length only
    assert offsets[0][1:] == (-1.0, 1.0) and offsets[3][1:] == (1.0, -0.5)


def test_shorter_wins_counts_pairs_within_sentences_only():
    traces = [_trace((3, -2.0), (5, -4.0), (5, -1.0)), _trace((2, -9.0), (9, -1.0))]
    assert D.shorter_wins(traces, 0.0) == (1, 3)
    wins_large_alpha, pairs = D.shorter_wins(traces, 5.0)
    assert pairs == 3 and wins_large_alpha <= 1
    with pytest.raises(ValueError, match="alpha"):
        D.shorter_wins(traces, -1.0)
