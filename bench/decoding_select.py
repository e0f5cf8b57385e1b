"""The length penalty of the shipped models' beam search, chosen on Multi30k's validation split.

    python bench/decoding_select.py --results decoding_select_2026-12-06
    python bench/decoding_select.py --checkpoint de-en=pretrained/de-en-small.pt --alphas 0.6,1.0,2.0 --results NAME

Each checkpoint (default: the two shipped models, ``pretrained/de-en-small.pt`` and ``pretrained/en-de-small.pt``)
translates the validation sources of its direction with ``companion translate`` at beam 4 (the beam the in-page
translator offers by default: its latency is measured at beam 4) and every length penalty ``alpha`` of the grid
(GNMT's ``lp = ((5 + |y|) / 6) ** alpha``; chapter 8 explains it). For each it records sacreBLEU's BLEU and chrF
and the length ratio (output tokens over reference tokens, what BLEU's brevity penalty reads). The choice is one
alpha for all the checkpoints: the one with the highest mean validation BLEU over the directions (the smaller alpha
where two tie), so that the book, the package and the page decode every shipped model the same way. The chosen
alpha is then compared, direction by direction, with the paper's 0.6 by sacreBLEU's paired bootstrap test
(``bench/pretrained_compare.paired_test``, 2,000 resamples). Only the validation split is read; the test set plays no
part (``tools/make_pretrained.py`` scores the chosen setting on it once, for the model cards). Writes
``bench/results/NAME.json`` with the commands, hardware and date.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import sacrebleu

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import results_stem, write_results  # noqa: E402
from pretrained_compare import BEAM, paired_test, translate_command, validation_outputs  # noqa: E402

from companion.evaluate import ALPHA_GRID  # noqa: E402
from companion.runs.infer import PAPER_ALPHA  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
ALPHAS = ALPHA_GRID  # companion choose-alpha's grid
DIRECTIONS = ("de-en", "en-de")


def _checkpoint(text: str) -> tuple[str, pathlib.Path]:
    direction, sep, path = text.partition("=")
    if not sep or direction not in DIRECTIONS or not path:
        raise argparse.ArgumentTypeError(f"expected DIRECTION=PATH with DIRECTION one of {DIRECTIONS}, got {text!r}")
    return direction, pathlib.Path(path)


def _alphas(text: str) -> tuple[float, ...]:
    try:
        values = tuple(sorted({float(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if PAPER_ALPHA not in values or any(not 0 <= value <= 10 for value in values):
        raise argparse.ArgumentTypeError(
            f"expected numbers in [0, 10] including the paper's {PAPER_ALPHA}, got {text!r}"
        )
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", type=_checkpoint, metavar="DIRECTION=PATH",
                        help="a checkpoint and its direction (repeatable; default: the shipped models)")  # fmt: skip
    parser.add_argument("--alphas", type=_alphas, default=ALPHAS, help="the grid (comma-separated, must hold 0.6)")
    parser.add_argument("--data-dir", default=None, help="Multi30k folder (default: COMPANION_DATA_DIR or the hub)")
    parser.add_argument("--results", type=results_stem, required=True, help="results file stem (bench/results/)")
    args = parser.parse_args(argv)
    if args.checkpoint is None:
        args.checkpoint = [(d, ROOT / "pretrained" / f"{d}-small.pt") for d in DIRECTIONS]
    directions = [direction for direction, _ in args.checkpoint]
    if len(set(directions)) != len(directions):
        parser.error(f"--checkpoint names a direction twice: {directions}")
    for direction, path in args.checkpoint:
        if not path.is_file():
            parser.error(f"--checkpoint {direction}= must be a checkpoint file, got {path}")
    return args


def score(outputs: list[str], references: list[str]) -> dict:
    """BLEU, chrF and the length ratio (sacreBLEU's output tokens over reference tokens) of ``outputs``."""
    bleu = sacrebleu.corpus_bleu(outputs, [references])
    return {
        "bleu": round(bleu.score, 2),
        "chrf": round(sacrebleu.corpus_chrf(outputs, [references]).score, 2),
        "length_ratio": round(bleu.sys_len / bleu.ref_len, 3),
    }


def choose(by_direction: dict[str, dict[float, dict]]) -> float:
    """The alpha with the highest mean BLEU over the directions (``by_direction[direction][alpha]["bleu"]``); the
    smaller one where two tie."""
    alphas = sorted(set.intersection(*(set(grid) for grid in by_direction.values())))
    return max(alphas, key=lambda a: (statistics.mean(g[a]["bleu"] for g in by_direction.values()), -a))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    outputs: dict[str, dict[float, list[str]]] = {}
    grid: dict[str, dict[float, dict]] = {}
    references: dict[str, list[str]] = {}
    for direction, checkpoint in args.checkpoint:
        jobs = {alpha: (checkpoint, alpha) for alpha in args.alphas}
        references[direction], outputs[direction] = validation_outputs(direction, args.data_dir, jobs)
        grid[direction] = {alpha: score(lines, references[direction]) for alpha, lines in outputs[direction].items()}
        for alpha, scores in grid[direction].items():
            print(f"{direction} alpha {alpha:g}: {scores}", flush=True)
    chosen = choose(grid)
    payload = {
        "what": f"the length penalty alpha of beam search (beam {BEAM}) for the shipped models, chosen on Multi30k's "
        "validation split: the alpha with the highest mean validation BLEU over the directions; the chosen alpha "
        f"against the paper's {PAPER_ALPHA} by sacreBLEU's paired bootstrap test",
        "split": "valid",
        "beam_size": BEAM,
        "alphas": list(args.alphas),
        "checkpoints": {direction: str(path) for direction, path in args.checkpoint},
        "translate_command": " ".join(
            translate_command(pathlib.Path("CHECKPOINT"), pathlib.Path("valid.SRC"), beam=BEAM, alpha=0.0)[1:-1]
        )
        + " ALPHA",
        "by_direction": {d: {f"{a:g}": s for a, s in g.items()} for d, g in grid.items()},
        "mean_bleu": {f"{a:g}": round(statistics.mean(g[a]["bleu"] for g in grid.values()), 2) for a in args.alphas},
        "chosen_alpha": chosen,
        "chosen_against_paper": {
            d: paired_test(outputs[d][PAPER_ALPHA], outputs[d][chosen], references[d]) for d in grid
        },
    }
    path = write_results(args.results, payload)
    print(f"chosen alpha: {chosen:g} (mean validation BLEU {payload['mean_bleu'][f'{chosen:g}']})")
    for direction, report in payload["chosen_against_paper"].items():
        bleu = report["bleu"]
        print(f"{direction}: BLEU {bleu['baseline']['score']} (alpha {PAPER_ALPHA}) -> {bleu['candidate']['score']} "
              f"(alpha {chosen:g}), p = {bleu['candidate']['p_value']:.4f}")  # fmt: skip
    print(f"written to {path}")


if __name__ == "__main__":
    main()
