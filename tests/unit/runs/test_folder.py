"""The output folder of a training run: refused when it is not a folder or holds a run, replaced or continued only
on request, with a clear error when it cannot be made or written."""

from __future__ import annotations

import errno
import json
import os

import pytest
from _run_helpers import COPY

from companion.checkpoint import list_checkpoints, load_checkpoint
from companion.cli import main
from companion.errors import RunError
from companion.runs import prepare_out_dir

pytestmark = pytest.mark.usefixtures("one_thread")


def test_out_under_a_file_or_being_a_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "a_file" / "run")]) == 2
    assert "cannot create the folder (Not a directory)" in capsys.readouterr().err
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "a_file")]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err


def test_an_unwritable_out_folder_is_a_clear_error(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    out.mkdir()
    real_open = os.open

    def refuse(path, *args, **kwargs):  # what a folder without write permission does (tests may run as root)
        if str(path).startswith(str(out)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    assert f"--out {out}: cannot write into the folder (Permission denied)" in capsys.readouterr().err


def test_resume_and_overwrite_contradict_and_resume_needs_a_run(tmp_path):
    with pytest.raises(RunError, match="contradict each other"):
        prepare_out_dir(tmp_path, resume=True, overwrite=True)
    with pytest.raises(RunError, match="holds no run to resume"):
        prepare_out_dir(tmp_path / "absent", resume=True, overwrite=False)
    with pytest.raises(RunError, match="holds no run to resume"):
        prepare_out_dir(tmp_path, resume=True, overwrite=False)  # a folder, but no run in it
    assert not (tmp_path / ".lock").exists()  # the lock taken for the check is released


def test_a_prepared_folder_holds_the_lock_until_released(tmp_path):
    folder = prepare_out_dir(tmp_path / "run", resume=False, overwrite=False)
    assert folder.resume_from is None and (tmp_path / "run" / ".lock").exists()
    folder.release()
    assert not (tmp_path / "run" / ".lock").exists()


@pytest.mark.slow  # three short training runs
def test_out_folder_with_a_run_is_refused_then_overwritten_or_resumed(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "3", "--save-every", "1", "--out", str(out)]) == 0
    assert [p.name for p in list_checkpoints(out / "checkpoints")][-1] == "step_00000003.pt"
    (out / "notes.txt").write_text("mine")
    first_log = (out / "metrics.jsonl").read_bytes()

    assert main([*COPY, "--max-steps", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert (out / "metrics.jsonl").read_bytes() == first_log  # nothing touched

    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume", "--preset", "small"]) == 2
    assert "--preset 'small' (the run used 'tiny')" in capsys.readouterr().err
    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume", "--heads", "2"]) == 2
    assert "--heads 2 (the run used 4)" in capsys.readouterr().err  # the flag's name, not the field's
    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume", "--norm-first"]) == 2
    assert "--norm-first (the run used False)" in capsys.readouterr().err

    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume"]) == 0
    assert "resumed at step 3" in capsys.readouterr().out
    assert load_checkpoint(list_checkpoints(out / "checkpoints")[-1])["step"] == 5
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)

    assert main([*COPY, "--max-steps", "2", "--out", str(out), "--overwrite"]) == 0
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step_00000002.pt"]
    assert (out / "notes.txt").read_text() == "mine"  # only the run's own files were replaced

    assert main([*COPY, "--max-steps", "2", "--out", str(tmp_path / "fresh"), "--resume"]) == 2
    assert "no run to resume" in capsys.readouterr().err


# -- --overwrite deletes only what the run wrote -------------------------------------------------------------------
def test_a_folder_with_only_the_users_own_checkpoints_folder_is_not_a_run(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "best_for_paper.pt").write_bytes(b"the user's own file")
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0  # not "already holds a run"
    assert main([*COPY, "--max-steps", "1", "--out", str(out), "--overwrite"]) == 0
    assert (out / "checkpoints" / "best_for_paper.pt").read_bytes() == b"the user's own file"
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step_00000001.pt"]


def test_overwrite_keeps_a_users_file_inside_the_runs_checkpoints_and_says_what_it_deletes(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "2", "--save-every", "1", "--out", str(out)]) == 0
    (out / "checkpoints" / "best_for_paper.pt").write_bytes(b"mine")
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        "--overwrite" in err and "it deletes run.json, metrics.jsonl, averaged.pt and 2 file(s) in checkpoints/" in err
    )
    assert main([*COPY, "--max-steps", "1", "--out", str(out), "--overwrite"]) == 0
    assert (out / "checkpoints" / "best_for_paper.pt").read_bytes() == b"mine"
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step_00000001.pt"]


def test_step_files_without_a_run_record_are_neither_replaced_nor_continued(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "step_00000007.pt").write_bytes(b"another tool's file")
    for extra in ([], ["--overwrite"], ["--resume"]):
        assert main([*COPY, "--max-steps", "1", "--out", str(out), *extra]) == 2
        assert "but no run.json: not a run of companion train" in capsys.readouterr().err
    assert (out / "checkpoints" / "step_00000007.pt").read_bytes() == b"another tool's file"


def test_overwrite_through_a_symlinked_checkpoints_folder(tmp_path):
    out, elsewhere = tmp_path / "run", tmp_path / "big_disk"
    elsewhere.mkdir()
    out.mkdir()
    (out / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    assert main([*COPY, "--max-steps", "2", "--save-every", "1", "--out", str(out)]) == 0
    (elsewhere / "notes.txt").write_text("mine")
    assert main([*COPY, "--max-steps", "1", "--out", str(out), "--overwrite"]) == 0
    assert (out / "checkpoints").is_symlink() and (elsewhere / "notes.txt").read_text() == "mine"
    assert [p.name for p in list_checkpoints(elsewhere)] == ["step_00000001.pt"]


def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing_that_blocks_a_retry(tmp_path, monkeypatch):
    from companion.errors import TrainingDivergedError
    from companion.train import Trainer

    out = tmp_path / "run"

    def fail(self):
        raise TrainingDivergedError("the first step diverged")

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "train", fail)
        assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    assert not (out / "run.json").exists() and not (out / ".lock").exists()
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0  # no --overwrite needed


def test_a_successful_resume_cleans_up_the_temp_files_of_killed_writes(tmp_path):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0
    leftovers = [out / ".averaged.pt.ab12.tmp", out / ".run.json.tmp", out / "checkpoints" / ".step_00000002.pt.x.tmp"]
    for path in leftovers:
        path.write_bytes(b"torn")
    (out / "keep.tmp").write_text("not ours")
    assert main([*COPY, "--max-steps", "2", "--out", str(out), "--resume"]) == 0
    assert not any(path.exists() for path in leftovers) and (out / "keep.tmp").exists()
