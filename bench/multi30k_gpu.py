"""Multi30k quality on a GPU machine that has PyTorch but none of spaCy, tokenizers, datasets or sacreBLEU.

Three steps: the first and the last run here, the middle one on the GPU machine (torch and this repository only)::

    python bench/multi30k_gpu.py prepare --out bench/data/multi30k_bpe.pt
    python bench/multi30k_gpu.py train --data bench/data/multi30k_bpe.pt --minutes 10 --out $OUT/multi30k_gpu_raw.json
    python bench/multi30k_gpu.py score --data bench/data/multi30k_bpe.pt --raw multi30k_gpu_raw.json

``prepare`` learns one byte-pair vocabulary shared by English and German (as the paper did) on the training
split and stores the ids of every split in both languages, the tokenizer and the raw validation and test references.
``train`` trains each direction with the settings of ``bench/multi30k.py`` for GPUs (base model, bf16, about
12,000 tokens per batch side, warmup 1,000, dropout 0.2) for ``--minutes``, averages the last 5 checkpoints,
decodes the validation split and test_2016_flickr with beam 4, each once, keeping the winners under every length
penalty alpha of ``companion.evaluate.ALPHA_GRID`` (``companion.decode.translate_ids_alphas``: one search serves
every alpha), and writes the output ids with the hardware and the run facts. ``score`` detokenizes the outputs,
chooses alpha on the validation split as ``companion choose-alpha`` does (``companion.evaluate.alpha_choice``), and
writes ``bench/results/multi30k_cuda.json`` (test sacreBLEU and chrF with signatures at the chosen alpha) in the
format of the CPU results, with the GPU machine's hardware, date and command.
Targets (issue 3): de->en >= 40 BLEU and en->de >= 37 with at most 10 minutes per direction.
``train --smoke`` runs a tiny model for a few steps on the CPU, to test the pipeline.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import pathlib
import shlex
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _common import flatten, hardware, learning_curve, unflatten, write_results  # noqa: E402

import companion  # noqa: E402
from companion.checkpoint import average_checkpoints, list_checkpoints, model_from_checkpoint  # noqa: E402
from companion.data import make_batches  # noqa: E402
from companion.decode import translate_ids_alphas  # noqa: E402
from companion.evaluate import ALPHA_GRID  # noqa: E402

LANGUAGES = ("en", "de")
SPLITS = ("train", "valid", "test")
DIRECTIONS = ("de-en", "en-de")
TARGETS = {"de-en": 40.0, "en-de": 37.0}
# The GPU settings of bench/multi30k.py, expressed for companion.Trainer.
MAX_TOKENS, WARMUP, DROPOUT, MAX_LEN = 12000, 1000, 0.2, 256
BEAM = 4


# -- prepare (here) -------------------------------------------------------------------------------------------
def prepare(args: argparse.Namespace) -> None:
    from companion.data import SubwordTokenizer, load_multi30k

    splits = load_multi30k("en", "de", data_dir=args.data_dir)  # (English, German) pairs
    if args.limit:
        splits = {name: pairs[: args.limit] for name, pairs in splits.items()}
    train = splits["train"]
    tokenizer = SubwordTokenizer.train([e for e, _ in train] + [g for _, g in train], vocab_size=args.vocab_size)
    data = {
        "vocab_size": tokenizer.vocab_size,
        "tokenizer": json.dumps(tokenizer.to_dict()),
        "references": json.dumps({lang: [pair[i] for pair in splits["test"]] for i, lang in enumerate(LANGUAGES)}),
        "valid_references": json.dumps(
            {lang: [pair[i] for pair in splits["valid"]] for i, lang in enumerate(LANGUAGES)}
        ),
    }
    for split in SPLITS:
        for i, lang in enumerate(LANGUAGES):
            flat, offsets = flatten(tokenizer.encode_batch([pair[i] for pair in splits[split]]))
            data[f"{split}_{lang}_flat"], data[f"{split}_{lang}_offsets"] = flat, offsets
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, args.out)
    print(
        f"wrote {args.out}: shared BPE vocabulary {tokenizer.vocab_size}, "
        + ", ".join(f"{split} {len(splits[split])} pairs" for split in SPLITS)
    )


def load_ids(path: pathlib.Path, split: str, lang: str, max_len: int) -> list[list[int]]:
    data = torch.load(path, weights_only=True)
    return [ids[: max_len - 1] for ids in unflatten(data[f"{split}_{lang}_flat"], data[f"{split}_{lang}_offsets"])]


# -- train (on the GPU machine) -------------------------------------------------------------------------------
def model_config(vocab_size: int, smoke: bool) -> companion.TransformerConfig:
    if smoke:
        return companion.TransformerConfig(
            vocab_size,
            vocab_size,
            d_model=32,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=64,
            dropout=DROPOUT,
            max_len=MAX_LEN,
            share_embeddings=True,
            tie_output=True,
        )
    return companion.TransformerConfig.base(vocab_size, vocab_size, dropout=DROPOUT, max_len=MAX_LEN)


def train_direction(args: argparse.Namespace, direction: str, vocab_size: int, device: str, work: pathlib.Path) -> dict:
    src, tgt = direction.split("-")
    pairs = {
        split: list(zip(load_ids(args.data, split, src, MAX_LEN), load_ids(args.data, split, tgt, MAX_LEN)))
        for split in SPLITS
    }
    train_batches = make_batches(pairs["train"], args.max_tokens, seed=args.seed)
    valid_batches = make_batches(pairs["valid"], args.max_tokens, shuffle=False)
    torch.manual_seed(args.seed)
    model = companion.Transformer(model_config(vocab_size, args.smoke))
    config = companion.TrainConfig(
        max_minutes=args.minutes,
        max_steps=args.max_steps,
        warmup=WARMUP,
        device=device,
        seed=args.seed,
        log_every=20,
        save_every_minutes=args.minutes / 20,
        keep_last=5,
        progress=False,
        compile=args.compile,
    )
    out_dir = work / direction
    started = time.time()
    summary = companion.Trainer(model, config, train_batches, valid_batches, out_dir=out_dir).train()
    checkpoints = list_checkpoints(out_dir / "checkpoints")[-5:]
    averaged = model_from_checkpoint(average_checkpoints(checkpoints)).to(device)
    decode_start = time.time()
    by_split = {
        split: translate_ids_alphas(
            averaged, [ids + [companion.EOS_ID] for ids, _ in pairs[split]], alphas=ALPHA_GRID, beam_size=BEAM,
            batch_size=256, device=device,
        )
        for split in ("valid", "test")
    }  # fmt: skip
    return {
        "hypothesis_ids_by_alpha": {
            split: {f"{alpha:g}": ids for alpha, ids in outputs.items()} for split, outputs in by_split.items()
        },
        "steps": summary["steps"],
        "epochs": round(summary["epochs"], 3),
        "train_minutes": round(summary["train_seconds"] / 60, 2),
        "tokens_seen": summary["tokens_seen"],
        "tokens_per_second": round(summary["tokens_seen"] / max(summary["train_seconds"], 1e-9)),
        "train_wall_minutes_incl_data_prep": round((decode_start - started) / 60, 2),
        "decode_minutes": round((time.time() - decode_start) / 60, 2),
        "valid": summary.get("valid"),
        "averaged_from": [p.name for p in checkpoints],
        "parameters": model.num_parameters(),
        "config": {
            "model": model.config.to_dict(),
            "max_tokens": args.max_tokens,
            "warmup": WARMUP,
            "minutes": args.minutes,
            "seed": args.seed,
            "tokenizer": "bpe (shared en+de)",
            "vocab_size": vocab_size,
            "compile": args.compile,
        },
        "learning_curve": learning_curve(out_dir),
    }


def train(args: argparse.Namespace) -> int:
    if args.smoke:
        device = "cpu"
    elif not torch.cuda.is_available():
        print(
            "error: bench/multi30k_gpu.py train needs a CUDA GPU (torch.cuda.is_available() is False); use "
            "--smoke to test the pipeline on the CPU",
            file=sys.stderr,
        )
        return 2
    else:
        device = "cuda"
        torch.backends.cuda.matmul.allow_tf32 = True
    vocab_size = int(torch.load(args.data, weights_only=True)["vocab_size"])
    started = time.time()
    raw = {
        "hardware": hardware(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "device": device,
        "minutes_per_direction": args.minutes,
        "results": {},
    }
    with tempfile.TemporaryDirectory(prefix="multi30k-gpu-") as work:
        for direction in args.directions:
            print(f"=== {direction}: training for {args.minutes} min on {device}", flush=True)
            raw["results"][direction] = train_direction(args, direction, vocab_size, device, pathlib.Path(work))
            r = raw["results"][direction]
            print(
                f"{direction}: {r['steps']} steps, {r['epochs']} epochs, {r['tokens_per_second']:,} tokens/s",
                flush=True,
            )
    raw["wall_minutes_total"] = round((time.time() - started) / 60, 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(raw) + "\n")
    print(f"wrote {args.out}")
    return 0


# -- score (here) ---------------------------------------------------------------------------------------------
def score(args: argparse.Namespace) -> int:
    from companion.data import tokenizer_from_dict
    from companion.evaluate import alpha_choice, corpus_bleu, corpus_chrf

    data = torch.load(args.data, weights_only=True)
    tokenizer = tokenizer_from_dict(json.loads(data["tokenizer"]))
    references = json.loads(data["references"])
    valid_references = json.loads(data["valid_references"])
    raw = json.loads(args.raw.read_text())
    results = {}
    for direction, r in raw["results"].items():
        tgt = direction.split("-")[1]
        decoded = {
            split: {float(alpha): [tokenizer.decode(ids) for ids in outputs] for alpha, outputs in by_alpha.items()}
            for split, by_alpha in r.pop("hypothesis_ids_by_alpha").items()
        }
        choice = alpha_choice(decoded["valid"], valid_references[tgt], beam_size=BEAM)  # on validation only
        hypotheses = decoded["test"][choice.alpha]
        refs = references[tgt]
        if len(hypotheses) != len(refs):
            raise SystemExit(
                f"{direction}: {len(hypotheses)} outputs for {len(refs)} references: "
                "--data is not the file the run was trained from"
            )
        (bleu, bleu_signature), (chrf, chrf_signature) = corpus_bleu(hypotheses, refs), corpus_chrf(hypotheses, refs)
        target = None if raw["device"] != "cuda" else TARGETS[direction]
        results[direction] = {
            "bleu": round(bleu, 2),
            "bleu_signature": bleu_signature,
            "chrf": round(chrf, 2),
            "chrf_signature": chrf_signature,
            "split": "test_2016_flickr",
            "sentences": len(refs),
            "beam_size": BEAM,
            "alpha": choice.alpha,
            "alpha_choice": {k: v for k, v in choice.to_dict().items() if k in ("bleu", "length_ratio", "sentences")}
            | {"chosen_on": "valid"},
            "bleu_at_paper_alpha": round(corpus_bleu(decoded["test"][0.6], refs)[0], 2),
            "target_bleu": target,
            "meets_target": None if target is None else bleu >= target,
            "command": raw["command"],
            "example_translations": hypotheses[:5],
            **r,
        }
        print(
            f"{direction}: alpha {choice.alpha:g} chosen on valid (BLEU by alpha {choice.to_dict()['bleu']}); test "
            f"BLEU {bleu:.2f} ({bleu_signature}), chrF {chrf:.2f}"
            + ("" if target is None else f" (target {target:g}: {'met' if bleu >= target else 'missed'})")
        )
    name = "multi30k_cuda" if raw["device"] == "cuda" else "multi30k_smoke"
    payload = {
        "date": raw["date"],
        "command": raw["command"],
        "hardware": raw["hardware"],
        "benchmark": "multi30k",
        "device": raw["device"],
        "minutes_per_direction": raw["minutes_per_direction"],
        "wall_minutes_total": raw["wall_minutes_total"],
        "load_average_at_end": None,
        "scored_with": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "results": results,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    else:
        print(f"wrote {write_results(name, payload)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python bench/multi30k_gpu.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True)
    p = steps.add_parser("prepare", help="here: shared BPE vocabulary and the ids of every split")
    p.add_argument("--out", type=pathlib.Path, required=True, help="file to write (e.g. bench/data/multi30k_bpe.pt)")
    p.add_argument("--vocab-size", type=int, default=8000, help="shared BPE vocabulary size (default 8000)")
    p.add_argument("--data-dir", default=None, help="local Multi30k folder (default: COMPANION_DATA_DIR, else the hub)")
    p.add_argument("--limit", type=int, default=None, help="only the first N pairs of each split (tests)")
    t = steps.add_parser("train", help="GPU machine: train, average, decode the test set")
    t.add_argument("--data", type=pathlib.Path, required=True, help="the file from the prepare step")
    t.add_argument("--out", type=pathlib.Path, required=True, help="JSON file for the outputs and the run facts")
    t.add_argument("--minutes", type=float, default=10.0, help="training minutes per direction (default 10)")
    t.add_argument("--max-steps", type=int, default=None, help="also stop after this many steps")
    t.add_argument("--directions", nargs="+", default=list(DIRECTIONS), choices=DIRECTIONS)
    t.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help=f"tokens per batch side (default {MAX_TOKENS})")
    t.add_argument("--compile", action="store_true", help="train with torch.compile")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--smoke", action="store_true", help="tiny model on the CPU, to test the pipeline")
    s = steps.add_parser("score", help="here: detokenize, sacreBLEU and chrF, write the results file")
    s.add_argument("--data", type=pathlib.Path, required=True, help="the file from the prepare step")
    s.add_argument("--raw", type=pathlib.Path, required=True, help="the JSON file the train step wrote")
    s.add_argument(
        "--out",
        type=pathlib.Path,
        default=None,
        help="results file (default: bench/results/multi30k_cuda.json, or multi30k_smoke.json)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("data", "raw"):
        path = getattr(args, name, None)
        if path is not None and not path.exists():
            build_parser().error(f"--{name} {path} does not exist")
    if args.step == "prepare":
        prepare(args)
        return 0
    return train(args) if args.step == "train" else score(args)


if __name__ == "__main__":
    sys.exit(main())
