"""bench/multi30k_select.py, the validation-split choice of the CPU training setting: two candidates train for a
few seconds on a small Multi30k-shaped corpus, are scored on validation, the better one is chosen, and only it
is then scored on test; the results file keeps both candidates and names the choice."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _common  # noqa: E402
import multi30k_select  # noqa: E402


@pytest.fixture
def results_dir(tmp_path, monkeypatch) -> pathlib.Path:
    """Results go to a temporary folder, not bench/results."""
    folder = tmp_path / "results"
    monkeypatch.setattr(_common, "RESULTS", folder)
    threads = torch.get_num_threads()
    yield folder
    torch.set_num_threads(threads)  # training set it for this process


def test_two_candidates_chosen_on_validation_then_scored_on_test(multi30k_folder, results_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_DATA_DIR", str(multi30k_folder))
    common = ["--minutes", "0.05", "--save-every-minutes", "0.002", "--threads", "1", "--results", "smoke"]
    runs = ["--runs-dir", str(tmp_path / "runs")]
    assert multi30k_select.main(["--candidates", "baseline", "tokens1200", *common, *runs]) == 0
    record = json.loads((results_dir / "smoke.json").read_text())
    entries = record["directions"]["de-en"]["candidates"]
    assert set(entries) == {"baseline", "tokens1200"}
    assert entries["tokens1200"]["changed_flags"] == ["--max-tokens", "1200"]
    for entry in entries.values():
        assert set(entry["valid_bleu_beam4"]) == {
            "last1_alpha0.6",
            "last1_alpha1.0",
            "last5_alpha0.6",
            "last5_alpha1.0",
            "last10_alpha0.6",
            "last10_alpha1.0",
        }
        assert all(
            score["split"] == "valid" and score["sentences"] == 10 for score in entry["valid_bleu_beam4"].values()
        )
        assert entry["steps"] > 0 and "test_at_chosen_setting" not in entry  # nothing seen of test yet
    chosen = record["directions"]["de-en"]["chosen_on_valid"]
    best = max(s["bleu"] for e in entries.values() for s in e["valid_bleu_beam4"].values())
    assert chosen["bleu"] == best and chosen["split"] == "valid"

    assert multi30k_select.main(["--score-test", chosen["candidate"], "--results", "smoke"]) == 0
    record = json.loads((results_dir / "smoke.json").read_text())
    entries = record["directions"]["de-en"]["candidates"]
    test = entries[chosen["candidate"]]["test_at_chosen_setting"]
    assert test["split"] == "test_2016_flickr" and test["sentences"] == 12 and test["setting"] == chosen["setting"]
    assert test["alpha"] == float(chosen["setting"].split("alpha")[1]) and test["beam_size"] == 4
    other = ({"baseline", "tokens1200"} - {chosen["candidate"]}).pop()
    assert "test_at_chosen_setting" not in entries[other]  # the other candidate stays unseen on test


def test_score_test_of_a_candidate_not_run_names_it(results_dir):
    with pytest.raises(SystemExit, match="--score-test tokens1200: no such candidate"):
        multi30k_select.main(["--score-test", "tokens1200", "--results", "empty"])


def test_a_results_stem_that_chapter_7_would_read_is_refused(capsys):
    with pytest.raises(SystemExit):
        multi30k_select.parse_args(["--candidates", "baseline", "--results", "multi30k_selection"])
    assert "--results multi30k_selection: a stem starting with multi30k_" in capsys.readouterr().err
