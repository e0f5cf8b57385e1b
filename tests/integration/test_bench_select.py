"""bench/multi30k_select.py, the validation-split choice of the CPU training setting: two candidates train for a
few seconds on a small Multi30k-shaped corpus, are scored on validation, the better one is chosen, and only it
is then scored on test; the results file keeps both candidates and names the choice. And bench/selection_table.py,
which turns every committed selection file into the README's table."""

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
import selection_table  # noqa: E402


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
    assert entries["tokens1200"]["changed_flags"] == [*multi30k_select.WORD, "--max-tokens", "1200"]
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


def _selection_file(folder: pathlib.Path, stem: str, cpu: str, date: str, candidates: dict) -> None:
    """A selection results file in ``folder`` with ``candidates`` {name: (steps, {setting: bleu}, test bleu)}."""
    entries = {
        name: {
            "date": date,
            "steps": steps,
            "tokens_per_second": 10_000 + steps,
            "valid_bleu_beam4": {setting: {"bleu": bleu} for setting, bleu in scores.items()},
            **({} if test is None else {"test_at_chosen_setting": {"bleu": test}}),
        }
        for name, (steps, scores, test) in candidates.items()
    }
    chosen = max(entries, key=lambda n: max(s["bleu"] for s in entries[n]["valid_bleu_beam4"].values()))
    record = {
        "hardware": {"cpu": cpu},
        "directions": {"de-en": {"candidates": entries, "chosen_on_valid": {"candidate": chosen}}},
    }
    (folder / f"selection_multi30k_cpu_{stem}.json").write_text(json.dumps(record))


def test_selection_table_rows_in_run_order_with_the_choice_marked(tmp_path):
    # "_pm" sorts after "_eve" by name but was run first: the table follows the runs
    _selection_file(
        tmp_path,
        "2026-01-01_eve",
        "Intel(R) Xeon(R) Processor",
        "2026-01-01T20:00:00",
        {"a": (5, {"last5_alpha0.6": 30.0}, None)},
    )
    _selection_file(
        tmp_path,
        "2026-01-01_pm",
        "AMD EPYC 9B14",
        "2026-01-01T14:00:00",
        {
            "a": (1234, {"last5_alpha0.6": 31.5, "last10_alpha1.0": 32.25}, 33.0),
            "b": (7, {"last1_alpha0.6": 29.0}, None),
        },
    )
    assert selection_table.rows(tmp_path) == [
        "| 2026-01-01_pm, AMD EPYC | de-en | **a** | 1,234 | 11,234 | **32.25** (last10_alpha1.0) | 33.00 |",
        "| 2026-01-01_pm, AMD EPYC | de-en | b | 7 | 10,007 | 29.00 (last1_alpha0.6) |  |",
        "| 2026-01-01_eve, Intel Xeon | de-en | **a** | 5 | 10,005 | **30.00** (last5_alpha0.6) |  |",
    ]


def test_check_fails_on_a_stale_readme_table_and_write_renews_it(tmp_path, monkeypatch, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"Intro.\n\n{selection_table.START}\n| old |\n{selection_table.END}\n\nAfter.\n")
    assert selection_table.main(["--check", str(readme)]) == 1
    assert "the selection table is out of date" in capsys.readouterr().out
    assert selection_table.main(["--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("Intro.\n\n") and text.endswith("\n\nAfter.\n") and "| old |" not in text
    assert selection_table.main(["--check", str(readme)]) == 0
    with pytest.raises(ValueError, match="no <!-- selection-table -->"):
        selection_table.readme_copy("no table here")
    plain = tmp_path / "plain.md"
    plain.write_text("no table here\n")
    assert selection_table.main(["--write", str(plain)]) == 2  # refused, file untouched
    assert plain.read_text() == "no table here\n"
    assert "plain.md: the text has no <!-- selection-table -->" in capsys.readouterr().err


def test_the_readme_table_is_the_one_the_committed_results_give():
    """No number of the README's selection table is typed by hand."""
    readme = (ROOT / "README.md").read_text()
    assert selection_table.readme_copy(readme) == selection_table.table()
