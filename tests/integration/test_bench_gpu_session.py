"""bench/gpu_session.py, the one command a GPU session runs: prepared here, run in smoke mode on the CPU through every
phase (the device tests, throughput, the quality run), collected into results files; and its clear refusals."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_session.py"

pytestmark = pytest.mark.slow


def session(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COMPANION_DATA_DIR"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT
    )


@pytest.fixture
def token_files(multi30k_folder, tmp_path) -> list[str]:
    files = ["--data", str(tmp_path / "bpe.pt")]
    done = session("prepare", "--data-dir", str(multi30k_folder), *files)
    assert done.returncode == 0, done.stderr
    return files


def test_every_phase_runs_in_smoke_mode_and_collect_writes_the_results(token_files, tmp_path):
    out, results = tmp_path / "out", tmp_path / "results"
    done = session("run", "--smoke", "--out", str(out), *token_files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_throughput.json",
        "multi30k_gpu_raw.json",
        "quality.log",
        "session.json",
        "tests.log",
        "throughput.log",
    ]
    record = json.loads((out / "session.json").read_text())
    assert [p["phase"] for p in record["phases"]] == ["tests", "throughput", "quality"]
    assert all(p["returncode"] == 0 and not p["timed_out"] for p in record["phases"])
    tests = record["phases"][0]
    assert "passed" in tests["summary"] and "failed" not in tests["summary"]  # the device tests ran on the CPU
    assert record["smoke"] is True and record["environment"]["cuda_available"] == torch.cuda.is_available()
    assert {"date", "command", "hardware"} <= set(record) and record["wall_seconds"] > 0

    done = session("collect", str(out), "--results-dir", str(results), *token_files)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in results.iterdir()) == [
        "gpu_session_smoke.json",
        "gpu_throughput_smoke.json",
        "multi30k_smoke.json",
    ]
    scored = json.loads((results / "multi30k_smoke.json").read_text())
    assert set(scored["results"]) == {"de-en"} and scored["results"]["de-en"]["alpha_choice"]["chosen_on"] == "valid"


def test_a_failing_phase_is_recorded_and_the_later_ones_still_run(tmp_path):
    out = tmp_path / "out"
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a token file")
    done = session("run", "--smoke", "--out", str(out), "--phases", "throughput", "tests", "--data", str(broken))
    assert done.returncode == 1 and "failed: throughput" in done.stdout
    phases = json.loads((out / "session.json").read_text())["phases"]
    assert [p["phase"] for p in phases] == ["throughput", "tests"]
    assert phases[0]["returncode"] != 0 and phases[1]["returncode"] == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour on a machine without CUDA")
def test_run_without_cuda_stops_with_a_clear_message(token_files, tmp_path):
    done = session("run", "--out", str(tmp_path / "out"), *token_files)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr and "--smoke" in done.stderr


def test_missing_inputs_are_named(tmp_path):
    done = session("run", "--smoke", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "absent.pt"))
    assert (
        done.returncode == 2 and "absent.pt does not exist" in done.stderr and "gpu_session.py prepare" in done.stderr
    )
    (tmp_path / "bpe.pt").write_bytes(b"")
    done = session("collect", str(tmp_path), "--data", str(tmp_path / "bpe.pt"))
    assert done.returncode != 0 and "no session.json" in done.stderr
