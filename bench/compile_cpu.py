"""Does ``companion train --compile`` pay on a CPU? Train the same steps eagerly and compiled, compare tokens/s.

    python bench/compile_cpu.py                       # small preset, de->en, 300 steps each, 2 threads
    python bench/compile_cpu.py --steps 600 --results compile_cpu_xeon

Runs ``companion train`` twice with the same data, seed and settings (the CLI defaults, Multi30k de->en), once as
it is and once with ``--compile`` (``torch.compile`` of the model, PyTorch's default inductor backend, which on a
CPU generates and compiles C++ with the system compiler). Reports, for each, the training seconds of the whole run
(for the compiled one this includes compiling, and recompiling when the batch shapes change) and the steady
throughput: the median tokens/s of the logging intervals after the first ``--skip`` steps, when compiling is
over. Compiling starts cold: the compiler's on-disk cache goes to a new temporary folder (a second run with the
default cache would reuse the first run's compiled code and show a shorter whole run). Writes
bench/results/compile_cpu.json (or ``--results STEM``.json). Keep the machine idle while it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import statistics
import sys
import tempfile
from collections.abc import Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import results_stem, train_log, train_options, write_results  # noqa: E402

from companion.runs import train_run  # noqa: E402


def steady_tokens_per_second(run_dir: pathlib.Path, skip: int) -> dict[str, float]:
    """Median and range of the ``tokens_per_s`` of the training log lines after step ``skip`` of a run's
    ``metrics.jsonl`` (each line covers one logging interval)."""
    rates = [r["tokens_per_s"] for r in train_log(run_dir) if r["step"] > skip]
    if not rates:
        raise SystemExit(f"{run_dir}: no training log line after step {skip}; train more --steps or lower --skip")
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "intervals": len(rates)}


def run(mode: str, args: argparse.Namespace) -> dict:
    out = pathlib.Path(args.runs_dir) / f"compile-cpu-{mode}"
    flags = ["train", "--src", "de", "--tgt", "en", "--max-steps", str(args.steps), "--device", "cpu"]
    flags += ["--threads", str(args.threads), "--seed", "0", "--log-every", str(args.log_every)]
    flags += ["--eval-every", "100000", "--out", str(out), "--overwrite", "--no-progress", "--no-choose-alpha"]
    if args.data_dir:
        flags += ["--data-dir", args.data_dir]
    if mode == "compiled":
        flags.append("--compile")
    given = train_options(flags)
    print(f"=== {mode}: python -m companion {' '.join(flags)}", flush=True)
    summary = train_run(given, command=flags[1:])
    steady = steady_tokens_per_second(out, args.skip)
    rate = steady["median"]
    print(f"{mode}: {summary['train_seconds']:.1f} s for {summary['steps']} steps; steady {rate:,.0f} tok/s")
    return {
        "command": "python -m companion " + " ".join(flags),
        "steps": summary["steps"],
        "train_seconds": round(summary["train_seconds"], 2),
        "steady_tokens_per_second": {k: round(v) for k, v in steady.items()},
    }


@contextlib.contextmanager
def cold_compiler_cache() -> Iterator[None]:
    """Inductor's on-disk cache in a new temporary folder (it reads ``TORCHINDUCTOR_CACHE_DIR`` whenever it looks
    for the folder), removed afterwards, and the variable restored."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="compile_cpu_inductor_") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["TORCHINDUCTOR_CACHE_DIR"]
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="training steps per run (default 300)")
    parser.add_argument("--skip", type=int, default=100, help="steps left out of the steady rate (default 100)")
    parser.add_argument("--log-every", type=int, default=25, help="steps per logging interval (default 25)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: $COMPANION_DATA_DIR or the hub)")
    parser.add_argument("--runs-dir", default="bench/runs", help="where the two runs go (default bench/runs)")
    parser.add_argument("--results", default="compile_cpu", type=results_stem, help="results file stem")
    args = parser.parse_args(argv)
    if args.skip >= args.steps:
        parser.error(f"--skip must be below --steps ({args.steps}), got {args.skip}")
    with cold_compiler_cache():
        runs = {mode: run(mode, args) for mode in ("eager", "compiled")}
    eager, compiled = (runs[m]["steady_tokens_per_second"]["median"] for m in ("eager", "compiled"))
    payload = {
        "benchmark": "compile_cpu",
        "runs": runs,
        "steady_speedup_compiled_over_eager": round(compiled / eager, 3),
        "whole_run_speedup_compiled_over_eager": round(
            runs["eager"]["train_seconds"] / runs["compiled"]["train_seconds"], 3
        ),
    }
    print(
        f"compiled / eager: steady {payload['steady_speedup_compiled_over_eager']}x, "
        f"whole run {payload['whole_run_speedup_compiled_over_eager']}x"
    )
    print(f"wrote {write_results(args.results, payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
