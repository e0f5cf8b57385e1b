"""bench/decode_speed.py: its timed rounds compare the same searches with and without the cache (greedy and beam
4), report medians of the per-round ratios, and fail when the two methods' outputs part where the scores are not
tied. A tiny random model and a few sentences: the numbers are not the point, the bookkeeping is."""

from __future__ import annotations

import pathlib
import statistics
import sys

import pytest
import torch

from companion.data import EOS_ID, PAD_ID
from companion.decode import beam_search

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import decode_speed as bench  # noqa: E402


@pytest.fixture
def model_and_ids(tiny_model):
    torch.manual_seed(0)
    model = tiny_model(src_vocab_size=40, tgt_vocab_size=50)
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(2, 9, (12,), generator=generator).tolist()
    ids = [torch.randint(4, 40, (n,), generator=generator).tolist() + [EOS_ID] for n in lengths]
    return model, ids


def test_beam_rounds_report_the_median_ratio_and_identical_winners(model_and_ids):
    model, ids = model_and_ids
    result = bench.alternate_beams(model, ids, batch_size=4, pad=PAD_ID, rounds=3)
    ratios = result["beam4_ratio_per_round"]
    assert len(ratios) == 3 and len(result["beam4_seconds_per_round"]) == 3
    assert result["beam4_speedup"] == pytest.approx(statistics.median(ratios))
    assert result["beam4_seconds"] == pytest.approx(statistics.median(result["beam4_seconds_per_round"]))
    assert result["beam4_sentences_per_second"] == pytest.approx(len(ids) / result["beam4_seconds"])
    assert result["beam4_outputs_differing"] == 0 and result["beam4_score_gaps_where_outputs_differ"] == {}


def test_differing_beam_winners_fail_unless_tied(model_and_ids):
    model, ids = model_and_ids
    src = torch.tensor([ids[0]])
    best = beam_search(model, src, beam_size=bench.BEAM, alpha=bench.BEAM_ALPHA)[0]
    other = best[:-1] if len(best) > 1 else best + [7]  # another hypothesis, scored differently
    differing: dict[int, float] = {}
    with pytest.raises(AssertionError, match="not tied"):
        bench.check_same_beams_but_for_ties(model, ids[:1], [best], [other], differing)
    assert differing[0] >= bench.TIE_GAP
    same: dict[int, float] = {}
    bench.check_same_beams_but_for_ties(model, ids[:1], [best], [list(best)], same)  # equal winners pass
    assert same == {}


def test_measure_gives_greedy_and_beam_results_for_one_batch_size(model_and_ids):
    model, ids = model_and_ids
    result = bench.measure(model, ids, batch_size=4, pad=PAD_ID, rounds=2)
    assert result["speedup"] == pytest.approx(statistics.median(result["ratio_per_round"]))
    assert result["outputs_differing"] == 0 and result["beam4_outputs_differing"] == 0
    assert set(result["per_step"]) == {"cached", "recompute"}
    assert result["per_step"]["cached"]["steps"] == result["per_step"]["recompute"]["steps"] > 0
