"""bench/decoding_select.py: the rule that chooses the length penalty, its scores, bad options refused, and one whole
run (translations through ``companion translate`` at two alphas, a results file) on a small Multi30k-like folder."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import _common  # noqa: E402
import decoding_select  # noqa: E402

CHECKPOINT = ROOT / "tests" / "integration" / "fixtures" / "m30k_run" / "checkpoints" / "step_00000003.pt"


def grid(bleus: dict[float, float]) -> dict[float, dict]:
    return {alpha: {"bleu": bleu} for alpha, bleu in bleus.items()}


def test_the_choice_is_the_highest_mean_bleu_over_the_directions():
    # de-en alone would pick 2.0 and en-de alone 3.0; the mean picks 2.0 (40.5 against 40.25)
    by_direction = {"de-en": grid({0.6: 41.0, 2.0: 42.0, 3.0: 41.0}), "en-de": grid({0.6: 38.0, 2.0: 39.0, 3.0: 39.5})}
    assert decoding_select.choose(by_direction) == 2.0
    assert decoding_select.choose({"de-en": grid({0.6: 41.0, 2.0: 42.0, 3.0: 41.0})}) == 2.0
    assert decoding_select.choose({"en-de": grid({0.6: 38.0, 2.0: 39.0, 3.0: 39.5})}) == 3.0


def test_a_tie_goes_to_the_smaller_alpha():
    assert decoding_select.choose({"de-en": grid({0.6: 40.0, 1.0: 41.0, 2.0: 41.0})}) == 1.0


def test_score_reads_bleu_chrf_and_the_length_ratio():
    references = [f"a man number {i} rides a red bicycle down the street ." for i in range(10)]
    same = decoding_select.score(references, references)
    assert same["bleu"] == pytest.approx(100.0) and same["length_ratio"] == 1.0
    short = decoding_select.score([" ".join(r.split()[:5]) for r in references], references)
    assert short["length_ratio"] < 0.5 and short["bleu"] < same["bleu"] and short["chrf"] < same["chrf"]


@pytest.mark.parametrize("text", ["1.0,2.0", "0.6,11", "0.6,x", ""])
def test_a_grid_without_the_papers_alpha_or_with_a_bad_value_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="0.6|comma-separated"):
        decoding_select._alphas(text)


def test_the_grid_is_sorted_without_repeats():
    assert decoding_select._alphas("2,0.6,1,2") == (0.6, 1.0, 2.0)


@pytest.mark.parametrize("text", ["fr-en=a.pt", "de-en", "de-en="])
def test_a_checkpoint_without_a_known_direction_and_a_path_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="DIRECTION=PATH"):
        decoding_select._checkpoint(text)


def test_a_missing_checkpoint_or_a_direction_named_twice_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        decoding_select.parse_args(["--checkpoint", f"de-en={tmp_path / 'none.pt'}", "--results", "x"])
    assert "must be a checkpoint file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        decoding_select.parse_args(
            ["--checkpoint", f"en-de={CHECKPOINT}", "--checkpoint", f"en-de={CHECKPOINT}", "--results", "x"]
        )
    assert "names a direction twice" in capsys.readouterr().err


def test_the_default_checkpoints_are_the_shipped_models():
    args = decoding_select.parse_args(["--results", "x"])
    assert args.checkpoint == [(d, ROOT / "pretrained" / f"{d}-small.pt") for d in ("de-en", "en-de")]
    assert args.alphas == decoding_select.ALPHAS and decoding_select.PAPER_ALPHA in args.alphas


def test_a_whole_run_writes_the_grid_and_the_choice(tmp_path, monkeypatch, multi30k_folder):
    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")
    decoding_select.main(
        [
            "--checkpoint",
            f"en-de={CHECKPOINT}",
            "--alphas",
            "0.6,2",
            "--data-dir",
            str(multi30k_folder),
            "--results",
            "select_test",
        ]  # fmt: skip
    )
    record = json.loads((tmp_path / "results" / "select_test.json").read_text())
    assert record["split"] == "valid" and record["beam_size"] == 4 and record["alphas"] == [0.6, 2.0]
    scores = record["by_direction"]["en-de"]
    assert set(scores) == {"0.6", "2"} and all(0 <= s["bleu"] <= 100 and s["length_ratio"] > 0 for s in scores.values())
    assert record["chosen_alpha"] == decoding_select.choose({"en-de": {0.6: scores["0.6"], 2.0: scores["2"]}})
    report = record["chosen_against_paper"]["en-de"]["bleu"]
    assert report["baseline"]["score"] == scores["0.6"]["bleu"]
    assert report["candidate"]["score"] == scores[f"{record['chosen_alpha']:g}"]["bleu"]
    assert "--beam-size 4 --alpha ALPHA" in record["translate_command"]
    assert record["hardware"]["cpu_cores"] >= 1 and record["command"].startswith("python")
