"""``companion train`` end to end on tiny runs: the data it trained on, resume, averaging, refusals."""

from __future__ import annotations

import json
import shutil

import pytest
from _run_helpers import COPY, train_words, write_corpus

from companion.checkpoint import list_checkpoints, load_checkpoint
from companion.cli import main
from companion.runs import RunConfig, train_run
from companion.runs import train as train_module

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_trainer_runs_with_the_config_the_run_recorded(tmp_path, monkeypatch):
    seen = {}
    real = train_module.Trainer

    def spy(model, config, *args, **kwargs):
        seen["config"] = config
        return real(model, config, *args, **kwargs)

    monkeypatch.setattr(train_module, "Trainer", spy)
    out = tmp_path / "run"
    options = dict(task="copy", preset="tiny", num_examples=300, max_tokens=200, max_steps=1, label_smoothing=0.25)
    summary = train_run({**options, "device": "cpu", "progress": False, "out": str(out)}, command=[])
    assert summary["steps"] == 1
    recorded = RunConfig.from_record(json.loads((out / "run.json").read_text())["args"])
    assert seen["config"] == recorded.train and seen["config"].label_smoothing == 0.25


def test_resume_with_other_data_is_refused_and_with_the_same_data_elsewhere_allowed(tmp_path, capsys):
    first = write_corpus(tmp_path / "first")
    out = tmp_path / "run"
    assert train_words(first, out, 1) == 0
    recorded = json.loads((out / "run.json").read_text())["data"]
    assert recorded["train"]["pairs"] == 40 and len(recorded["train"]["sha256"]) == 64
    other = write_corpus(tmp_path / "other", {"train": [(f"a dog {i} .", f"ein hund {i} .") for i in range(40)]})
    capsys.readouterr()
    assert train_words(other, out, 2, "--resume") == 2
    err = capsys.readouterr().err
    assert "not the data this run was trained on" in err and "train:" in err
    same = shutil.copytree(first, tmp_path / "copy")  # the same sentences in another folder: exact resume works
    assert train_words(same, out, 2, "--resume") == 0


def test_bpe_vocabulary_larger_than_asked_warns(tmp_path):
    folder = write_corpus(tmp_path / "data")
    with pytest.warns(UserWarning, match=r"--vocab-size 5: the BPE vocabulary has \d+ entries"):
        assert train_words(folder, tmp_path / "run", 1, "--tokenizer", "bpe", "--vocab-size", "5") == 0


def test_averaging_the_last_checkpoints(tmp_path, capsys):
    out = tmp_path / "avg"
    assert main([*COPY, "--max-steps", "6", "--save-every", "2", "--average-last", "3", "--out", str(out)]) == 0
    averaged = load_checkpoint(out / "averaged.pt")
    assert averaged["averaged_from"] == ["step_00000002.pt", "step_00000004.pt", "step_00000006.pt"]
    assert "averaged 3" in capsys.readouterr().out


def test_too_few_checkpoints_for_an_explicit_average_last_warn(tmp_path):
    out = tmp_path / "b"
    with pytest.warns(UserWarning, match="--average-last 3: the run wrote only 2 checkpoint"):
        assert main([*COPY, "--max-steps", "2", "--save-every", "1", "--average-last", "3", "--out", str(out)]) == 0
    assert load_checkpoint(out / "averaged.pt")["averaged_from"] == ["step_00000001.pt", "step_00000002.pt"]


def test_accum_steps_beyond_the_batches_of_an_epoch_is_refused(tmp_path, capsys):
    assert main([*COPY, "--max-steps", "1", "--accum-steps", "1000", "--out", str(tmp_path / "run")]) == 2
    assert "--accum-steps 1000 is more than the" in capsys.readouterr().err


def test_resuming_below_the_current_step_is_refused_without_touching_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "3", "--out", str(out)]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}
    for steps in ("2", "3"):
        assert main([*COPY, "--max-steps", steps, "--out", str(out), "--resume"]) == 2
        assert f"is at step 3, and --max-steps {steps} is not beyond it" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()} == before
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step_00000003.pt"]


def test_out_is_required(capsys):
    assert main([*COPY, "--max-steps", "1"]) == 2
    assert "--out" in capsys.readouterr().err
