"""The data-scale benchmark runs end to end on a tiny corpus and reports time, throughput and peak memory."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "data_scale.py"


@pytest.mark.slow
def test_data_scale_smoke(tmp_path):
    output = tmp_path / "result.json"
    command = [sys.executable, str(BENCH), "--smoke", "--workers", "2", "--output", str(output)]
    subprocess.run([*command, "--work-dir", str(tmp_path / "work")], check=True, capture_output=True, timeout=600)
    record = json.loads(output.read_text())
    assert record["command"].startswith("python ") and record["hardware"]["cpu_cores"] >= 1
    (run,) = record["runs"]
    assert run["pairs"] == 2000 and run["batches"] > 1
    assert sum(run["rank_share_rows"][:2]) == run["first_batch_rows"][0]  # two ranks share the first batch
    assert run["peak_rss_mib"]["self"] > 0 and run["peak_rss_mib"]["largest_worker"] > 0
    assert set(run["seconds"]) >= {"identity_sha256", "tokenizer_training", "token_store", "batch_plan", "total"}
    assert len(run["load_average_before"]) == 3
    assert not (tmp_path / "work" / "stores-2000").exists()  # the token store is removed after measuring
