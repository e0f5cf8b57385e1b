"""Command line: ``python -m companion train | translate | evaluate`` (also installed as ``companion``).

Examples::

    python -m companion train --preset small --src de --tgt en --data-dir ../shared/data/multi30k \\
        --max-minutes 20 --average-last 5 --out runs/de-en
    python -m companion translate --checkpoint runs/de-en < sentences.de > sentences.en
    python -m companion evaluate --checkpoint runs/de-en --split test
    torchrun --nproc_per_node 2 -m companion train --preset base --out runs/base   # several processes

Run ``python -m companion COMMAND --help`` for every flag.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

__all__ = ["main", "PRESETS", "build_parser", "run_train", "resolve_checkpoint", "load_for_inference"]

# Model sizes and the training settings that go with them. Flags override every entry.
PRESETS: dict[str, dict[str, Any]] = {
    # a few seconds on a laptop CPU: tests and quick starts
    "tiny": dict(d_model=64, num_heads=4, layers=2, d_ff=256, dropout=0.1, norm_first=False, max_tokens=2000,
                 warmup=200, lr_factor=1.0),
    # Multi30k on 2 CPU cores in ~20 minutes (tuned with bench/multi30k.py: many small steps beat a wider model)
    "small": dict(d_model=128, num_heads=4, layers=2, d_ff=512, dropout=0.1, norm_first=False, max_tokens=600,
                  warmup=400, lr_factor=1.0),
    # the paper's base model (Table 3): 65M parameters with a 37k shared vocabulary
    "base": dict(d_model=512, num_heads=8, layers=6, d_ff=2048, dropout=0.1, norm_first=False, max_tokens=25000,
                 warmup=4000, lr_factor=1.0),
    # the paper's big model: 213M parameters
    "big": dict(d_model=1024, num_heads=16, layers=6, d_ff=4096, dropout=0.3, norm_first=False, max_tokens=25000,
                warmup=4000, lr_factor=1.0),
}

# Defaults of the train flags that presets do not set.
TRAIN_DEFAULTS: dict[str, Any] = dict(
    task="multi30k", src="en", tgt="de", data_dir=None, tokenizer="bpe", vocab_size=8000, min_freq=2,
    preset="small", d_model=None, num_heads=None, layers=None, d_ff=None, dropout=None, norm_first=None, max_len=256,
    max_tokens=None, accum_steps=1, max_steps=None, max_minutes=None, max_epochs=None, warmup=None,
    lr_factor=None, label_smoothing=0.1, clip_grad=None, device="auto", compile=False, bf16=True, seed=0,
    out=None, resume=False, overwrite=False, average_last=1, save_every=None, save_every_minutes=None,
    keep_last=5, eval_every=None, log_every=20, progress=True, num_examples=20000, synthetic_vocab=20,
    synthetic_max_len=10, limit_train=None, threads=None,
)
# Flags that may change when a run is resumed; every other flag must match the recorded run.
RESUMABLE = {"max_steps", "max_minutes", "max_epochs", "device", "compile", "bf16", "progress", "eval_every",
             "log_every", "save_every", "save_every_minutes", "keep_last", "average_last", "data_dir", "resume",
             "overwrite", "out", "threads"}
RUN_ARTIFACTS = ("run.json", "metrics.jsonl", "checkpoints", "averaged.pt")


class CliError(Exception):
    """A problem with the command line or the files it names; printed without a traceback."""


# --------------------------------------------------------------------------------------------------------
# Argument parsing
# --------------------------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    d = TRAIN_DEFAULTS
    presets = "; ".join(f"{name}: d_model={s['d_model']} layers={s['layers']} d_ff={s['d_ff']} heads="
                        f"{s['num_heads']} dropout={s['dropout']} {'pre-LN' if s['norm_first'] else 'post-LN'} "
                        f"max_tokens={s['max_tokens']} warmup={s['warmup']} lr_factor={s['lr_factor']}"
                        for name, s in PRESETS.items())
    data = p.add_argument_group("data")
    data.add_argument("--task", choices=["multi30k", "copy", "reverse", "sort"],
                      help=f"what to learn: Multi30k translation or a synthetic toy task (default: {d['task']})")
    data.add_argument("--src", choices=["en", "de"], help=f"source language (default: {d['src']})")
    data.add_argument("--tgt", choices=["en", "de"], help=f"target language (default: {d['tgt']})")
    data.add_argument("--data-dir", metavar="DIR",
                      help="folder with Multi30k's train/val/test_2016_flickr .en/.de(.gz) files (default: "
                           "$COMPANION_DATA_DIR, else the Hugging Face hub bentrevett/multi30k)")
    data.add_argument("--tokenizer", choices=["word", "bpe"],
                      help="word: spaCy words, one vocabulary per language; bpe: byte-pair subwords shared by "
                           f"both languages, as in the paper (default: {d['tokenizer']})")
    data.add_argument("--vocab-size", type=_positive_int, metavar="N",
                      help=f"size of the shared BPE vocabulary (default: {d['vocab_size']})")
    data.add_argument("--min-freq", type=_positive_int, metavar="N",
                      help=f"word tokenizer: words seen fewer times become <unk> (default: {d['min_freq']})")
    data.add_argument("--max-tokens", type=_positive_int, metavar="N",
                      help="tokens per batch (batch size x longest sentence, per side; the paper: 25000 over all "
                           "GPUs). Under torchrun this is the global batch, split between processes "
                           "(default: from the preset)")
    data.add_argument("--limit-train", type=_positive_int, metavar="N",
                      help="use only the first N training pairs (quick experiments; vocabularies come from them too)")
    data.add_argument("--num-examples", type=_positive_int, metavar="N",
                      help=f"synthetic tasks: training examples (default: {d['num_examples']})")
    data.add_argument("--synthetic-vocab", type=_positive_int, metavar="N",
                      help=f"synthetic tasks: vocabulary size incl. 4 specials (default: {d['synthetic_vocab']})")
    data.add_argument("--synthetic-max-len", type=_positive_int, metavar="N",
                      help=f"synthetic tasks: longest sequence (default: {d['synthetic_max_len']})")

    model = p.add_argument_group("model")
    model.add_argument("--preset", choices=list(PRESETS), help=f"model size and matching settings: {presets} "
                                                                f"(default: {d['preset']})")
    model.add_argument("--d-model", type=_positive_int, metavar="N", help="model width (default: from the preset)")
    model.add_argument("--heads", dest="num_heads", type=_positive_int, metavar="N",
                       help="attention heads (default: from the preset)")
    model.add_argument("--layers", type=_positive_int, metavar="N",
                       help="encoder layers = decoder layers (default: from the preset)")
    model.add_argument("--d-ff", type=_positive_int, metavar="N",
                       help="feed-forward inner width (default: from the preset)")
    model.add_argument("--dropout", type=_fraction, metavar="P", help="dropout P_drop (default: from the preset)")
    model.add_argument("--norm-first", dest="norm_first", action="store_const", const=True,
                       help="pre-LN: LayerNorm before each sub-layer (trains faster at high learning rates)")
    model.add_argument("--post-ln", dest="norm_first", action="store_const", const=False,
                       help="post-LN, the paper's x = LayerNorm(x + Sublayer(x)) (default: from the preset)")
    model.add_argument("--max-len", type=_positive_int, metavar="N",
                       help=f"longest sequence the model accepts; longer training sentences are truncated with "
                            f"a warning (default: {d['max_len']})")

    opt = p.add_argument_group("optimisation")
    opt.add_argument("--warmup", type=_positive_int, metavar="STEPS",
                     help="warmup steps of the learning-rate schedule (paper: 4000; default: from the preset)")
    opt.add_argument("--lr-factor", type=_positive_float, metavar="F",
                     help="multiplies the paper's learning rate d_model^-0.5 min(step^-0.5, step warmup^-1.5) "
                          "(default: from the preset)")
    opt.add_argument("--label-smoothing", type=_fraction, metavar="EPS",
                     help=f"label smoothing eps_ls (paper: 0.1; default: {d['label_smoothing']})")
    opt.add_argument("--accum-steps", type=_positive_int, metavar="N",
                     help=f"batches per optimizer step (gradient accumulation; default: {d['accum_steps']})")
    opt.add_argument("--clip-grad", type=_positive_float, metavar="NORM",
                     help="clip the gradient norm to NORM (default: no clipping, as in the paper)")
    opt.add_argument("--seed", type=int, metavar="N", help=f"random seed (default: {d['seed']})")

    limits = p.add_argument_group("limits (training stops at the first one reached; set at least one)")
    limits.add_argument("--max-steps", type=_positive_int, metavar="N", help="optimizer steps in total")
    limits.add_argument("--max-minutes", type=_positive_float, metavar="M",
                        help="wall-clock minutes of training in total (summed over --resume sessions)")
    limits.add_argument("--max-epochs", type=_positive_int, metavar="N", help="passes over the training data")

    run = p.add_argument_group("run")
    run.add_argument("--out", metavar="DIR", help="output folder for checkpoints, metrics.jsonl and run.json "
                                                  "(required)")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in --out from its latest checkpoint (limits, device and logging flags "
                          "may change; the rest must match)")
    run.add_argument("--overwrite", action="store_true",
                     help="delete the run already in --out (its run.json, metrics.jsonl, checkpoints/ and "
                          "averaged.pt only) and start afresh")
    run.add_argument("--device", metavar="DEV",
                     help=f"auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: {d['device']})")
    run.add_argument("--compile", action="store_true", help="compile the model with torch.compile")
    run.add_argument("--threads", type=_positive_int, metavar="N",
                     help="CPU threads for PyTorch (default: PyTorch's choice; torchrun sets 1 per process)")
    run.add_argument("--no-bf16", dest="bf16", action="store_false",
                     help="disable bfloat16 autocast on CUDA (it is never used on CPU/MPS)")
    run.add_argument("--average-last", type=_positive_int, metavar="N",
                     help="at the end, average the last N checkpoints into DIR/averaged.pt (paper: 5; "
                          f"default: {d['average_last']} = no averaging)")
    run.add_argument("--save-every", type=_positive_int, metavar="STEPS", help="write a checkpoint every STEPS")
    run.add_argument("--save-every-minutes", type=_positive_float, metavar="M",
                     help="write a checkpoint every M minutes (a final one is always written)")
    run.add_argument("--keep-last", type=_positive_int, metavar="N",
                     help=f"keep only the newest N step checkpoints (default: {d['keep_last']})")
    run.add_argument("--eval-every", type=_positive_int, metavar="STEPS",
                     help="validation loss every STEPS (default: only at the end)")
    run.add_argument("--log-every", type=_positive_int, metavar="STEPS",
                     help=f"metrics.jsonl line every STEPS (default: {d['log_every']})")
    run.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")


def _add_inference_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, metavar="PATH",
                   help="a checkpoint file, or a run folder (its averaged.pt if present, else its latest checkpoint)")
    p.add_argument("--beam-size", type=_positive_int, default=4, metavar="K",
                   help="beam width; 1 = greedy decoding (default: 4, as in the paper)")
    p.add_argument("--alpha", type=float, default=0.6, metavar="A",
                   help="length penalty alpha of beam search (default: 0.6, as in the paper)")
    p.add_argument("--batch-size", type=_positive_int, default=64, metavar="N",
                   help="sentences decoded together (default: 64)")
    p.add_argument("--device", default="auto", metavar="DEV",
                   help="auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: auto)")


def build_parser() -> argparse.ArgumentParser:
    """The ``companion`` argument parser with its three sub-commands."""
    parser = argparse.ArgumentParser(
        prog="companion", description="Train, run and evaluate the Transformer of 'Attention Is All You Need'.",
        epilog="Run 'companion COMMAND --help' for the flags of each command.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser(
        "train", argument_default=argparse.SUPPRESS, help="train a model (Multi30k or a synthetic task)",
        description="Train a Transformer with the paper's recipe (Adam 0.9/0.98/1e-9, warmup + inverse-square-root "
                    "learning rate, label smoothing, dropout). Writes DIR/run.json, DIR/metrics.jsonl (JSON lines) "
                    "and DIR/checkpoints/step_*.pt. Several processes: torchrun --nproc_per_node N -m companion "
                    "train ...")
    _add_train_arguments(train)

    translate = sub.add_parser(
        "translate", help="translate sentences, one per line (stdin -> stdout)",
        description="Translate one sentence per line from --input (or stdin) to stdout, in the same order. An "
                    "empty input line gives an empty output line. Sentences longer than the model's max_len are "
                    "truncated with a warning.")
    _add_inference_arguments(translate)
    translate.add_argument("--input", metavar="FILE", help="UTF-8 text file, one sentence per line (default: stdin)")

    evaluate = sub.add_parser(
        "evaluate", help="BLEU and chrF (sacreBLEU) on a Multi30k split",
        description="Translate a Multi30k split with the checkpoint and score it with sacreBLEU (BLEU and chrF on "
                    "detokenized text; the signatures are printed).")
    _add_inference_arguments(evaluate)
    evaluate.add_argument("--split", choices=["test", "valid", "train"], default="test",
                          help="which split; test = test_2016_flickr (default: test)")
    evaluate.add_argument("--data-dir", metavar="DIR",
                          help="Multi30k folder (default: $COMPANION_DATA_DIR, else the folder recorded by the run "
                               "if it still exists, else the Hugging Face hub)")
    evaluate.add_argument("--limit", type=_positive_int, metavar="N", help="score only the first N sentences")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


# --------------------------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------------------------
def resolve_train_args(given: dict[str, Any]) -> dict[str, Any]:
    """Explicit flags > preset > defaults."""
    preset_name = given.get("preset", TRAIN_DEFAULTS["preset"])
    resolved = {**TRAIN_DEFAULTS, **{k: v for k, v in PRESETS[preset_name].items()}, **given}
    resolved["preset"] = preset_name
    return resolved


def _holds_run(out: Path) -> bool:
    return any((out / name).exists() for name in RUN_ARTIFACTS)


def _describe_run(out: Path) -> str:
    from .checkpoint import list_checkpoints

    found = list_checkpoints(out / "checkpoints")
    latest = f", latest {found[-1].name}" if found else ""
    return f"{len(found)} checkpoint(s){latest}"


def prepare_out_dir(out: Path, resume: bool, overwrite: bool, is_main: bool) -> Path | None:
    """Refuse to clobber an existing run; returns the checkpoint to resume from (or None)."""
    from .checkpoint import latest_checkpoint

    if resume and overwrite:
        raise CliError("--resume and --overwrite contradict each other; pass one of them")
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {out} exists and is not a folder")
    if _holds_run(out):
        if resume:
            latest = latest_checkpoint(out / "checkpoints")
            if latest is None:
                raise CliError(f"--resume: {out} holds a run but no checkpoint to resume from; pass --overwrite "
                               "to start afresh")
            return latest
        if not overwrite:
            raise CliError(f"--out {out} already holds a run ({_describe_run(out)}); pass --resume to continue "
                           "it, --overwrite to replace it, or choose another folder")
        if is_main:
            for name in RUN_ARTIFACTS:
                target = out / name
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
    elif resume:
        raise CliError(f"--resume: {out} holds no run to resume")
    return None


def _merge_resumed_args(recorded: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    conflicts = [f"--{k.replace('_', '-')} {given[k]!r} (the run used {recorded.get(k)!r})"
                 for k in given if k not in RESUMABLE and given[k] != recorded.get(k)]
    if conflicts:
        raise CliError("--resume continues the recorded run; these flags differ from it: " + "; ".join(conflicts)
                       + ". Start a new run (another --out, or --overwrite) to change them.")
    preset = PRESETS.get(recorded.get("preset"), {})
    return {**TRAIN_DEFAULTS, **preset, **recorded, **given, "resume": True}  # defaults fill keys added later


def _build_data(args: dict[str, Any], saved_tokenizers: dict | None, rank: int, world_size: int):
    """Tokenizers, training and validation batches for ``args`` (tokenizers from the checkpoint on resume)."""
    from .data import (SubwordTokenizer, WordTokenizer, encode_pairs, load_multi30k, make_batches,
                       synthetic_pairs, tokenizer_from_dict)

    if args["task"] != "multi30k":
        vocab = args["synthetic_vocab"]
        train = synthetic_pairs(args["task"], args["num_examples"], max_len=args["synthetic_max_len"],
                                vocab_size=vocab, seed=args["seed"])
        valid = synthetic_pairs(args["task"], max(200, args["num_examples"] // 50),
                                max_len=args["synthetic_max_len"], vocab_size=vocab, seed=args["seed"] + 1)
        tokenizers, vocab_sizes = None, (vocab, vocab)
    else:
        if args["src"] == args["tgt"]:
            raise CliError(f"--src and --tgt must differ, got {args['src']!r} for both")
        splits = load_multi30k(args["src"], args["tgt"], args["data_dir"])
        if args["limit_train"]:
            splits["train"] = splits["train"][: args["limit_train"]]
        if saved_tokenizers is not None:
            src_tok, tgt_tok = (tokenizer_from_dict(saved_tokenizers[s]) for s in ("src", "tgt"))
        else:
            src_tok, tgt_tok = _train_tokenizers(args, splits["train"], rank, world_size)
        train = encode_pairs(splits["train"], src_tok, tgt_tok, max_len=args["max_len"])
        valid = encode_pairs(splits["valid"], src_tok, tgt_tok, max_len=args["max_len"])
        tokenizers, vocab_sizes = {"src": src_tok, "tgt": tgt_tok}, (src_tok.vocab_size, tgt_tok.vocab_size)
    train_batches = make_batches(train, args["max_tokens"], seed=args["seed"])
    valid_batches = make_batches(valid, args["max_tokens"], shuffle=False)
    return tokenizers, vocab_sizes, train_batches, valid_batches


def _train_tokenizers(args: dict[str, Any], train_pairs, rank: int, world_size: int):
    """Build the tokenizers on rank 0 and share them, so that every rank holds identical vocabularies."""
    from .data import SubwordTokenizer, WordTokenizer, tokenizer_from_dict

    dicts: list[Any] = [None]
    if rank == 0:
        src_texts, tgt_texts = [s for s, _ in train_pairs], [t for _, t in train_pairs]
        if args["tokenizer"] == "bpe":
            shared = SubwordTokenizer.train(src_texts + tgt_texts, vocab_size=args["vocab_size"])
            dicts = [{"src": shared.to_dict(), "tgt": shared.to_dict()}]
        else:
            dicts = [{"src": WordTokenizer.build(src_texts, args["src"], min_freq=args["min_freq"]).to_dict(),
                      "tgt": WordTokenizer.build(tgt_texts, args["tgt"], min_freq=args["min_freq"]).to_dict()}]
    if world_size > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(dicts, src=0)
    src_tok, tgt_tok = tokenizer_from_dict(dicts[0]["src"]), tokenizer_from_dict(dicts[0]["tgt"])
    return src_tok, tgt_tok


def model_config_from_args(args: dict[str, Any], src_vocab: int, tgt_vocab: int):
    """The :class:`~companion.model.TransformerConfig` that the train flags describe."""
    from .model import TransformerConfig

    shared = args["task"] == "multi30k" and args["tokenizer"] == "bpe"
    return TransformerConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=args["d_model"], num_heads=args["num_heads"],
        num_encoder_layers=args["layers"], num_decoder_layers=args["layers"], d_ff=args["d_ff"],
        dropout=args["dropout"], max_len=args["max_len"], share_embeddings=shared and src_vocab == tgt_vocab,
        tie_output=True, norm_first=bool(args["norm_first"]),
    )


def train_config_from_args(args: dict[str, Any]):
    """The :class:`~companion.train.TrainConfig` that the train flags describe."""
    from .train import TrainConfig

    return TrainConfig(
        max_steps=args["max_steps"], max_minutes=args["max_minutes"], max_epochs=args["max_epochs"],
        warmup=args["warmup"], lr_factor=args["lr_factor"], label_smoothing=args["label_smoothing"],
        accum_steps=args["accum_steps"], clip_grad=args["clip_grad"], device=args["device"], bf16=args["bf16"],
        compile=args["compile"], seed=args["seed"], log_every=args["log_every"], eval_every=args["eval_every"],
        save_every=args["save_every"], save_every_minutes=args["save_every_minutes"], keep_last=args["keep_last"],
        progress=args["progress"],
    )


def _write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run_train(given: dict[str, Any], argv: Sequence[str] | None = None, stream: TextIO | None = None) -> dict[str, Any]:
    """Run ``companion train`` with the explicitly given flags ``given`` (argparse dest names).

    Returns a summary dict (steps, time, validation numbers, checkpoint paths). Used by the CLI and by
    ``bench/multi30k.py``.
    """
    import torch

    from . import __version__
    from .checkpoint import average_checkpoints, list_checkpoints, load_checkpoint, write_checkpoint
    from .model import Transformer
    from .train import Trainer, cleanup_distributed, setup_distributed

    stream = stream or sys.stdout
    if not given.get("out"):
        raise CliError("--out DIR is required (where checkpoints and logs go)")
    out = Path(given["out"])
    device_flag = given.get("device", TRAIN_DEFAULTS["device"])
    if given.get("threads"):
        torch.set_num_threads(given["threads"])
    rank, world_size, _ = setup_distributed(device_flag)
    try:
        resume_from = prepare_out_dir(out, given.get("resume", False), given.get("overwrite", False), rank == 0)
        saved_tokenizers = None
        if resume_from is not None:
            checkpoint = load_checkpoint(resume_from)
            recorded = dict(checkpoint.get("run_info", {}).get("args") or {})
            if not recorded:
                raise CliError(f"{resume_from} does not record the flags of its run; cannot --resume it")
            args = _merge_resumed_args(recorded, given)
            saved_tokenizers = checkpoint.get("tokenizers")
        else:
            args = resolve_train_args(given)
        if args["max_steps"] is None and args["max_minutes"] is None and args["max_epochs"] is None:
            raise CliError("set a limit: --max-steps, --max-minutes and/or --max-epochs")
        if world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # rank 0 has cleaned the folder
        out.mkdir(parents=True, exist_ok=True)

        started = time.time()
        tokenizers, (src_vocab, tgt_vocab), train_batches, valid_batches = _build_data(
            args, saved_tokenizers, rank, world_size)
        config = model_config_from_args(args, src_vocab, tgt_vocab)
        torch.manual_seed(args["seed"])
        model = Transformer(config)
        command = list(argv) if argv is not None else sys.argv[1:]
        run_info = {"task": args["task"], "src": args["src"], "tgt": args["tgt"], "args": args,
                    "command": command, "world_size": world_size}
        trainer = Trainer(model, train_config_from_args(args), train_batches, valid_batches, out_dir=out,
                          tokenizers=tokenizers, run_info=run_info)
        if resume_from is not None:
            trainer.load_checkpoint(resume_from)
        if rank == 0:
            _write_json_atomic(out / "run.json", {
                "companion_version": __version__, "torch_version": str(torch.__version__),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": ["companion", "train", *command],
                "args": args, "world_size": world_size, "device": str(trainer.device),
                "model_parameters": model.num_parameters(), "train_batches": len(train_batches),
                "resumed_from": str(resume_from) if resume_from else None,
            })
            print(f"companion train: {args['task']} {args['src']}->{args['tgt'] if args['task'] == 'multi30k' else ''}"
                  f" preset={args['preset']} params={model.num_parameters():,} vocab={src_vocab}/{tgt_vocab} "
                  f"batches/epoch={len(train_batches)} device={trainer.device} world_size={world_size}"
                  + (f" resumed at step {trainer.state.step}" if resume_from else ""), file=stream, flush=True)
        summary = trainer.train()
        if rank == 0 and args["average_last"] > 1:
            paths = list_checkpoints(out / "checkpoints")[-args["average_last"]:]
            averaged = average_checkpoints(paths)
            summary["averaged"] = str(write_checkpoint(averaged, out / "averaged.pt"))
            summary["averaged_from"] = [p.name for p in paths]
        summary["wall_seconds"] = time.time() - started
        if rank == 0:
            valid = summary.get("valid") or {}
            ppl = f" valid_ppl={valid['valid_ppl']:.2f}" if valid else ""
            print(f"companion train: stopped ({summary['stop_reason']}) at step {summary['steps']} after "
                  f"{summary['train_seconds'] / 60:.1f} min of training, epoch {summary['epochs']:.2f}{ppl}; "
                  f"checkpoint {summary['checkpoint']}"
                  + (f"; averaged {len(summary['averaged_from'])} -> {summary['averaged']}" if "averaged" in summary
                     else ""), file=stream, flush=True)
        return summary
    finally:
        cleanup_distributed()


# --------------------------------------------------------------------------------------------------------
# translate / evaluate
# --------------------------------------------------------------------------------------------------------
def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint file, or for a run folder its ``averaged.pt`` (if present) else its latest checkpoint."""
    from .checkpoint import latest_checkpoint

    path = Path(path)
    if path.is_dir():
        if (path / "averaged.pt").is_file():
            return path / "averaged.pt"
        latest = latest_checkpoint(path / "checkpoints") or latest_checkpoint(path)
        if latest is None:
            raise CliError(f"--checkpoint {path} is a folder without averaged.pt or checkpoints/step_*.pt")
        return latest
    if not path.exists():
        raise CliError(f"--checkpoint {path} does not exist")
    return path


