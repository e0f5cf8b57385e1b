"""bench/multi30k_gpu.py, the GPU quality pipeline (prepare here, train on the GPU machine, score here): the whole
pipeline runs on the CPU in smoke mode and writes a results file in the format chapter 6 reads."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from companion.evaluate import ALPHA_GRID

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "multi30k_gpu.py"


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COMPANION_DATA_DIR"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT
    )


def test_prepare_train_score_pipeline_in_smoke_mode(multi30k_folder, tmp_path):
    data, raw, results = tmp_path / "bpe.pt", tmp_path / "raw.json", tmp_path / "results.json"
    done = run("prepare", "--data-dir", str(multi30k_folder), "--vocab-size", "120", "--out", str(data))
    assert done.returncode == 0, done.stderr
    stored = torch.load(data, weights_only=True)  # plain tensors and strings only: loadable without pickle
    assert len(json.loads(stored["references"])["de"]) == 12 and len(json.loads(stored["valid_references"])["en"]) == 10
    done = run("train", "--data", str(data), "--smoke", "--minutes", "1", "--max-steps", "4", "--out", str(raw))
    assert done.returncode == 0, done.stderr
    outputs = json.loads(raw.read_text())
    assert set(outputs["results"]) == {"de-en", "en-de"} and outputs["device"] == "cpu"
    for r in outputs["results"].values():  # each split decoded once, its winners kept under every alpha
        assert r["steps"] == 4 and set(r["hypothesis_ids_by_alpha"]) == {"valid", "test"}
        assert all(
            set(by_alpha) == {f"{a:g}" for a in ALPHA_GRID} for by_alpha in r["hypothesis_ids_by_alpha"].values()
        )
        assert all(len(ids) == 12 for ids in r["hypothesis_ids_by_alpha"]["test"].values())
    done = run("score", "--data", str(data), "--raw", str(raw), "--out", str(results))
    assert done.returncode == 0, done.stderr
    record = json.loads(results.read_text())
    for direction in ("de-en", "en-de"):
        r = record["results"][direction]
        assert 0 <= r["bleu"] <= 100 and r["bleu_signature"].startswith("nrefs:1") and r["sentences"] == 12
        assert r["target_bleu"] is None and r["meets_target"] is None  # smoke runs are not measurements
        assert r["learning_curve"]["step"] and "hypothesis_ids_by_alpha" not in r
        choice = r["alpha_choice"]  # chosen on the validation split, as companion choose-alpha chooses
        best = max(choice["bleu"].values())
        assert (
            r["alpha"] == min(float(a) for a, b in choice["bleu"].items() if b == best)
            and choice["chosen_on"] == "valid"
        )
        assert 0 <= r["bleu_at_paper_alpha"] <= 100
        assert len(r["example_translations"]) == 5 and all(isinstance(t, str) for t in r["example_translations"])
    assert record["hardware"] == outputs["hardware"] and record["command"] == outputs["command"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour on a machine without CUDA")
def test_train_without_cuda_stops_with_a_clear_message(multi30k_folder, tmp_path):
    data = tmp_path / "bpe.pt"
    assert run("prepare", "--data-dir", str(multi30k_folder), "--vocab-size", "120", "--out", str(data)).returncode == 0
    done = run("train", "--data", str(data), "--out", str(tmp_path / "raw.json"))
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr and "--smoke" in done.stderr


def test_missing_input_files_are_named(tmp_path):
    done = run("score", "--data", str(tmp_path / "absent.pt"), "--raw", str(tmp_path / "raw.json"))
    assert done.returncode == 2 and "--data" in done.stderr and "absent.pt does not exist" in done.stderr
