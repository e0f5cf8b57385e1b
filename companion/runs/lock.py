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
    """An exclusive lock on a run folder for the whole life of a run; ``DIR/.lock`` names the holder.

    Where the OS offers ``fcntl.flock`` (Linux, macOS) the lock is a kernel lock on the folder itself, released
    when the process ends however it ends: deleting ``.lock`` does not release it, and a ``.lock`` left by a killed
    run is recognised as stale and replaced. Elsewhere ``.lock`` is created exclusively and a file whose pid no
    longer runs is stale. A second run into the same folder (even from the same process) gets
    :class:`~companion.errors.RunLockedError` naming the holder. ``stale`` tells afterwards whether a stale lock
    file was found (and replaced).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.stale: str | None = None
        self._fd: int | None = None  # the holder file .lock
        self._folder_fd: int | None = None  # the folder, flock-ed

    def __enter__(self) -> RunFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`~companion.errors.RunLockedError` naming the run that holds it."""
        if fcntl is None:
            self._acquire_by_pid()
            return
        folder_fd = self._open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(folder_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(folder_fd)
            raise RunLockedError(self._busy_message()) from None
        self._folder_fd = folder_fd
        try:
            self._note_stale()
            self._fd = self._open(self.path, os.O_RDWR | os.O_CREAT)
            self._write_holder()
        except BaseException:
            self.release()
            raise

    def _acquire_by_pid(self) -> None:
        for _ in range(2):
            try:
                self._fd = self._open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
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

    def _open(self, path: Path, flags: int) -> int:
        if path == self.path and path.is_dir():
            raise RunError(f"--out {path.parent}: {path.name} is a folder, not a run's lock file; remove it")
        try:
            return os.open(path, flags, 0o666)  # the mode the umask allows, like any file the run writes
        except FileExistsError:
            raise
        except OSError as error:
            raise RunError(
                f"--out {self.path.parent}: cannot write into the folder ({error.strerror or error})"
            ) from None

    def _busy_message(self) -> str:
        return (
            f"--out {self.path.parent} is in use by another run ({_lock_holder(self.path)}): two runs in "
            "one folder would mix their checkpoints and logs. Wait for it to finish (its lock is released when "
            "that process ends, however it ends), or choose another folder."
        )

    def _note_stale(self) -> None:
        if self.path.is_file() and self.path.stat().st_size:  # a holder record whose run ended without removing it
            self.stale = _lock_holder(self.path)

    def _write_holder(self) -> None:
        assert self._fd is not None
        record = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        ).encode()
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, record, 0) if hasattr(os, "pwrite") else os.write(self._fd, record)
        except OSError as error:
            raise RunError(
                f"--out {self.path.parent}: cannot write the lock file {self.path.name} ({error.strerror})"
            ) from None

    def release(self) -> None:
        """Remove the lock file and drop the lock (the file first, so that nobody sees a holder that is gone)."""
        try:
            if self._fd is not None:
                self.path.unlink(missing_ok=True)
        finally:
            for name in ("_fd", "_folder_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    os.close(fd)
                    setattr(self, name, None)
