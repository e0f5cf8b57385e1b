"""The one command a GPU session runs: the tests on CUDA, training throughput and MFU, and a de->en quality run.

A task that is lent a GPU machine gets about 15 minutes of device time in all (the machine's start included), at most
10 minutes per command, on a machine that has PyTorch but not spaCy or Hugging Face ``datasets``. So the work is
prepared here, run there in one call, and scored here:

    python bench/gpu_session.py prepare                  # here: the token file bench/data/multi30k_bpe.pt
    python3 bench/gpu_session.py run --out $OUT           # on the GPU machine, one call that carries bench/data
    python bench/gpu_session.py collect FOLDER            # here, on the files that came back: bench/results/

``run`` goes through four phases in order, each in its own process with its own log and time limit, and rewrites
``session.json`` after each one (its command, exit code, seconds, and the tests' summary line), so a phase that fails
or is cut off leaves the others' results:

1. ``environment``: PyTorch, CUDA, the GPU's name, memory and compute capability, ``nvidia-smi``'s view;
2. ``tests``: ``tests/unit/test_on_device.py`` (the package on the GPU against the CPU: attention kernels, linear
   layers, searches, cache, bf16 training, checkpoints across devices) and the device cases of
   ``tests/unit/test_model.py``;
3. ``throughput``: ``bench/gpu_throughput.py`` on the same file's German -> English training pairs (the base model at
   ~25,000 tokens per batch side, eager, compiled and eager without the fused Q/K/V projection; tokens/s, MFU against
   the datasheet peak and a measured bf16 product);
4. ``quality``: ``bench/multi30k_gpu.py train`` for de->en (base model, bf16), then its averaging and decoding. It
   gets the minutes left of ``--budget-seconds`` after the earlier phases and a reserve for averaging and decoding,
   at most ``--quality-minutes`` (default 10, what issue 23 asks for; within one 10-minute command about 5 remain).

The files in ``--out``: session.json, tests.log, throughput.log, gpu_throughput.json, quality.log and
multi30k_gpu_raw.json (six, within what the device tool brings back). ``collect`` then scores the quality run here
(``bench/multi30k_gpu.py score``: alpha chosen on the validation split, sacreBLEU on test_2016_flickr) and writes
``multi30k_cuda.json``, ``gpu_throughput.json`` and ``gpu_session.json`` into ``bench/results/``; chapters 7 and 9
read them, so re-execute those chapters afterwards. ``--smoke`` runs every phase on the CPU with tiny settings (the
CUDA cases of the tests are then skipped), to test the whole sequence without a GPU; its results are named
``*_smoke.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _common import with_provenance  # noqa: E402

# bench/multi30k_gpu.py prepare's file (one shared BPE vocabulary, every split): one file for both GPU scripts, to
# keep what travels to the GPU machine small (the checkout and the carried files may not pass 64 MiB)
DATA = ROOT / "bench" / "data" / "multi30k_bpe.pt"
DECODE_RESERVE_SECONDS = 100  # averaging 5 checkpoints and decoding validation and test with beam 4, on a GPU
PHASE_CAPS = {"tests": 180, "throughput": 240}  # the most seconds each may take before the quality run
TESTS = ["tests/unit/test_on_device.py", "tests/unit/test_model.py::test_runs_on_device"]


# -- prepare (here) -------------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> int:
    command = ["bench/multi30k_gpu.py", "prepare", "--out", str(args.data)]
    command += ["--data-dir", args.data_dir] if args.data_dir else []
    print("$ python " + " ".join(command), flush=True)
    return subprocess.run([sys.executable, *command], cwd=ROOT).returncode


# -- run (on the GPU machine) ---------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    """What the session ran on, beyond ``_common.hardware()``: the GPU's properties and nvidia-smi's listing."""
    info: dict[str, Any] = {"cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info |= {
            "gpu": props.name,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "bf16_supported": torch.cuda.is_bf16_supported(),
        }
    if shutil.which("nvidia-smi"):
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        info["nvidia_smi"] = listing.stdout.strip() or listing.stderr.strip()
    return info


def phase_commands(args: argparse.Namespace, out: pathlib.Path) -> dict[str, list[str]]:
    """The command of each phase after ``environment`` (the quality run's minutes are filled in when it starts)."""
    smoke = ["--smoke"] if args.smoke else []
    tiny_throughput = ["--max-tokens", "200", "--steps", "2", "--warmup-steps", "1", "--modes", "eager"]
    return {
        "tests": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *TESTS],
        "throughput": [
            "bench/gpu_throughput.py",
            "--data",
            str(args.data),
            "--out",
            str(out / "gpu_throughput.json"),
            *smoke,
            *(tiny_throughput if args.smoke else []),
        ],
        "quality": [
            "bench/multi30k_gpu.py",
            "train",
            "--data",
            str(args.data),
            "--directions",
            "de-en",
            "--out",
            str(out / "multi30k_gpu_raw.json"),
            *smoke,
            *(["--max-steps", "4"] if args.smoke else []),
        ],
    }