def load_for_inference(path: str | os.PathLike, device: str = "auto"):
    """``(model, src_tokenizer, tgt_tokenizer, checkpoint, device)`` for translating with a checkpoint."""
    from .checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint
    from .train import resolve_device

    target = resolve_device(device)
    checkpoint = load_checkpoint(resolve_checkpoint(path))
    src_tok, tgt_tok = tokenizers_from_checkpoint(checkpoint)
    model = model_from_checkpoint(checkpoint, device=target)
    return model, src_tok, tgt_tok, checkpoint, target


def run_translate(args: argparse.Namespace, stdin: TextIO, stdout: TextIO) -> int:
    from .decode import translate

    model, src_tok, tgt_tok, _, device = load_for_inference(args.checkpoint, args.device)
    if args.input:
        try:
            with open(args.input, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError as error:
            raise CliError(f"--input {args.input}: {error.strerror}") from None
    else:
        lines = stdin.read().splitlines()
    wanted = [i for i, line in enumerate(lines) if line.strip()]
    outputs = [""] * len(lines)
    if wanted:
        translations = translate(model, [lines[i].strip() for i in wanted], src_tok, tgt_tok,
                                 beam_size=args.beam_size, alpha=args.alpha, batch_size=args.batch_size, device=device)
        for i, text in zip(wanted, translations):
            outputs[i] = text
    for text in outputs:
        stdout.write(text.replace("\n", " ") + "\n")
    stdout.flush()
    return 0


def evaluate_checkpoint(checkpoint_path: str | os.PathLike, split: str = "test", *, data_dir: str | None = None,
                        beam_size: int = 4, alpha: float = 0.6, batch_size: int = 64, device: str = "auto",
                        limit: int | None = None) -> dict[str, Any]:
    """Translate a Multi30k split with a checkpoint and score it; returns BLEU, chrF, signatures and facts."""
    from .data import DATA_DIR_ENV, load_multi30k
    from .evaluate import evaluate_translation

    model, src_tok, tgt_tok, checkpoint, target = load_for_inference(checkpoint_path, device)
    run_info = checkpoint.get("run_info") or {}
    if run_info.get("task", "multi30k") != "multi30k":
        raise CliError(f"the checkpoint was trained on the synthetic task {run_info['task']!r}; evaluate scores "
                       "Multi30k translations")
    src, tgt = run_info.get("src", "en"), run_info.get("tgt", "de")
    if data_dir is None and not os.environ.get(DATA_DIR_ENV):
        recorded = (run_info.get("args") or {}).get("data_dir")
        data_dir = recorded if recorded and Path(recorded).is_dir() else None
    pairs = load_multi30k(src, tgt, data_dir)[split]
    if limit is not None:
        pairs = pairs[:limit]
    started = time.time()
    result = evaluate_translation(model, pairs, src_tok, tgt_tok, beam_size=beam_size, alpha=alpha,
                                  batch_size=batch_size, device=target)
    return {
        "bleu": result["bleu"], "bleu_signature": result["bleu_signature"], "chrf": result["chrf"],
        "chrf_signature": result["chrf_signature"], "hypotheses": result["hypotheses"],
        "direction": f"{src}->{tgt}", "split": "test_2016_flickr" if split == "test" else split,
        "sentences": len(pairs), "beam_size": beam_size, "alpha": alpha,
        "checkpoint": str(resolve_checkpoint(checkpoint_path)), "step": checkpoint.get("step"),
        "decode_seconds": time.time() - started,
    }


def run_evaluate(args: argparse.Namespace, stdout: TextIO) -> int:
    result = evaluate_checkpoint(args.checkpoint, args.split, data_dir=args.data_dir, beam_size=args.beam_size,
                                 alpha=args.alpha, batch_size=args.batch_size, device=args.device, limit=args.limit)
    if args.json:
        stdout.write(json.dumps({k: v for k, v in result.items() if k != "hypotheses"}, indent=2) + "\n")
    else:
        stdout.write(f"{result['direction']} {result['split']} ({result['sentences']} sentences, beam "
                     f"{result['beam_size']}, alpha {result['alpha']}, {result['checkpoint']}, step {result['step']})\n")
        stdout.write(f"BLEU = {result['bleu']:.2f}  {result['bleu_signature']}\n")
        stdout.write(f"chrF = {result['chrf']:.2f}  {result['chrf_signature']}\n")
    stdout.flush()
    return 0


# --------------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m companion`` and of the ``companion`` console script; returns the exit code."""
    from .checkpoint import CheckpointError
    from .data import DataUnavailableError
    from .train import DeviceUnavailableError, TrainingDivergedError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            given = {k: v for k, v in vars(args).items() if k != "command"}
            run_train(given, argv=argv[1:])
            return 0
        if args.command == "translate":
            return run_translate(args, sys.stdin, sys.stdout)
        return run_evaluate(args, sys.stdout)
    except (CliError, CheckpointError, DataUnavailableError, TrainingDivergedError, DeviceUnavailableError,
            FileNotFoundError, ValueError) as error:
        print(f"companion {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
