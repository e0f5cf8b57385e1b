"""The run-folder lock: one run per folder for the whole run, a stale lock of a killed run taken over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _run_helpers import COPY

from companion.cli import main
from companion.errors import RunLockedError, TrainingDivergedError
from companion.runs import RunFolderLock
from companion.runs import train as train_module

pytestmark = pytest.mark.usefixtures("one_thread")

LOCK_HOLDER = """
import sys
from companion.runs import RunFolderLock
with RunFolderLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.slow  # a second Python process
def test_a_second_run_into_a_locked_folder_is_refused_and_a_stale_lock_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert holder.stdout.readline().strip() == "locked"  # waits for the other process, not for a clock
        assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another run (pid {holder.pid}" in err
        assert not (out / "checkpoints").exists() and not (out / "run.json").exists()
    finally:
        holder.stdin.close()
        holder.wait()
    assert not (out / ".lock").exists()  # released on exit
    # a lock file whose holder was killed (kill -9 leaves the file): recognised as stale and taken over
    (out / ".lock").write_text(json.dumps({"pid": holder.pid, "host": "h", "since": "then"}))
    with pytest.warns(UserWarning, match=f"stale lock .*pid {holder.pid}"):
        assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0
    assert not (out / ".lock").exists() and (out / "checkpoints").is_dir()


def test_the_lock_is_held_for_the_whole_run_and_released_after_a_failure(tmp_path, monkeypatch):
    out = tmp_path / "run"
    seen = []

    def build_and_try_a_second_lock(*args, **kwargs):
        with pytest.raises(RunLockedError, match="in use by another run"):
            RunFolderLock(out).acquire()  # even from the same process: one run per folder
        seen.append(1)
        raise TrainingDivergedError("stop here")

    monkeypatch.setattr(train_module, "build_run_data", build_and_try_a_second_lock)
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    assert seen and not (out / ".lock").exists()


def test_deleting_the_lock_file_of_a_live_run_does_not_let_a_second_run_in(tmp_path):
    with RunFolderLock(tmp_path) as lock:
        lock.path.unlink()  # what the old busy message suggested
        with pytest.raises(RunLockedError) as caught:
            RunFolderLock(tmp_path).acquire()
    assert "delete" not in str(caught.value) and "released when that process ends" in str(caught.value)
    with RunFolderLock(tmp_path):  # released with the run
        pass


def test_a_lock_file_that_is_a_folder_is_named_as_such(tmp_path):
    from companion.errors import RunError

    (tmp_path / ".lock").mkdir()
    with pytest.raises(RunError, match=r"\.lock is a folder, not a run's lock file"):
        RunFolderLock(tmp_path).acquire()


def test_a_full_disk_while_writing_the_lock_is_a_clear_error(tmp_path, monkeypatch):
    import errno
    import os

    from companion.errors import RunError

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(RunError, match=r"cannot write the lock file \.lock \(No space left on device\)"):
        RunFolderLock(tmp_path).acquire()
    monkeypatch.undo()
    assert not (tmp_path / ".lock").exists()
    with RunFolderLock(tmp_path):  # nothing left locked
        pass


@pytest.mark.parametrize("umask, mode", [(0o002, 0o664), (0o077, 0o600)])
def test_the_lock_and_the_run_record_follow_the_umask(umask, mode, tmp_path):
    import os

    out = tmp_path / "run"
    old = os.umask(umask)
    try:
        with RunFolderLock(tmp_path) as lock:
            assert lock.path.stat().st_mode & 0o777 == mode
        assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert (out / "run.json").stat().st_mode & 0o777 == mode
