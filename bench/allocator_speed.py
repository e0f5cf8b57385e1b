"""What keeping freed memory in the process is worth: training steps and decoding with and without the setting.

    python bench/allocator_speed.py                  # 5 alternating rounds, ~3 minutes on 2 cores
    python bench/allocator_speed.py --rounds 7 --results allocator_speed_amd

``companion train``, ``translate`` and ``evaluate`` call :func:`companion.devices.keep_freed_memory` (glibc's malloc
thresholds raised so that the memory a step frees stays in the process; ``companion/_allocator.py`` says why). The
setting holds for a whole process, and a measurement changes glibc's own adaptive thresholds for the next one, so
every measurement runs alone in a fresh interpreter: each round runs each of the following once with glibc's
defaults and once after ``keep_freed_memory()`` (which mode goes first alternates between rounds):

* ``train_ms_per_step``: training steps of the CLI default model (the ``small`` preset, one shared 8,000
  vocabulary) on a fixed batch of random ids, as ``bench/train_step_speed.py`` builds and times them (92 sentences of
  13 tokens a side, two untimed steps first);
* ``greedy_16_seconds``: greedy search over the first ``--sentences`` test_2016_flickr sources with the shipped
  de->en model, in length-sorted batches of 16 (``bench/decode_speed.py``'s batches);
* ``beam4_64_seconds``: beam search (beam 4, alpha 0.6) over the same sentences in batches of 64 (``companion
  evaluate``'s default batch).

The report gives each mode's median per round and the median of the per-round ratios (default / kept). Nothing is
compared but time: the arithmetic is the same in both modes (the decoded ids are compared, by digest). Writes
bench/results/allocator_speed.json (or ``--results STEM``.json). Needs Linux with glibc (elsewhere the setting does
nothing) and the Multi30k test split (``COMPANION_DATA_DIR`` or the hub).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import results_stem, write_results  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODES = ("default", "kept")
MEASURES = ("train_ms_per_step", "greedy_16_seconds", "beam4_64_seconds")


def train_ms_per_step(steps: int) -> float:
    """Milliseconds per training step, as ``bench/train_step_speed.py`` times the package's step."""
    import torch
    import train_step_speed

    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, 8000, (92, 13), generator=generator)
    tgt = torch.randint(4, 8000, (92, 14), generator=generator)
    built = train_step_speed.build("+ dropout", seed=0)
    return train_step_speed.time_steps("+ dropout", built, (src, tgt), steps)


def decode_seconds(measure: str, sentences: int, data_dir: str | None) -> tuple[float, str]:
    """Seconds of one search over the test sentences (one untimed batch first) and a digest of its outputs."""
    from decode_speed import batches  # length-sorted, padded batches, as bench/decode_speed.py times them

    from companion.checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint
    from companion.data import load_multi30k
    from companion.decode import beam_search, greedy_decode

    checkpoint = load_checkpoint(ROOT / "pretrained" / "de-en-small.pt")
    model = model_from_checkpoint(checkpoint)
    src_tok, _ = tokenizers_from_checkpoint(checkpoint)
    test = load_multi30k("de", "en", data_dir=data_dir)["test"][:sentences]
    ids = [src_tok.encode(s)[: model.config.max_len - 1] + [src_tok.eos_id] for s, _ in test]
    if measure == "greedy_16_seconds":
        size, search = 16, lambda src: greedy_decode(model, src)
    else:
        size, search = 64, lambda src: beam_search(model, src, beam_size=4, alpha=0.6)
    search(next(batches(ids, size, model.config.pad_id))[1])  # first calls allocate and pick kernels: not timed
    start = time.perf_counter()
    outputs = [out for _, batch in batches(ids, size, model.config.pad_id) for out in search(batch)]
    seconds = time.perf_counter() - start
    return seconds, hashlib.sha256(json.dumps(outputs).encode()).hexdigest()


def child(args: argparse.Namespace) -> dict:
    """One fresh process: ``args.measure`` in mode ``args.child`` (the setting holds for a whole process, and a
    measurement would change the allocator's state for the next one: each runs alone)."""
    import torch

    from companion.devices import keep_freed_memory

    kept = keep_freed_memory() if args.child == "kept" else False
    torch.set_num_threads(args.threads)
    if args.measure == "train_ms_per_step":
        return {"keep_freed_memory": kept, "value": train_ms_per_step(args.steps), "outputs": None}
    seconds, digest = decode_seconds(args.measure, args.sentences, args.data_dir)
    return {"keep_freed_memory": kept, "value": seconds, "outputs": digest}


def run_child(mode: str, measure: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--measure", measure, "--steps", str(args.steps)]
    command += ["--threads", str(args.threads), "--sentences", str(args.sentences)]
    command += ["--data-dir", args.data_dir] if args.data_dir else []
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} {measure} measurement failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_round(index: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Every measure in both modes (alternating which goes first), each in its own process."""
    order = MODES if index % 2 == 0 else tuple(reversed(MODES))
    values: dict[str, dict[str, float]] = {}
    for measure in MEASURES:
        got = {mode: run_child(mode, measure, args) for mode in order}
        if not got["kept"]["keep_freed_memory"]:
            raise SystemExit(
                "keep_freed_memory() changed nothing here (not glibc, or MALLOC_* set): nothing to compare"
            )
        if got["kept"]["outputs"] != got["default"]["outputs"]:
            raise SystemExit(f"{measure}: the decoded ids differ between the modes; the setting must change time only")
        values[measure] = {mode: got[mode]["value"] for mode in MODES}
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=15, help="timed training steps (default: %(default)s)")
    parser.add_argument("--sentences", type=int, default=320, help="test sentences decoded (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--measure", choices=MEASURES, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=results_stem, default="allocator_speed", help="results file stem")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    rounds = []
    for index in range(args.rounds):
        rounds.append(one_round(index, args))
        print(
            f"round {index + 1}: "
            + "; ".join(f"{m} default {v['default']:.3f}, kept {v['kept']:.3f}" for m, v in rounds[-1].items()),
            flush=True,
        )
    summary = {}
    for measure in MEASURES:
        ratios = [r[measure]["default"] / r[measure]["kept"] for r in rounds]
        summary[measure] = {
            "default_per_round": [round(r[measure]["default"], 4) for r in rounds],
            "kept_per_round": [round(r[measure]["kept"], 4) for r in rounds],
            "default_median": round(statistics.median(r[measure]["default"] for r in rounds), 4),
            "kept_median": round(statistics.median(r[measure]["kept"] for r in rounds), 4),
            "speedup_per_round": [round(x, 3) for x in ratios],
            "speedup_median": round(statistics.median(ratios), 3),
        }
        print(
            f"{measure}: default {summary[measure]['default_median']}, kept {summary[measure]['kept_median']}, "
            f"x{summary[measure]['speedup_median']:.2f} (median of rounds)"
        )
    path = write_results(
        args.results,
        {
            "setting": "companion.devices.keep_freed_memory(): glibc M_MMAP_THRESHOLD and M_TRIM_THRESHOLD = 1 GiB",
            "train": "small preset, shared 8,000 vocabulary, 92 x 13 random ids a side, Adam; ms per step",
            "decode": f"pretrained/de-en-small.pt, first {args.sentences} test_2016_flickr sources sorted by length; "
            "greedy in batches of 16, beam 4 (alpha 0.6) in batches of 64; seconds",
            "rounds": args.rounds,
            "steps": args.steps,
            "torch_threads": args.threads,
            "identical_outputs": True,
            "measures": summary,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
