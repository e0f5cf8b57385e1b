"""bench/pretrained_compare.py: the paired bootstrap report of two systems, the <unk> counts, bad options refused, and
one whole run (two translations through ``companion translate``, a results file) on a small Multi30k-like folder."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import _common  # noqa: E402
import pretrained_compare  # noqa: E402

CHECKPOINT = ROOT / "tests" / "integration" / "fixtures" / "m30k_run" / "checkpoints" / "step_00000003.pt"

REFERENCES = [f"a man number {i} rides a red bicycle down the street ." for i in range(40)]


def test_a_candidate_equal_to_the_references_wins_with_a_small_p_value():
    baseline = [f"a woman number {i} walks down a road ." for i in range(40)]
    report = pretrained_compare.paired_test(baseline, REFERENCES, REFERENCES)
    assert set(report) == {"bleu", "chrf"}
    assert report["bleu"]["candidate"]["score"] == pytest.approx(100.0)
    assert report["bleu"]["baseline"]["score"] < 50.0
    for metric in report.values():
        assert metric["candidate"]["p_value"] < 0.05
        assert metric["baseline"]["ci95_half_width"] >= 0.0
        assert "nrefs:1" in metric["signature"] and "bs:2000" in metric["signature"]


def test_a_difference_in_one_sentence_of_forty_is_not_significant():
    baseline = [f"a man number {i} rides a bicycle ." for i in range(40)]
    candidate = [*baseline[:-1], "a man number 39 rides a red bicycle down the street ."]
    report = pretrained_compare.paired_test(baseline, candidate, REFERENCES)
    for metric in report.values():
        assert metric["candidate"]["score"] > metric["baseline"]["score"]
        assert metric["candidate"]["p_value"] > 0.05


def test_unk_counts_count_sentences_and_tokens():
    counts = pretrained_compare.unk_counts(["a <unk> and <unk> .", "no unknown word .", "<unk>"])
    assert counts == {"sentences_with_unk": 2, "unk_tokens": 3}


def test_a_missing_checkpoint_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        pretrained_compare.parse_args(
            [
                "--direction",
                "en-de",
                "--baseline",
                str(tmp_path / "none.pt"),
                "--candidate",
                str(CHECKPOINT),
                "--results",
                "x",
            ]  # fmt: skip
        )
    assert "--baseline must be a checkpoint file" in capsys.readouterr().err


def test_a_whole_run_writes_both_systems_scores(tmp_path, monkeypatch, multi30k_folder):
    monkeypatch.setattr(_common, "RESULTS", tmp_path / "results")
    pretrained_compare.main(
        [
            "--direction",
            "en-de",
            "--baseline",
            str(CHECKPOINT),
            "--candidate",
            str(CHECKPOINT),
            "--data-dir",
            str(multi30k_folder),
            "--results",
            "compare_test",
        ]  # fmt: skip
    )
    record = json.loads((tmp_path / "results" / "compare_test.json").read_text())
    assert record["split"] == "valid" and record["sentences"] == 10  # the folder's validation pairs
    assert record["scores"]["bleu"]["candidate"]["score"] == record["scores"]["bleu"]["baseline"]["score"]
    assert record["unk"]["baseline"] == record["unk"]["candidate"]
    assert "--beam-size 4 --alpha 0.6" in record["translate_command"]
    assert record["hardware"]["cpu_cores"] >= 1 and record["command"].startswith("python")
