"""The run-folder lock: one run per folder, a lock left by a killed run recognised as stale."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from ..errors import RunError, RunLockedError

try:
    import fcntl  # Linux, macOS: kernel locks, released whenever the holder dies
except ImportError:  # Windows: an exclusively created file naming its holder's pid
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "RunFolderLock"]

LOCK_FILE = ".lock"


def _pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    except OSError:
        return False
    return True


def _lock_holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {holder['pid']} on {holder.get('host', '?')}, since {holder.get('since', '?')}"
    except (OSError, ValueError, KeyError, TypeError):
        return "an unknown process"


class RunFolderLock:
    """An exclusive lock on a run folder for the whole life of a run: ``DIR/.lock`` holds the holder's pid.

    Where the OS offers ``fcntl.flock`` (Linux, macOS) the lock is a kernel lock on that file, released
    when the process ends however it ends, so a lock file left by a killed run is recognised as stale and
    taken over. Elsewhere the file is created exclusively and a file whose pid no longer runs is stale.
    A second run into the same folder gets :class:`~companion.errors.RunLockedError` naming the holder.
    ``stale`` tells afterwards whether a stale lock file was found (and replaced).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.stale: str | None = None
        self._fd: int | None = None

    def __enter__(self) -> RunFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        if fcntl is None:
            self._acquire_by_pid()
            return
        for _ in range(100):  # retried only when the file was replaced between open and lock
            fd = self._open(os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise RunLockedError(self._busy_message()) from None
            try:
                same_file = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                self._fd = fd
                self._note_stale()
                self._write_holder()
                return
            os.close(fd)
        raise RunLockedError(f"could not lock {self.path}: it keeps being replaced by another process")

    def _acquire_by_pid(self) -> None:
        for _ in range(2):
            try:
                self._fd = self._open(os.O_RDWR | os.O_CREAT | os.O_EXCL)
                self._write_holder()
                return
            except FileExistsError:
                try:
                    pid = int(json.loads(self.path.read_text(encoding="utf-8"))["pid"])
                except (OSError, ValueError, KeyError, TypeError):
                    pid = -1
                if pid > 0 and _pid_alive(pid):
                    raise RunLockedError(self._busy_message()) from None
                self.stale = _lock_holder(self.path)
                self.path.unlink(missing_ok=True)
        raise RunLockedError(self._busy_message())

    def _open(self, flags: int) -> int:
        try:
            return os.open(self.path, flags, 0o644)
        except FileExistsError:
            raise
        except OSError as error:
            raise RunError(
                f"--out {self.path.parent}: cannot write into the folder ({error.strerror or error})"
            ) from None

    def _busy_message(self) -> str:
        return (
            f"--out {self.path.parent} is in use by another run ({_lock_holder(self.path)}): two runs in "
            "one folder would mix their checkpoints and logs. Wait for it to finish, or choose another "
            f"folder. (If no such process runs, delete {self.path}.)"
        )

    def _note_stale(self) -> None:
        if self.path.stat().st_size:  # a lock file that nobody holds: its run ended without removing it
            self.stale = _lock_holder(self.path)

    def _write_holder(self) -> None:
        assert self._fd is not None
        record = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        ).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, record, 0) if hasattr(os, "pwrite") else os.write(self._fd, record)

    def release(self) -> None:
        """Remove the lock file and drop the lock (the file first, so that nobody locks a dying file)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None
