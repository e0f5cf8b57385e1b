"""Two checkpoints of one direction compared on Multi30k's validation split: which one to ship.

    python bench/pretrained_compare.py --direction en-de --baseline OLD.pt --candidate NEW.pt --results NAME

Each checkpoint translates the validation sources with ``companion translate`` (beam 4; alpha 0.6, the setting of
the comparisons of 2026-12-06, unless ``--alpha`` gives another, such as the shipped models' decoding setting
``companion.pretrained.SHIPPED_ALPHA``), and the script reports, for each, sacreBLEU's BLEU and chrF with a paired
bootstrap test of the candidate against the baseline (``sacrebleu.significance.PairedTest``, 2,000 resamples: the
p-value of the difference and each score's 95% interval), and how many outputs hold ``<unk>`` (a word-level model
writes it for every word outside its vocabulary; a subword model spells them). Only the validation split is read:
the test set plays no part in choosing a shipped model (``tools/make_pretrained.py`` says which setting each
direction uses and why). Writes ``bench/results/NAME.json`` with the commands, hardware and date.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import TypeVar

import sacrebleu
from sacrebleu.significance import PairedTest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import results_stem, write_results  # noqa: E402

from companion.data import load_multi30k  # noqa: E402
from companion.data.tokenizers import UNK  # noqa: E402
from companion.runs.infer import PAPER_ALPHA  # noqa: E402

K = TypeVar("K")
BEAM, ALPHA = 4, PAPER_ALPHA
RESAMPLES = 2000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--direction", required=True, choices=("de-en", "en-de"), help="the checkpoints' direction")
    parser.add_argument("--baseline", required=True, type=pathlib.Path, help="the shipped checkpoint")
    parser.add_argument("--candidate", required=True, type=pathlib.Path, help="the checkpoint that might replace it")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"beam search's length penalty (default: {ALPHA})")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: COMPANION_DATA_DIR or the hub)")
    parser.add_argument("--results", type=results_stem, required=True, help="results file stem (bench/results/)")
    args = parser.parse_args(argv)
    if not 0 <= args.alpha <= 10:
        parser.error(f"--alpha must be a number from 0 to 10, got {args.alpha}")
    for name in ("baseline", "candidate"):
        if not getattr(args, name).is_file():
            parser.error(f"--{name} must be a checkpoint file, got {getattr(args, name)}")
    return args


def translate_command(
    checkpoint: pathlib.Path, source: pathlib.Path, *, beam: int = BEAM, alpha: float = ALPHA
) -> list[str]:
    return [sys.executable, "-m", "companion", "translate", "--checkpoint", str(checkpoint), "--input", str(source),
            "--beam-size", str(beam), "--alpha", str(alpha)]  # fmt: skip


def translate(checkpoint: pathlib.Path, source: pathlib.Path, *, beam: int = BEAM, alpha: float = ALPHA) -> list[str]:
    """The checkpoint's translation of every line of ``source`` (one output line per input line) with beam search
    of ``beam`` beams and length penalty ``alpha``."""
    command = translate_command(checkpoint, source, beam=beam, alpha=alpha)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def validation_outputs(
    direction: str, data_dir: str | None, jobs: Mapping[K, tuple[pathlib.Path, float]]
) -> tuple[list[str], dict[K, list[str]]]:
    """The references of ``direction``'s validation split, and for each job ``(checkpoint, alpha)`` the checkpoint's
    translation of its sources (beam :data:`BEAM`): one output line per source, or ``SystemExit``."""
    src, tgt = direction.split("-")
    pairs = load_multi30k(src, tgt, data_dir, splits=("valid",))["valid"]
    with tempfile.TemporaryDirectory() as tmp:
        source = pathlib.Path(tmp) / f"valid.{src}"
        source.write_text("".join(f"{text}\n" for text, _ in pairs), encoding="utf-8")
        outputs = {key: translate(checkpoint, source, alpha=alpha) for key, (checkpoint, alpha) in jobs.items()}
    for key, lines in outputs.items():
        if len(lines) != len(pairs):
            raise SystemExit(
                f"{jobs[key][0]} (alpha {jobs[key][1]:g}): {len(lines)} output lines for {len(pairs)} sources"
            )
    return [target for _, target in pairs], outputs


def unk_counts(outputs: list[str]) -> dict[str, int]:
    return {"sentences_with_unk": sum(UNK in line for line in outputs),
            "unk_tokens": sum(line.count(UNK) for line in outputs)}  # fmt: skip


def paired_test(baseline: list[str], candidate: list[str], references: list[str]) -> dict[str, dict]:
    """BLEU and chrF of both systems, each with its bootstrap mean and 95% interval, and the candidate's p-value."""
    metrics = {"bleu": sacrebleu.BLEU(), "chrf": sacrebleu.CHRF()}
    test = PairedTest([("baseline", baseline), ("candidate", candidate)], metrics, [references], "bs", RESAMPLES)
    signatures, results = test()
    report: dict[str, dict] = {}
    keys = [key for key in results if key != "System"]  # the metrics' own names (BLEU, chrF2), in metrics' order
    for name, key in zip(metrics, keys, strict=True):
        base, cand = results[key]
        report[name] = {
            "signature": str(signatures[key]),
            "baseline": {"score": round(base.score, 2), "bootstrap_mean": round(float(base.mean), 2),
                         "ci95_half_width": round(float(base.ci), 2)},
            "candidate": {"score": round(cand.score, 2), "bootstrap_mean": round(float(cand.mean), 2),
                          "ci95_half_width": round(float(cand.ci), 2), "p_value": round(float(cand.p_value), 4)},
        }  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    src = args.direction.split("-")[0]
    jobs = {name: (getattr(args, name), args.alpha) for name in ("baseline", "candidate")}
    references, outputs = validation_outputs(args.direction, args.data_dir, jobs)
    payload = {
        "what": f"two checkpoints of one direction on Multi30k's validation split (beam {BEAM}, alpha {args.alpha:g}): "
        f"sacreBLEU BLEU and chrF with a paired bootstrap test ({RESAMPLES} resamples) of the candidate against the "
        "baseline, and the outputs holding <unk>",
        "direction": args.direction,
        "split": "valid",
        "sentences": len(references),
        "checkpoints": {"baseline": str(args.baseline), "candidate": str(args.candidate)},
        "translate_command": " ".join(
            translate_command(pathlib.Path("CHECKPOINT"), pathlib.Path(f"valid.{src}"), alpha=args.alpha)[1:]
        ),
        "scores": paired_test(outputs["baseline"], outputs["candidate"], references),
        "unk": {name: unk_counts(lines) for name, lines in outputs.items()},
    }
    path = write_results(args.results, payload)
    for metric, entry in payload["scores"].items():
        print(f"{metric}: baseline {entry['baseline']['score']}, candidate {entry['candidate']['score']} "
              f"(p = {entry['candidate']['p_value']:.4f})")  # fmt: skip
    print(f"<unk>: {payload['unk']}\nwritten to {path}")


if __name__ == "__main__":
    main()
