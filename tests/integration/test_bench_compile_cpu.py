"""bench/compile_cpu.py: the steady rate comes from the training log lines after the skipped steps, a log without
any is refused with a message naming the file, and the compiler cache is a fresh folder that is removed after."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import compile_cpu  # noqa: E402


def _run_folder(folder: pathlib.Path, rates: dict[int, float]) -> pathlib.Path:
    """A run folder whose metrics.jsonl logs ``rates`` (step -> tokens/s) and one validation line."""
    lines = [{"kind": "train", "step": step, "tokens_per_s": rate} for step, rate in rates.items()]
    lines.append({"kind": "valid", "step": max(rates), "valid_loss": 3.0})
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return folder


def test_steady_rate_is_the_median_after_the_skipped_steps(tmp_path):
    metrics = _run_folder(tmp_path, {25: 100.0, 50: 200.0, 75: 9000.0, 100: 10000.0, 125: 11000.0})
    steady = compile_cpu.steady_tokens_per_second(metrics, skip=50)
    assert steady == {"median": 10000.0, "min": 9000.0, "max": 11000.0, "intervals": 3}


def test_a_log_with_nothing_after_the_skipped_steps_is_refused(tmp_path):
    metrics = _run_folder(tmp_path, {25: 100.0, 50: 200.0})
    with pytest.raises(SystemExit, match="no training log line after step 50"):
        compile_cpu.steady_tokens_per_second(metrics, skip=50)


def test_skip_must_be_below_steps():
    with pytest.raises(SystemExit):
        compile_cpu.main(["--steps", "100", "--skip", "100"])


def test_the_compiler_cache_is_a_fresh_folder_removed_afterwards(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    with compile_cpu.cold_compiler_cache():
        folder = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        assert folder.is_dir() and not any(folder.iterdir())
    assert not folder.exists()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/else"
