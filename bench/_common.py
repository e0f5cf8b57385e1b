"""Helpers shared by the benchmark scripts: hardware description, result files, token-id files, learning curves."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import pathlib
import platform
import shlex
import sys
from typing import Any

import torch

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def hardware() -> dict[str, Any]:
    """CPU model, core count, GPU name and library versions, for the results file."""
    cpu = platform.processor() or platform.machine()
    bf16_flags: list[str] | None = None  # None: unknown (no /proc/cpuinfo)
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:  # the first processor's entries
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    for line in lines:
        if line.startswith("flags"):
            # bfloat16 arithmetic in hardware (AVX-512 BF16, Intel AMX): what --cpu-bf16 needs to pay
            bf16_flags = sorted({f for f in line.split(":", 1)[1].split() if "bf16" in f or f.startswith("amx")})
            break
    info: dict[str, Any] = {
        "cpu": cpu,
        "cpu_cores": os.cpu_count(),
        "cpu_bf16_flags": bf16_flags,
        "torch_threads": torch.get_num_threads(),
        # OpenMP's wait policy (None: OpenMP's default): PASSIVE slows small CPU kernels down (bench/multi30k.py)
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    if hasattr(os, "getloadavg"):
        info["load_average_1_5_15_min"] = [round(x, 2) for x in os.getloadavg()]
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def command_line() -> str:
    """The command that produced the results (as typed, relative to the repository root)."""
    return " ".join(shlex.quote(arg) for arg in ["python", *sys.argv])


def with_provenance(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with the date, the command and the hardware of this run in front (payload keys win)."""
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "hardware": hardware(),
        **payload,
    }


def _results_stem_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a results file stem, or None."""
    if name and pathlib.Path(name).name == name and not name.endswith(".json") and not name.startswith("."):
        return None
    return f"results name must be a file stem such as 'decode_speed_xeon' (written to {RESULTS}), got {name!r}"


def results_stem(name: str) -> str:
    """``argparse`` type of a ``--results STEM`` option: refuses a folder or a ``.json`` before anything runs."""
    problem = _results_stem_problem(name)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return name


def write_results(name: str, payload: dict[str, Any]) -> pathlib.Path:
    """Write ``bench/results/<name>.json`` atomically, with date, hardware and command added. ``name`` is a file
    stem (``decode_speed_xeon``): no folder, no ``.json``."""
    problem = _results_stem_problem(name)
    if problem:
        raise ValueError(problem)
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = with_provenance(payload)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def flatten(sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists -> (flat int32 ids, int64 offsets): a compact form that ``torch.load(weights_only=True)`` reads."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    return torch.tensor([i for s in sequences for i in s], dtype=torch.int32), offsets


def unflatten(flat: torch.Tensor, offsets: torch.Tensor) -> list[list[int]]:
    """Inverse of :func:`flatten`."""
    ids, bounds = flat.tolist(), offsets.tolist()
    return [ids[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


def train_options(flags: list[str]) -> dict[str, Any]:
    """``companion train`` flags (``["train", "--src", "de", ...]``) parsed by the command line's own parser, as
    the options dict ``companion.runs.train_run`` takes (companion is imported here, not with this module)."""
    from companion.cli import build_parser

    return {k: v for k, v in vars(build_parser().parse_args(flags)).items() if k != "command"}


def train_log(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    """The training lines (``"kind": "train"``, one per logging interval) of a run's ``metrics.jsonl``."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, filter(str.strip, lines)) if r.get("kind") == "train"]


def learning_curve(run_dir: pathlib.Path) -> dict[str, list]:
    """A training run's ``metrics.jsonl`` as columns: minutes of training, step, epoch, NLL per target token (mean
    over the last logging interval, dropout on) and learning rate."""
    train = train_log(run_dir)
    return {
        "train_minutes": [round(r["train_seconds"] / 60, 3) for r in train],
        "step": [r["step"] for r in train],
        "epoch": [round(r["epoch"], 3) for r in train],
        "nll": [round(r["nll"], 4) for r in train],
        "lr": [r["lr"] for r in train],
    }
