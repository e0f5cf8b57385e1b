"""How far apart should the averaged checkpoints of a short run be? One run, many checkpoints, several averages.

    python bench/checkpoint_spacing.py --directions de-en en-de --minutes 12 --tag 12min

``companion train --max-minutes M`` averages its last 5 checkpoints into ``averaged.pt``. This script trains each
direction once with the CPU benchmark's setting (``bench/multi30k.py``'s, the CLI defaults) for ``--minutes``,
writing a checkpoint every ``--fine`` minutes and keeping all of them; then, for each spacing in ``--spacings``
(minutes), it averages the 5 checkpoints nearest to the end and to 1, 2, 3 and 4 spacings before it, and scores
each average on the **validation** split (beam 4, alpha 1.0, as the benchmark scored until 2026-12-06; it now
chooses alpha per model, and a fixed one keeps the averages comparable). All averages come from the
same run, so they differ only in which weights are averaged. The test sets play no part.

Writes ``bench/results/checkpoint_spacing_<tag>.json`` with the hardware, the command, each average's steps and
minutes, and its validation BLEU. Runs are kept under ``--runs-dir``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import results_stem, train_options, write_results  # noqa: E402
from multi30k import default_data_dir, train_flags  # noqa: E402

from companion.checkpoint import average_checkpoints, list_checkpoints, write_checkpoint  # noqa: E402
from companion.runs import EvaluateConfig, evaluate_run, train_run  # noqa: E402

COUNT = 5  # checkpoints per average, as companion train's --average-last default


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--directions", nargs="+", default=["de-en"], choices=["de-en", "en-de"])
    parser.add_argument("--minutes", type=float, default=12.0, help="training minutes per direction (default: 12)")
    parser.add_argument("--fine", type=float, default=0.2, help="minutes between checkpoints (default: 0.2)")
    parser.add_argument(
        "--spacings",
        type=float,
        nargs="+",
        default=[0.4, 0.6, 0.8, 1.0, 1.2],
        help="minutes between the averaged checkpoints (default: 0.4 0.6 0.8 1.0 1.2)",
    )
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for training (default: 2)")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: as bench/multi30k.py)")
    parser.add_argument("--runs-dir", default="bench/runs", help="where the runs go (default: bench/runs)")
    parser.add_argument("--tag", default="12min", type=results_stem, help="suffix of the results file and runs")
    args = parser.parse_args(argv)
    if any(s * (COUNT - 1) >= args.minutes for s in args.spacings):
        parser.error(f"--spacings: {COUNT} checkpoints spaced this far apart do not fit in --minutes")
    if any(s < args.fine for s in args.spacings):
        parser.error("--spacings must be at least --fine")
    return args


def checkpoint_minutes(paths: list[Path]) -> list[float]:
    """Each checkpoint's training minutes (recorded by the trainer)."""
    minutes = []
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=False)["trainer_state"]["state"]
        minutes.append(state["train_seconds"] / 60)
    return minutes


def pick(minutes: list[float], spacing: float) -> list[int]:
    """Indices of the checkpoints nearest to the end and to 1..COUNT-1 spacings before it (distinct, oldest first)."""
    end = minutes[-1]
    chosen = []
    for k in range(COUNT):
        nearest = min(range(len(minutes)), key=lambda i: abs(minutes[i] - (end - k * spacing)))
        if nearest in chosen:
            raise SystemExit(f"spacing {spacing}: checkpoints too sparse near minute {end - k * spacing:.2f}")
        chosen.append(nearest)
    return sorted(chosen)


def run_direction(args: argparse.Namespace, direction: str) -> dict:
    src, tgt = direction.split("-")
    out = Path(args.runs_dir) / f"spacing-{direction}-{args.tag}"
    data_dir = args.data_dir or default_data_dir()
    # bench/multi30k.py's training command with a checkpoint every --fine minutes, all of them kept
    given = argparse.Namespace(save_every_minutes=args.fine, average_last=COUNT, seed=0, data_dir=data_dir)
    keep = ["--keep-last", str(int(args.minutes / args.fine) + 5), "--threads", str(args.threads), "--no-progress"]
    keep.append("--no-choose-alpha")  # every average is scored at the fixed alpha 1.0 below
    flags = train_flags(given, src, tgt, "cpu", args.minutes, out, keep)
    print(f"\n=== {direction}: python -m companion {' '.join(flags)}", flush=True)
    summary = train_run(train_options(flags), command=flags[1:])
    paths = list_checkpoints(out / "checkpoints")
    minutes = checkpoint_minutes(paths)
    averages = {}
    for spacing in args.spacings:
        chosen = pick(minutes, spacing)
        target = out / f"averaged_spacing{spacing:g}.pt"
        write_checkpoint(average_checkpoints([paths[i] for i in chosen]), target)
        scored = evaluate_run(
            EvaluateConfig(str(target), beam_size=4, alpha=1.0, device="cpu", split="valid", data_dir=data_dir)
        )
        averages[f"{spacing:g}"] = {
            "valid_bleu": round(scored["bleu"], 2),
            "bleu_signature": scored["bleu_signature"],
            "steps": [int(paths[i].stem.split("_")[1]) for i in chosen],
            "minutes": [round(minutes[i], 2) for i in chosen],
        }
        entry = averages[f"{spacing:g}"]
        print(f"  spacing {spacing:g} min: valid BLEU {entry['valid_bleu']} (minutes {entry['minutes']})", flush=True)
    return {
        "command": "python -m companion " + " ".join(flags),
        "steps": summary["steps"],
        "train_minutes": round(summary["train_seconds"] / 60, 2),
        "checkpoints": len(paths),
        "averages": averages,
        "best_spacing": max(averages, key=lambda s: averages[s]["valid_bleu"]),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = {direction: run_direction(args, direction) for direction in args.directions}
    path = write_results(
        f"checkpoint_spacing_{args.tag}",
        {
            "benchmark": "checkpoint_spacing",
            "minutes_per_direction": args.minutes,
            "fine_minutes": args.fine,
            "count": COUNT,
            "beam_size": 4,
            "alpha": 1.0,
            "split": "valid",
            "results": results,
        },
    )
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