def run_phase(name: str, command: list[str], log: pathlib.Path, timeout: float) -> dict[str, Any]:
    """Run ``python command`` from the repository root with its output in ``log``; what happened, for session.json."""
    started = time.perf_counter()
    # the GPU machine has no installed companion: the scripts and the tests import this checkout's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with log.open("w") as handle:
        try:
            done = subprocess.run(
                [sys.executable, *command], cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout
            )
            returncode, timed_out = done.returncode, False
        except subprocess.TimeoutExpired:
            returncode, timed_out = None, True
    lines = log.read_text(errors="replace").splitlines()
    record = {
        "phase": name,
        "command": " ".join(["python", *command]),
        "returncode": returncode,
        "timed_out": timed_out,
        "seconds": round(time.perf_counter() - started, 1),
        "last_lines": lines[-5:],
    }
    if name == "tests":
        summary = [line for line in lines if re.search(r"\d+ (passed|failed|error)", line)]
        record["summary"] = summary[-1].strip("= ") if summary else None
    return record


def quality_minutes(args: argparse.Namespace, seconds_left: float) -> float:
    """Training minutes for the quality run: what the budget leaves after the decoding reserve, at most
    ``--quality-minutes`` (a smoke run trains for a few steps whatever the minutes)."""
    if args.smoke:
        return 0.5
    return round(min(args.quality_minutes, (seconds_left - DECODE_RESERVE_SECONDS) / 60), 2)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.smoke and not torch.cuda.is_available():
        print(
            "error: run needs a CUDA GPU (torch.cuda.is_available() is False); --smoke tests it on the CPU",
            file=sys.stderr,
        )
        return 2
    session: dict[str, Any] = with_provenance(
        {"smoke": args.smoke, "budget_seconds": args.budget_seconds, "environment": environment(), "phases": []}
    )

    def save() -> None:
        (args.out / "session.json").write_text(json.dumps(session, indent=2) + "\n")

    save()
    commands = phase_commands(args, args.out)
    for name in args.phases:
        left = args.budget_seconds - (time.perf_counter() - started)
        command = commands[name]
        if name == "quality":
            minutes = quality_minutes(args, left)
            if minutes < 1 and not args.smoke:
                session["phases"].append({"phase": name, "skipped": f"{left:.0f} s left: too little to train"})
                continue
            command = [*command, "--minutes", f"{minutes:g}"]
            session["quality_minutes"] = minutes
        timeout = left if name == "quality" else min(PHASE_CAPS[name], left)
        print(f"=== {name} (at most {timeout:.0f} s): python {' '.join(command)}", flush=True)
        session["phases"].append(run_phase(name, command, args.out / f"{name}.log", timeout))
        print(json.dumps(session["phases"][-1], indent=2), flush=True)
        save()
    session["wall_seconds"] = round(time.perf_counter() - started, 1)
    save()
    failed = [p["phase"] for p in session["phases"] if p.get("returncode") not in (0, None) or p.get("timed_out")]
    print(f"session done in {session['wall_seconds']} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


# -- collect (here) -------------------------------------------------------------------------------------------
def collect(args: argparse.Namespace) -> int:
    folder: pathlib.Path = args.folder
    session_file = folder / "session.json"
    if not session_file.is_file():
        raise SystemExit(f"error: {folder} holds no session.json: give the folder that `run --out` wrote")
    session = json.loads(session_file.read_text())
    suffix = "_smoke" if session["smoke"] else ""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    raw = folder / "multi30k_gpu_raw.json"
    if raw.is_file():
        out = args.results_dir / ("multi30k_smoke.json" if session["smoke"] else "multi30k_cuda.json")
        command = ["bench/multi30k_gpu.py", "score", "--data", str(args.data), "--raw", str(raw)]
        done = subprocess.run([sys.executable, *command, "--out", str(out)], cwd=ROOT)
        if done.returncode != 0:
            return done.returncode
        written.append(out)
    for name in ("gpu_throughput", "gpu_session"):
        source = folder / ("session.json" if name == "gpu_session" else f"{name}.json")
        if source.is_file():
            target = args.results_dir / f"{name}{suffix}.json"
            shutil.copyfile(source, target)
            written.append(target)
    for path in written:
        print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python bench/gpu_session.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True)
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument("--data", type=pathlib.Path, default=DATA, help="bench/multi30k_gpu.py prepare's file")
    p = steps.add_parser("prepare", parents=[data], help="here: write the token file")
    p.add_argument("--data-dir", default=None, help="local Multi30k folder (default: COMPANION_DATA_DIR, else the hub)")
    r = steps.add_parser("run", parents=[data], help="on the GPU machine: every phase, results in --out")
    r.add_argument("--out", type=pathlib.Path, required=True, help="folder for the results ($OUT on the GPU machine)")
    r.add_argument("--budget-seconds", type=float, default=560.0, help="the whole run's seconds (default 560)")
    r.add_argument("--quality-minutes", type=float, default=10.0, help="the most training minutes (default 10)")
    r.add_argument(
        "--phases",
        nargs="+",
        default=["tests", "throughput", "quality"],
        choices=["tests", "throughput", "quality"],
        help="which phases, in this order (default all)",
    )
    r.add_argument("--smoke", action="store_true", help="every phase on the CPU with tiny settings")
    c = steps.add_parser("collect", parents=[data], help="here: score the quality run, write bench/results/")
    c.add_argument("folder", type=pathlib.Path, help="the folder the run's files came back to")
    c.add_argument("--results-dir", type=pathlib.Path, default=ROOT / "bench" / "results")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.step in ("run", "collect"):
        if not args.data.is_file():
            parser.error(f"--data {args.data} does not exist: write it here with `python bench/gpu_session.py prepare`")
    if args.step == "run" and args.budget_seconds <= 0:
        parser.error(f"--budget-seconds must be positive, got {args.budget_seconds:g}")
    return {"prepare": prepare, "run": run, "collect": collect}[args.step](args)


if __name__ == "__main__":
    sys.exit(main())
