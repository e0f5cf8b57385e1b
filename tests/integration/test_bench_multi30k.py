"""bench/multi30k.py scores the later Multi30k test sets beside test_2016_flickr: each set that can be had is
scored, each that cannot is recorded with the reason (the benchmark still completes)."""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import shutil
import sys

import pytest

from companion.checkpoint import load_checkpoint
from companion.pretrained import pretrained_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import multi30k  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_each_later_test_set_is_scored_or_recorded_as_unavailable(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    for lang, lines in (("en", ["A dog runs.", "Two men talk."]), ("de", ["Ein Hund rennt.", "Zwei Männer reden."])):
        with gzip.open(folder / f"test_2017_flickr.{lang}.gz", "wt", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    monkeypatch.setattr("companion.data.multi30k._reachable", lambda host, port: False)  # offline, whatever the host
    args = argparse.Namespace(beam_size=1, alpha=1.0, data_dir=str(folder))
    scores = multi30k.score_unseen(args, str(pretrained_path("de-en")), "cpu")
    assert list(scores) == ["test_2017_flickr", "test_2018_flickr", "test_2017_mscoco"]
    assert scores["test_2017_flickr"]["sentences"] == 2 and 0.0 <= scores["test_2017_flickr"]["bleu"] <= 100.0
    assert "cannot be reached" in scores["test_2018_flickr"]["unavailable"]
    assert "has no entry for this test set" in scores["test_2017_mscoco"]["unavailable"]


def test_the_later_test_sets_are_scored_only_when_scoring_test():
    assert multi30k.scores_unseen(multi30k.parse_args([])[0])
    assert not multi30k.scores_unseen(multi30k.parse_args(["--split", "valid"])[0])  # never part of tuning
    assert not multi30k.scores_unseen(multi30k.parse_args(["--no-unseen"])[0])


def test_attach_lowercased_adds_the_score_only_where_the_recorded_bleu_is_reproduced(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for lang, lines in (("en", ["A dog runs.", "Two men talk."]), ("de", ["Ein Hund rennt.", "Zwei Männer reden."])):
        with gzip.open(folder / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    args = argparse.Namespace(beam_size=1, alpha=1.0, data_dir=str(folder))
    checkpoint = str(pretrained_path("de-en"))
    recorded = round(multi30k.score(args, checkpoint, "cpu", "test")["bleu"], 2)
    entry = {"checkpoint": checkpoint, "beam_size": 1, "alpha": 1.0, "split": "test_2016_flickr", "bleu": recorded}
    good, wrong = tmp_path / "good.json", tmp_path / "wrong.json"
    good.write_text(json.dumps({"device": "cpu", "results": {"de-en": entry}}))
    wrong_text = json.dumps({"device": "cpu", "results": {"de-en": {**entry, "bleu": recorded + 1}}})
    wrong.write_text(wrong_text)
    with pytest.raises(SystemExit, match="not the recorded"):
        multi30k.attach_lowercased([wrong], args)
    assert wrong.read_text() == wrong_text  # nothing written
    multi30k.attach_lowercased([good], args)
    attached = json.loads(good.read_text())["results"]["de-en"]
    assert 0.0 <= attached["tokenized_lowercased_bleu"] <= 100.0
    assert "case:lc" in attached["tokenized_lowercased_bleu_signature"]


def small_multi30k(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir()
    pairs = [
        ("Ein Hund rennt.", "A dog runs."),
        ("Zwei Männer reden.", "Two men talk."),
        ("Ein Kind spielt.", "A child plays."),
    ]
    for stem in ("val", "test_2016_flickr"):
        for lang, side in (("de", 0), ("en", 1)):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("\n".join(pair[side] for pair in pairs) + "\n")
    return folder


def test_rescore_chooses_alpha_on_valid_and_keeps_the_training_fields(tmp_path):
    data = small_multi30k(tmp_path / "data")
    checkpoint = tmp_path / "de-en.pt"
    shutil.copyfile(pretrained_path("de-en"), checkpoint)  # choose-alpha writes its choice into the file
    entry = {"checkpoint": str(checkpoint), "alpha": 1.0, "bleu": 12.34, "chrf": 50.0, "steps": 99, "target_bleu": 30.0}
    results = tmp_path / "multi30k_cpu_x.json"
    results.write_text(json.dumps({"device": "cpu", "date": "then", "results": {"de-en": entry}}))
    args, _ = multi30k.parse_args(["--no-unseen", "--data-dir", str(data)])
    multi30k.rescore([results], args)
    record = json.loads(results.read_text())
    rescored = record["results"]["de-en"]
    choice = rescored["alpha_choice"]
    assert rescored["alpha"] == choice["alpha"] == load_checkpoint(checkpoint)["decoding"]["alpha"]
    assert choice["chosen_on"] == "valid" and choice["sentences"] == 3 and rescored["sentences"] == 3
    assert rescored["rescored"]["previous"]["bleu"] == 12.34 and rescored["rescored"]["previous"]["alpha"] == 1.0
    assert rescored["steps"] == 99 and record["date"] == "then"  # the training fields stay
    assert rescored["meets_target"] == (rescored["bleu"] >= 30.0) and "hardware" in rescored["rescored"]


def test_rescore_writes_nothing_when_a_checkpoint_is_missing(tmp_path):
    results = tmp_path / "multi30k_cpu_x.json"
    text = json.dumps({"device": "cpu", "results": {"de-en": {"checkpoint": str(tmp_path / "gone.pt")}}})
    results.write_text(text)
    with pytest.raises(SystemExit, match="is not here"):
        multi30k.rescore([results], multi30k.parse_args([])[0])
    assert results.read_text() == text


def test_scoring_the_validation_split_needs_a_given_alpha():
    with pytest.raises(SystemExit, match="give --alpha"):
        multi30k.main(["--split", "valid", "--no-results"])
