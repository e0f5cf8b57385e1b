"""Helpers shared by the benchmark scripts: hardware description, result files, Multi30k token batches."""

from __future__ import annotations

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
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu": cpu,
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
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


def write_results(name: str, payload: dict[str, Any]) -> pathlib.Path:
    """Write ``bench/results/<name>.json`` atomically, with date, hardware and command added."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        "hardware": hardware(),
        **payload,
    }
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path
