"""bench/allocator_speed.py: each measurement runs in its own process in the mode it names, the modes' outputs
must agree, and a machine where the setting changes nothing is refused rather than reported."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import pytest

import companion._allocator as allocator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import allocator_speed as bench  # noqa: E402

ARGS = argparse.Namespace(steps=1, threads=1, sentences=16, data_dir=None)


def fake_children(monkeypatch, *, kept_applies=True, same_outputs=True):
    """run_child answers without a process: the kept mode twice as fast, with the given flags."""
    calls = []

    def run_child(mode, measure, args):
        calls.append((mode, measure))
        outputs = None if measure == "train_ms_per_step" else ("a" if same_outputs or mode == "default" else "b")
        return {"keep_freed_memory": mode == "kept" and kept_applies, "value": 2.0 if mode == "default" else 1.0,
                "outputs": outputs}  # fmt: skip

    monkeypatch.setattr(bench, "run_child", run_child)
    return calls


def test_a_round_runs_every_measure_in_both_modes_alternating_which_goes_first(monkeypatch):
    calls = fake_children(monkeypatch)
    first = bench.one_round(0, ARGS)
    assert first == {measure: {"default": 2.0, "kept": 1.0} for measure in bench.MEASURES}
    bench.one_round(1, ARGS)
    assert calls[:2] == [("default", "train_ms_per_step"), ("kept", "train_ms_per_step")]
    assert calls[6:8] == [("kept", "train_ms_per_step"), ("default", "train_ms_per_step")]
    assert len(calls) == 12


def test_outputs_that_differ_between_the_modes_are_refused(monkeypatch):
    fake_children(monkeypatch, same_outputs=False)
    with pytest.raises(SystemExit, match="greedy_16_seconds: the decoded ids differ between the modes"):
        bench.one_round(0, ARGS)


def test_a_machine_where_the_setting_changes_nothing_is_refused(monkeypatch):
    fake_children(monkeypatch, kept_applies=False)
    with pytest.raises(SystemExit, match="changed nothing here"):
        bench.one_round(0, ARGS)


@pytest.mark.slow
@pytest.mark.skipif(not allocator._glibc(), reason="glibc's setting (Linux): elsewhere nothing changes")
@pytest.mark.skipif(not os.environ.get("COMPANION_DATA_DIR"), reason="needs the Multi30k test split")
def test_a_child_process_decodes_in_the_mode_it_names():
    kept = bench.run_child("kept", "greedy_16_seconds", ARGS)
    default = bench.run_child("default", "greedy_16_seconds", ARGS)
    assert kept["keep_freed_memory"] is True and default["keep_freed_memory"] is False
    assert kept["outputs"] == default["outputs"] and len(kept["outputs"]) == 64
    assert kept["value"] > 0 and default["value"] > 0
