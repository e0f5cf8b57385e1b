"""bench/multi30k.py scores the later Multi30k test sets beside test_2016_flickr: each set that can be had is
scored, each that cannot is recorded with the reason (the benchmark still completes)."""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import sys

import pytest

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
