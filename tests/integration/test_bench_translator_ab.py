"""bench/translator_ab.py: the summary of the two pages' latency reports (per search, each round's median, the
median of the per-round ratios, the ratio of the medians; the first translation), matching searches across the
older report's names (``beam4_alpha0.6``) and the newer one's (``de-en/beam4_alpha0.6``); bad options refused."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import translator_ab  # noqa: E402


def report(prefix: str, greedy: float, beam: float, first: float) -> dict:
    return {
        "per_sentence": {f"{prefix}greedy": {"median_ms": greedy}, f"{prefix}beam4_alpha0.6": {"median_ms": beam}},
        "first_translation": {"page_open_to_first_translation_ms": first},
    }


def test_summary_pairs_the_searches_of_both_reports_round_by_round():
    before = [report("", 20.0, 30.0, 1000.0), report("", 22.0, 24.0, 1200.0), report("", 18.0, 27.0, 1100.0)]
    after = [report("de-en/", 10.0, 10.0, 900.0), report("de-en/", 11.0, 16.0, 950.0), report("de-en/", 9.0, 9.0, 1.0)]
    table = translator_ab.summary(before, after)
    assert table["greedy"]["before_median_ms_per_round"] == [20.0, 22.0, 18.0]
    assert table["greedy"]["median_of_round_ratios"] == pytest.approx(2.0)
    assert table["beam4_alpha0.6"]["median_of_round_ratios"] == pytest.approx(3.0)  # 3.0, 1.5, 3.0
    assert table["beam4_alpha0.6"]["ratio_of_medians"] == pytest.approx(27.0 / 10.0)
    assert table["first_translation"]["before_median_ms"] == 1100.0
    assert table["first_translation"]["after_median_ms"] == 900.0


def test_rounds_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        translator_ab.main(["--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err
