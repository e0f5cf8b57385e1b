"""Keep the memory a CPU run frees inside the process, instead of returning it to the system at every step.

A performance detail of the runs, not a concept of the book. On Linux, glibc's ``malloc`` serves a large block
(above ``M_MMAP_THRESHOLD``: 128 KiB at start, rising with the blocks freed to at most 32 MiB) with a mapping of its
own and unmaps it when the block is freed, and it trims the top of its heap back to the system whenever more than
``M_TRIM_THRESHOLD`` is free there. A training step allocates and frees tens of megabytes of activations, gradients
and scores over the vocabulary, so every step maps fresh pages again, and the system zero-fills each page at its
first touch (a page fault per 4 KiB page, dearer inside a virtual machine). The arithmetic never changes, only
where the memory comes from.

:func:`keep_freed_memory` raises both thresholds to 1 GiB with ``mallopt``: blocks up to that size come from the
heap, and freed memory stays there for the next step. The price is that the process keeps the memory of its largest
step until it exits, which is what a training or decoding run needs again anyway. On the 2-core Intel Xeon virtual
machine of ``bench/allocator_speed.py`` a training step of the default model became about 1.3x faster; the
benchmark records the measurement. It is what glibc's own environment variables do
(``MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824``), applied from inside the process, so a
user who sets those variables (or a ``glibc.malloc`` tunable in ``GLIBC_TUNABLES``) keeps their choice, and a process
whose ``LD_PRELOAD`` brings another allocator (tcmalloc, jemalloc, mimalloc: names with ``malloc`` in them) is left
to it.
"""

from __future__ import annotations

import ctypes
import os
import sys

THRESHOLD = 1 << 30  # bytes: blocks up to 1 GiB come from the heap; up to 1 GiB free at its top stays there
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_kept: bool | None = None  # the outcome of the first call: the settings hold for the whole process


def _glibc() -> bool:
    """Whether this process runs on Linux with GNU libc (whose ``mallopt`` takes the two thresholds)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # the name is unknown where the C library is not glibc (musl, ...)
        return False


def user_chose_malloc_settings(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether the environment sets glibc's malloc thresholds itself, or preloads another allocator (then
    :func:`keep_freed_memory` leaves the process as it is)."""
    env = os.environ if environ is None else environ
    preloaded = "malloc" in env.get("LD_PRELOAD", "")
    return any(name in env for name in _USER_SETTINGS) or "glibc.malloc" in env.get("GLIBC_TUNABLES", "") or preloaded


def can_keep_freed_memory() -> bool:
    """Whether :func:`keep_freed_memory` changes anything in this process: Linux with glibc's malloc, and no malloc
    setting or other allocator chosen in the environment."""
    return _glibc() and not user_chose_malloc_settings()


def _set_thresholds() -> bool:
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, THRESHOLD))


def keep_freed_memory() -> bool:
    """Keep freed memory in this process for reuse (module docstring): glibc's ``M_MMAP_THRESHOLD`` and
    ``M_TRIM_THRESHOLD`` raised to 1 GiB. For the whole process, until it exits; calling it again changes nothing.

    Returns True when the settings are in place, False where nothing was changed (:func:`can_keep_freed_memory`):
    not Linux with glibc (other C libraries and systems keep their allocator's behaviour), or the environment sets
    glibc's thresholds already (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or a ``glibc.malloc``
    tunable) or preloads another allocator (``LD_PRELOAD``): that choice stands.
    ``companion train``, ``translate`` and ``evaluate`` call it before they start.
    """
    global _kept
    if _kept is None:
        _kept = can_keep_freed_memory() and _set_thresholds()
    return _kept
