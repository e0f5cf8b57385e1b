"""``companion.devices.keep_freed_memory``: freed memory stays in the process (glibc's malloc thresholds).

The effect is observed where it happens, in a fresh interpreter each time (the setting holds for a whole process):
a 64 MiB tensor is allocated and freed, and the process's resident memory is read before and after. With glibc's
defaults the block is mapped on its own and unmapped when freed, so the resident memory drops by about 64 MiB; with
the setting the block comes from the heap and stays for the next allocation.
"""

from __future__ import annotations

import os

import pytest

import companion._allocator as allocator
from companion.book.experiments.performance import memory_returned_after_free
from companion.devices import keep_freed_memory

MiB = 1 << 20
on_glibc = pytest.mark.skipif(not allocator._glibc(), reason="glibc's setting (Linux): elsewhere nothing changes")


def freed_block(keep: bool, **env: str) -> dict:
    """memory_returned_after_free in a child whose environment holds no malloc setting but ``env``."""
    chosen = (*allocator._USER_SETTINGS, "GLIBC_TUNABLES", "LD_PRELOAD")
    clean = {k: v for k, v in os.environ.items() if k not in chosen}
    return memory_returned_after_free(keep, 64, {**clean, **env})


@on_glibc
def test_without_the_setting_a_freed_large_block_goes_back_to_the_system():
    assert freed_block(False)["returned_bytes"] > 48 * MiB  # the control: the measurement sees glibc's default


@on_glibc
def test_with_the_setting_a_freed_large_block_stays_in_the_process():
    result = freed_block(True)
    assert result["kept"] is True
    assert result["returned_bytes"] < 8 * MiB


@on_glibc
def test_the_users_own_malloc_settings_stand():
    result = freed_block(True, MALLOC_TRIM_THRESHOLD_="131072")
    assert result["kept"] is False
    assert result["returned_bytes"] > 48 * MiB  # glibc's behaviour under the user's setting, untouched


def test_user_settings_are_recognised():
    assert allocator.user_chose_malloc_settings({"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert allocator.user_chose_malloc_settings({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"})
    assert allocator.user_chose_malloc_settings({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"})
    assert not allocator.user_chose_malloc_settings({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert not allocator.user_chose_malloc_settings({"LD_PRELOAD": "/usr/lib/libfaketime.so.1"})
    assert not allocator.user_chose_malloc_settings({})


def test_calling_it_again_changes_nothing(monkeypatch):
    monkeypatch.setattr(allocator, "_kept", None)
    monkeypatch.setattr(allocator, "can_keep_freed_memory", lambda: True)
    calls = []
    monkeypatch.setattr(allocator, "_set_thresholds", lambda: calls.append(1) or True)
    assert keep_freed_memory() is True and keep_freed_memory() is True
    assert calls == [1]


def test_elsewhere_than_glibc_nothing_is_changed(monkeypatch):
    def must_not_run() -> bool:
        raise AssertionError("mallopt called where the C library is not glibc")

    monkeypatch.setattr(allocator, "_kept", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: False)
    monkeypatch.setattr(allocator, "_set_thresholds", must_not_run)
    assert allocator.can_keep_freed_memory() is False
    assert keep_freed_memory() is False
