"""bench/gpu_throughput.py, the script a GPU session runs once: its CPU smoke mode works end to end and writes every
field the performance chapter reads, and without a GPU the real mode stops with a clear message."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_throughput.py"


@pytest.fixture
def token_file(tmp_path) -> pathlib.Path:
    """A file in bench/prepare_tokens.py's format: flat id arrays with offsets, 40 random pairs."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 12, (2, 40), generator=generator)
    data = {"vocab_size": 30}
    for side, side_lengths in zip(("src", "tgt"), lengths):
        data[f"{side}_flat"] = torch.randint(4, 30, (int(side_lengths.sum()),), generator=generator)
        data[f"{side}_offsets"] = torch.cat([torch.zeros(1, dtype=torch.long), side_lengths.cumsum(0)])
    path = tmp_path / "tokens.pt"
    torch.save(data, path)
    return path


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT
    )


def test_smoke_mode_measures_eager_with_and_without_fused_qkv(token_file, tmp_path):
    out = tmp_path / "result.json"
    done = run_script(
        "--data",
        str(token_file),
        "--smoke",
        "--max-tokens",
        "200",
        "--steps",
        "2",
        "--warmup-steps",
        "1",
        "--modes",
        "eager,eager-separate-qkv",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert [m["mode"] for m in result["modes"]] == ["eager", "eager-separate-qkv"]
    for mode in result["modes"]:
        assert mode["target_tokens_per_second"] > 0 and mode["model_flops_per_second"] > 0
        assert 0 < mode["mfu_vs_peak"] < 1
        assert mode["sdpa_backend"] != ""
    assert result["parameters"] > 0 and result["peak_flops"] == 989e12
    assert {"date", "command", "hardware"} <= set(result), "chapter 7 prints where and how it was measured"


def test_unknown_mode_is_refused(token_file):
    done = run_script("--data", str(token_file), "--smoke", "--modes", "eager,turbo")
    assert done.returncode == 2 and "--modes takes eager, compile and/or eager-separate-qkv" in done.stderr


def test_missing_data_file_is_named(tmp_path):
    done = run_script("--data", str(tmp_path / "absent.pt"), "--smoke")
    assert done.returncode == 2 and "absent.pt does not exist" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour on a machine without CUDA")
def test_without_cuda_the_real_mode_stops_with_a_clear_message(token_file):
    done = run_script("--data", str(token_file))
    assert done.returncode == 2
    assert "needs a CUDA GPU" in done.stderr and "--smoke" in done.stderr
