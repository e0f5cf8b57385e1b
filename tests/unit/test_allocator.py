"""``companion.devices.keep_freed_memory``: freed memory stays in the process (glibc's malloc thresholds).

The effect is observed where it happens, in a fresh interpreter each time (the setting holds for a whole process):
a 64 MiB tensor is allocated and freed, and the process's resident memory is read before and after. With glibc's
defaults the block is mapped on its own and unmapped when freed, so the resident memory drops by about 64 MiB; with
the setting the block comes from the heap and stays for the next allocation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import companion._allocator as allocator
from companion.devices import keep_freed_memory

MiB = 1 << 20
CHILD = """
import json, os, sys
import torch
from companion.devices import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
again = keep_freed_memory() if sys.argv[1] == "keep" else None
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = torch.ones(64 * 2**20 // 4)  # 64 MiB of float32, every page touched
held = resident()
del block
print(json.dumps({"applied": applied, "again": again, "released": held - resident()}))
"""

on_glibc = pytest.mark.skipif(not allocator._glibc(), reason="glibc's setting (Linux): elsewhere nothing changes")


def freed_block(mode: str, **env: str) -> dict:
    """Run CHILD in a fresh interpreter (``mode`` "keep" calls keep_freed_memory first) with ``env`` added."""
    clean = {k: v for k, v in os.environ.items() if k not in allocator._USER_SETTINGS and k != "GLIBC_TUNABLES"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@on_glibc
def test_without_the_setting_a_freed_large_block_goes_back_to_the_system():
    assert freed_block("default")["released"] > 48 * MiB  # the control: the measurement sees glibc's default


@on_glibc
def test_with_the_setting_a_freed_large_block_stays_in_the_process():
    result = freed_block("keep")
    assert result["applied"] is True and result["again"] is True
    assert result["released"] < 8 * MiB


@on_glibc
def test_the_users_own_malloc_settings_stand():
    result = freed_block("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert result["applied"] is False
    assert result["released"] > 48 * MiB  # glibc's behaviour under the user's setting, untouched


def test_user_settings_are_recognised():
    assert allocator.user_chose_malloc_settings({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert allocator.user_chose_malloc_settings({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"})
    assert not allocator.user_chose_malloc_settings({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert not allocator.user_chose_malloc_settings({})


def test_elsewhere_than_glibc_nothing_is_changed(monkeypatch):
    def must_not_run() -> bool:
        raise AssertionError("mallopt called where the C library is not glibc")

    monkeypatch.setattr(allocator, "_kept", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: False)
    monkeypatch.setattr(allocator, "_set_thresholds", must_not_run)
    assert keep_freed_memory() is False
