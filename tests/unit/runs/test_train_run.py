"""``companion train`` end to end on tiny runs: the data it trained on, resume, averaging, refusals."""

from __future__ import annotations

import json
import shutil

import pytest
from _run_helpers import COPY, train_words, write_corpus

from companion.checkpoint import list_checkpoints, load_checkpoint
from companion.cli import main
from companion.devices import keep_freed_memory
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
    record = json.loads((out / "run.json").read_text())
    recorded = RunConfig.from_record(record["args"])
    assert seen["config"] == recorded.train and seen["config"].label_smoothing == 0.25
    assert record["keeps_freed_memory"] is keep_freed_memory()  # the run applied the allocator setting it records


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


# -- a full disk, exact resume, the averaged model ---------------------------------------------------------------
def test_a_full_disk_on_run_json_is_a_clear_error_and_leaves_no_temp_file(tmp_path, monkeypatch, capsys):
    import errno
    import pathlib

    real_write_text = pathlib.Path.write_text

    def full_for_the_record(self, *args, **kwargs):
        if self.name == ".run.json.tmp":
            real_write_text(self, "{")  # a torn start, as a full disk leaves it
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full_for_the_record)
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    assert f"cannot write {out / 'run.json'} (No space left on device)" in capsys.readouterr().err
    assert not (out / ".run.json.tmp").exists() and not (out / "run.json").exists()


def test_a_full_disk_on_metrics_jsonl_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import builtins
    import errno

    import companion.train.trainer

    real_open = builtins.open

    def full_for_metrics(file, *args, **kwargs):
        if str(file).endswith("metrics.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(companion.train.trainer, "open", full_for_metrics, raising=False)
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "2", "--log-every", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"training stopped: {out / 'metrics.jsonl'}: No space left on device" in err and "Traceback" not in err


def test_resume_with_other_threads_warns_that_it_is_not_exact_and_records_it(tmp_path):
    out = tmp_path / "run"
    flags = [flag for flag in COPY if flag not in ("--threads", "1")]
    assert main([*flags, "--threads", "1", "--max-steps", "1", "--out", str(out)]) == 0
    with pytest.warns(
        UserWarning, match=r"1 CPU thread\(s\) before step 1, 2 after: the result will not be bit-identical"
    ):
        assert main([*flags, "--threads", "2", "--max-steps", "2", "--out", str(out), "--resume"]) == 0
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["threads"] == 2 and recorded["inexact_resume"] == ["1 CPU thread(s) before step 1, 2 after"]


def test_resume_finishes_a_run_killed_before_its_averaged_model(tmp_path, capsys):
    out = tmp_path / "run"
    command = [*COPY, "--max-steps", "2", "--save-every", "1", "--average-last", "2", "--out", str(out)]
    assert main(command) == 0
    (out / "averaged.pt").unlink()  # as a kill -9 between the last checkpoint and averaged.pt leaves it
    assert main([*command, "--resume"]) == 0
    assert "the run had finished training; averaged 2" in capsys.readouterr().out
    assert load_checkpoint(out / "averaged.pt")["averaged_from"] == ["step_00000001.pt", "step_00000002.pt"]
    assert main([*command, "--resume"]) == 2  # now there is nothing left to do
    assert "is not beyond it" in capsys.readouterr().err


def test_an_interrupted_resume_leaves_no_stale_averaged_model(tmp_path, monkeypatch):
    from companion.runs import resolve_checkpoint
    from companion.train import Trainer

    out = tmp_path / "run"
    command = [*COPY, "--save-every", "1", "--average-last", "2", "--out", str(out)]
    assert main([*command, "--max-steps", "2"]) == 0
    real_save = Trainer.save_checkpoint

    def save_then_die(self, *args, **kwargs):
        real_save(self, *args, **kwargs)
        raise KeyboardInterrupt  # the resumed session is interrupted after one more checkpoint

    monkeypatch.setattr(Trainer, "save_checkpoint", save_then_die)
    assert main([*command, "--max-steps", "4", "--resume"]) == 130  # Ctrl-C's exit code, no traceback
    assert not (out / "averaged.pt").exists()
    with pytest.warns(UserWarning, match="has no averaged.pt although its run averages checkpoints"):
        assert resolve_checkpoint(out) == out / "checkpoints" / "step_00000003.pt"


def test_metrics_after_a_kill_and_resume_equal_the_uninterrupted_run(tmp_path, monkeypatch):
    from companion.train import Trainer

    def train_lines(folder):
        lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["nll"]) for r in lines if r["kind"] == "train"]

    command = [*COPY, "--save-every", "3", "--log-every", "4", "--max-steps", "8"]
    assert main([*command, "--out", str(tmp_path / "whole")]) == 0
    real_save = Trainer.save_checkpoint

    def kill_after_step_3(self, *args, **kwargs):
        path = real_save(self, *args, **kwargs)
        if self.state.step == 3:
            raise KeyboardInterrupt  # a kill right after the checkpoint of step 3, mid-way through a log window
        return path

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "save_checkpoint", kill_after_step_3)
        assert main([*command, "--out", str(tmp_path / "killed")]) == 130
    assert main([*command, "--out", str(tmp_path / "killed"), "--resume"]) == 0
    assert train_lines(tmp_path / "killed") == train_lines(tmp_path / "whole")
