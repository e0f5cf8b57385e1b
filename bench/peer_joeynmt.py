"""Peer benchmark: companion against JoeyNMT (the minimalist educational NMT toolkit) at equal minutes.

Both systems train the same model with the same recipe as companion's ``small`` preset (d_model 128, 2+2 post-LN
layers, 4 heads, d_ff 512, dropout 0.1, label smoothing 0.1, Adam (0.9, 0.98), Noam schedule with warmup 400 and
factor 1, 600-token batches: the preset's value when the comparison was made), on Multi30k de->en, for the same
number of wall-clock minutes of training and with the same number of CPU threads, one system after the other. Each
then translates test_2016_flickr with beam 4 and alpha 0.6; both outputs are detokenized the same way and scored by
the same sacreBLEU call (``companion.evaluate.corpus_bleu``/``corpus_chrf``). Reported per system: steps, steps/s,
tokens/s (non-pad source + target tokens per second of training) and BLEU/chrF.

The peer's fairest setting: no validation during training (JoeyNMT validates with greedy decoding every
``validation_freq`` steps by default; here never, the time budget ends training), no checkpoints during training
(one at the end), the same word vocabularies (the data are pre-split with companion's spaCy word tokenizer, so
JoeyNMT's whitespace ``level: word`` tokenizer sees the same tokens, and ``voc_min_freq: 2`` gives the same
vocabulary), the same threads, and JoeyNMT's own training loop otherwise. Every remaining difference in set-up is
listed in the results (``differences``).

Installing the peer (kept out of requirements.txt: a separate virtual environment, so that it cannot change the
project's packages)::

    python3 -m venv /tmp/joey-venv
    /tmp/joey-venv/bin/pip install joeynmt==2.3.0 torch==2.13.0 importlib_metadata
    # joeynmt 2.3.0 imports importlib_metadata without declaring it; torch 2.13.0 works with it

The full comparison (on an idle 2-core machine; ~35 minutes)::

    python bench/peer_joeynmt.py --minutes 12 --threads 2 --joey-python /tmp/joey-venv/bin/python

A smoke test: ``--minutes 1 --test-limit 200``. Results go to ``bench/results/peer_joeynmt.json`` (hardware, load,
command); runs are kept under ``--work-dir``. The script runs itself under the peer's interpreter
(``--worker joeynmt SPEC``) for JoeyNMT's part; that part imports only joeynmt and torch.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench/multi30k.py: busy-waiting threads on a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
SRC, TGT = "de", "en"
PRESET = "small"
# The comparison's batch budget, both systems: 600 tokens, the small preset's value when the committed results were
# measured (the preset batches 1,200 tokens since 2026-12-03, see companion/presets.py); given to companion
# explicitly so that the comparison does not move with the preset.
BATCH_TOKENS = 600
MIN_FREQ = 2
BEAM, ALPHA = 4, 0.6
SPLIT_STEMS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
DIFFERENCES = [
    f"Batching: companion sorts pairs by length and cuts batches of at most {BATCH_TOKENS} padded tokens "
    f"(batch * max(src_len+1, tgt_len+1) <= {BATCH_TOKENS}); JoeyNMT 2.3 samples pairs at random and closes a "
    f"batch once batch * max length >= {BATCH_TOKENS} (no length bucketing), so its batches carry more padding "
    "and fewer real tokens per step (see real_tokens_per_step).",
    "Dropout: companion drops out 0.1 on embeddings and on every residual branch, none inside attention or the "
    "feed-forward (attention_dropout = ffn_dropout = 0); JoeyNMT applies its one dropout 0.1 also to the "
    "attention weights and inside the feed-forward (no separate setting).",
    "Weights: companion averages its last 5 checkpoints (its default: one per minute of a --max-minutes run; "
    "with --minutes 1 they are 12 s apart); JoeyNMT uses its final weights (it has no built-in averaging in "
    "training). companion's final weights alone are scored too (companion_final_weights).",
    "Per-step work that only JoeyNMT does: it counts correct tokens (an argmax over the output) on every batch, "
    "sorts each batch by source length, and writes TensorBoard scalars every logging_freq (100) steps.",
    "Precision: companion's CPU default is float32 (its --bf16 applies on CUDA only); JoeyNMT fp16 off (float32).",
    "Initialisation: companion's (Xavier uniform on matrices, N(0, d_model^-0.5) embeddings, PyTorch's default "
    "biases); JoeyNMT xavier_uniform on weights and embeddings, zero biases (its defaults).",
    "Output layer: tied to the target embeddings in both (tie_output / tied_softmax); source and target "
    "embeddings separate in both.",
    "Time budget: companion stops itself after --max-minutes of training (checkpoints included); JoeyNMT is "
    "stopped by this script when a batch starts after the same number of seconds from its first batch (then "
    "it saves one checkpoint). Data preparation and vocabulary building are outside the budget for both.",
    "Output length limit in beam search: companion source length + 50 tokens; JoeyNMT 1.5 x the longest source "
    "in the batch (its default, max_output_length -1).",
    "Tokens: JoeyNMT reads text pre-split by companion's spaCy word tokenizer (tokens joined by single "
    "spaces) and splits on spaces; its hypotheses (tokens joined by spaces, <unk> kept) are detokenized with "
    "companion's WordTokenizer.detokenize, the same rules that companion's own output goes through.",
]


# -- the JoeyNMT configuration ------------------------------------------------------------------------------------
EMBED_INITS = {
    # JoeyNMT's default: Xavier uniform on the [vocab, 128] embedding matrices (std ~0.018, about 0.2 after the
    # sqrt(d_model) scaling, so the positional encoding dominates the first layer's input at the start).
    "xavier_uniform": {"embed_initializer": "xavier_uniform"},
    # companion's: N(0, d_model^-0.5), i.e. unit variance per coordinate after the sqrt(d_model) scaling.
    "normal": {"embed_initializer": "normal", "embed_init_weight": 128**-0.5},
}


def joey_config(
    work: pathlib.Path,
    data: pathlib.Path,
    *,
    threads: int,
    seed: int,
    embed_init: str = "xavier_uniform",
    batch_tokens: int = BATCH_TOKENS,
) -> dict[str, Any]:
    """JoeyNMT 2.3 configuration of the ``small`` preset's model and recipe (JSON is valid YAML).

    ``embed_init`` picks the embedding initialisation: ``"xavier_uniform"`` (JoeyNMT's default) or ``"normal"``
    (companion's N(0, d_model^-0.5)); see ``EMBED_INITS``. ``batch_tokens`` is JoeyNMT's token batch budget
    (``batch_size`` with ``batch_type: token``; companion's ``BATCH_TOKENS`` by default).
    """
    if embed_init not in EMBED_INITS:
        raise ValueError(f"embed_init must be one of {sorted(EMBED_INITS)}, got {embed_init!r}")
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be at least 1, got {batch_tokens}")
    embeddings = {"embedding_dim": 128, "scale": True, "dropout": 0.1, "freeze": False}
    layers = {
        "type": "transformer",
        "num_layers": 2,
        "num_heads": 4,
        "embeddings": embeddings,
        "hidden_size": 128,
        "ff_size": 512,
        "dropout": 0.1,
        "layer_norm": "post",
        "activation": "relu",
    }
    side = {"level": "word", "lowercase": False, "normalize": False, "voc_min_freq": MIN_FREQ, "max_length": 256}
    return {
        "name": "peer-joeynmt-small",
        "joeynmt_version": "2.3.0",
        "model_dir": str(work / "model"),
        "use_cuda": False,
        "fp16": False,
        "random_seed": seed,
        "data": {
            "train": str(data / "train"),
            "dev": str(data / "val"),
            "test": str(data / "test_2016_flickr"),
            "dataset_type": "plain",
            "src": {"lang": SRC, **side},
            "trg": {"lang": TGT, **side},
        },
        "training": {
            "optimizer": "adam",
            "adam_betas": [0.9, 0.98],
            "scheduling": "noam",
            "learning_rate_factor": 1.0,
            "learning_rate_warmup": 400,
            "label_smoothing": 0.1,
            "loss": "crossentropy",
            "normalization": "tokens",
            "batch_size": batch_tokens,
            "batch_type": "token",
            "batch_multiplier": 1,
            "epochs": 1000,  # the time budget ends training
            "validation_freq": 10**8,  # never (the time budget ends training long before)
            "logging_freq": 100,
            "early_stopping_metric": "ppl",
            "keep_best_ckpts": 1,
            "shuffle": True,
            "overwrite": True,
            "num_workers": 0,
            "print_valid_sents": [],
            "threads": threads,  # read by this script's worker (torch.set_num_threads), ignored by JoeyNMT
        },
        "testing": {
            "beam_size": BEAM,
            "beam_alpha": ALPHA,
            "batch_size": 64,
            "batch_type": "sentence",
            "max_output_length": -1,
            "eval_metrics": ["bleu"],
            "generate_unk": True,
        },
        "model": {
            "initializer": "xavier_uniform",
            **EMBED_INITS[embed_init],
            "bias_initializer": "zeros",
            "init_gain": 1.0,
            "tied_embeddings": False,
            "tied_softmax": True,
            "encoder": layers,
            "decoder": dict(layers),
        },
    }


# -- JoeyNMT's part, run under the peer's interpreter ----------------------------------------------------------------
def joey_worker(spec_path: pathlib.Path) -> None:
    """Train JoeyNMT for ``minutes`` of wall clock from its first batch, translate the test split, write results."""
    import torch
    from joeynmt.config import parse_global_args, set_validation_args
    from joeynmt.prediction import predict, prepare
    from joeynmt.training import TrainManager

    spec = json.loads(spec_path.read_text())
    cfg, budget = spec["config"], spec["minutes"] * 60
    torch.set_num_threads(cfg["training"].pop("threads"))
    state: dict[str, Any] = {"first": None, "last": None, "batches": 0, "src_tokens": 0, "tgt_tokens": 0}
    state["padded"] = 0
    original_step = TrainManager._train_step

    def timed_step(self, batch):
        now = time.perf_counter()
        if state["first"] is None:
            state["first"] = now
        elif now - state["first"] >= budget:
            state["last"] = now
            raise KeyboardInterrupt  # JoeyNMT's own way out: it saves the current weights and returns
        result = original_step(self, batch)
        state["batches"] += 1
        state["src_tokens"] += int(batch.src_length.sum())
        state["tgt_tokens"] += int(batch.ntokens)
        state["padded"] += int(batch.src.numel() + batch.trg.numel())
        return result

    TrainManager._train_step = timed_step
    pathlib.Path(cfg["model_dir"]).mkdir(parents=True, exist_ok=True)
    args = parse_global_args(cfg, rank=0, mode="train")
    model, train_data, dev_data, test_data = prepare(args, rank=0, mode="train")
    trainer = TrainManager(
        model=model,
        model_dir=args.model_dir,
        device=args.device,
        n_gpu=args.n_gpu,
        rank=0,
        num_workers=args.num_workers,
        autocast=args.autocast,
        seed=args.seed,
        train_args=args.train,
        dev_args=set_validation_args(args.test),
    )
    trainer.train_and_validate(train_data=train_data, valid_data=dev_data)
    train_seconds = (state["last"] or time.perf_counter()) - state["first"]
    test_data.reset_indices(random_subset=-1)  # the whole (prepared) test file
    started = time.perf_counter()
    *_, hypotheses, _raw, _scores, _att = predict(
        model=model,
        data=test_data,
        device=args.device,
        n_gpu=0,
        rank=0,
        compute_loss=False,
        normalization=args.train.normalization,
        num_workers=0,
        args=args.test,
        autocast=args.autocast,
    )
    result = {
        "steps": trainer.stats.steps,
        "epochs": trainer.stats.epochs,
        "train_seconds": train_seconds,
        "tokens_seen": state["src_tokens"] + state["tgt_tokens"],
        "target_tokens_seen": state["tgt_tokens"],
        "padded_positions_seen": state["padded"],
        "batches": state["batches"],
        "vocab_sizes": [len(model.src_vocab), len(model.trg_vocab)],
        "parameters": sum(p.numel() for p in model.parameters()),
        "decode_seconds": time.perf_counter() - started,
        "hypotheses": list(hypotheses),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    pathlib.Path(spec["result"]).write_text(json.dumps(result))


# -- the benchmark ---------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12.0, help="minutes of training per system (default 12)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for each system (default 2)")
    parser.add_argument(
        "--joey-python",
        default=os.environ.get("JOEYNMT_PYTHON", "/tmp/joey-venv/bin/python"),
        help="the interpreter of the virtual environment that has joeynmt (default: $JOEYNMT_PYTHON, else "
        "/tmp/joey-venv/bin/python)",
    )
    parser.add_argument("--systems", nargs="+", choices=("joeynmt", "companion"), default=["joeynmt", "companion"])
    parser.add_argument("--data-dir", default=os.environ.get("COMPANION_DATA_DIR", "/work/shared/data/multi30k"))
    parser.add_argument("--work-dir", default="runs/peer_joeynmt", help="where the runs and prepared data go")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--test-limit", type=int, default=None, help="score only the first N test sentences (smoke tests)"
    )
    parser.add_argument(
        "--joey-embed-init",
        choices=sorted(EMBED_INITS),
        default="xavier_uniform",
        help="JoeyNMT's embedding initialisation: xavier_uniform (its default) or normal (companion's "
        "N(0, d_model^-0.5)); default xavier_uniform",
    )
    parser.add_argument(
        "--joey-batch-tokens",
        type=int,
        default=BATCH_TOKENS,
        help=f"JoeyNMT's token batch budget (default {BATCH_TOKENS}, companion's); its random batches hold fewer "
        "real tokens per step than companion's length-sorted ones at the same budget (see real_tokens_per_step)",
    )
    parser.add_argument(
        "--tag", default=None, help="write bench/results/peer_joeynmt_TAG.json instead of peer_joeynmt.json"
    )
    parser.add_argument("--no-results", action="store_true", help="print the results instead of writing them")
    parser.add_argument("--worker", nargs=2, metavar=("SYSTEM", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error(f"--minutes must be positive, got {args.minutes}")
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.joey_batch_tokens < 1:
        parser.error(f"--joey-batch-tokens must be at least 1, got {args.joey_batch_tokens}")
    if args.test_limit is not None and args.test_limit < 1:
        parser.error(f"--test-limit must be at least 1, got {args.test_limit}")
    return args


def joeynmt_available(python: str) -> str | None:
    """JoeyNMT's version under ``python``, or None when that interpreter or the package is missing."""
    try:
        done = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('joeynmt'))"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def pretokenize(data_dir: str, out: pathlib.Path, limit: int | None):
    """Write each split as one pre-split sentence per line (``out/train.de`` ...); returns the companion
    tokenizers built from the training split (min_freq 2) and the test pairs."""
    from companion.data import WordTokenizer, load_multi30k
    from companion.data.tokenizers import spacy_tokenizer

    splits = load_multi30k(SRC, TGT, data_dir=data_dir)
    if limit is not None:
        splits["test"] = splits["test"][:limit]
    tokenizers = {
        language: WordTokenizer.build([pair[i] for pair in splits["train"]], language, min_freq=MIN_FREQ)
        for i, language in enumerate((SRC, TGT))
    }
    out.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        for i, language in enumerate((SRC, TGT)):
            split_text = spacy_tokenizer(language).pipe([pair[i] for pair in pairs], batch_size=1000)
            lines = [" ".join(t.text for t in doc if not t.is_space) for doc in split_text]
            (out / f"{SPLIT_STEMS[split]}.{language}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tokenizers, splits["test"]


def score(hypotheses: list[str], test: list[tuple[str, str]]) -> dict[str, Any]:
    from companion.evaluate import corpus_bleu, corpus_chrf

    references = [target for _, target in test]
    bleu, bleu_signature = corpus_bleu(hypotheses, references)
    chrf, chrf_signature = corpus_chrf(hypotheses, references)
    return {
        "bleu": round(bleu, 2),
        "bleu_signature": bleu_signature,
        "chrf": round(chrf, 2),
        "chrf_signature": chrf_signature,
        "sentences": len(references),
        "example_translations": hypotheses[:3],
    }


def rates(steps: int, tokens: int, seconds: float) -> dict[str, Any]:
    return {
        "steps": steps,
        "train_seconds": round(seconds, 1),
        "steps_per_second": round(steps / seconds, 3),
        "tokens_seen": tokens,
        "tokens_per_second": round(tokens / seconds),
        "real_tokens_per_step": round(tokens / max(steps, 1), 1),
    }


def run_joeynmt(args: argparse.Namespace, work: pathlib.Path, tokenizers, test) -> dict[str, Any]:
    version = joeynmt_available(args.joey_python)
    if version is None:
        raise SystemExit(
            f"peer_joeynmt: joeynmt is not importable with {args.joey_python}; install it into a separate "
            "virtual environment (see this script's docstring) and pass --joey-python"
        )
    config = joey_config(
        work / "joeynmt",
        work / "data",
        threads=args.threads,
        seed=args.seed,
        embed_init=args.joey_embed_init,
        batch_tokens=args.joey_batch_tokens,
    )
    spec = work / "joeynmt_spec.json"
    result_path = work / "joeynmt_result.json"
    spec.write_text(json.dumps({"config": config, "minutes": args.minutes, "result": str(result_path)}))
    (work / "joeynmt_config.yaml").write_text(json.dumps(config, indent=2))
    command = [args.joey_python, str(pathlib.Path(__file__).resolve()), "--worker", "joeynmt", str(spec)]
    started = time.time()
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    raw = json.loads(result_path.read_text())
    hypotheses = [tokenizers[TGT].detokenize(line.split(" ")) for line in raw["hypotheses"]]
    return {
        "version": version,
        "torch": raw["torch"],
        "torch_threads": raw["torch_threads"],
        **rates(raw["steps"], raw["tokens_seen"], raw["train_seconds"]),
        "epochs": raw["epochs"],
        "padded_positions_per_step": round(raw["padded_positions_seen"] / max(raw["steps"], 1), 1),
        "vocab_sizes": raw["vocab_sizes"],
        "parameters": raw["parameters"],
        "decode_seconds": round(raw["decode_seconds"], 1),
        "wall_seconds_incl_data_and_decoding": round(time.time() - started, 1),
        "config": config,
        "test": score(hypotheses, test),
    }


def companion_flags(args: argparse.Namespace, out: pathlib.Path) -> list[str]:
    return [
        "train",
        "--src",
        SRC,
        "--tgt",
        TGT,
        "--preset",
        PRESET,
        "--max-tokens",
        str(BATCH_TOKENS),
        "--tokenizer",
        "word",
        "--min-freq",
        str(MIN_FREQ),
        "--seed",
        str(args.seed),
        "--max-minutes",
        str(args.minutes),
        "--threads",
        str(args.threads),
        "--eval-every",
        "100000",
        "--no-progress",
        "--no-choose-alpha",  # both toolkits decode test with the recipe's fixed beam 4 and alpha 0.6
        "--data-dir",
        args.data_dir,
        "--out",
        str(out),
        "--overwrite",
    ]


def run_companion(args: argparse.Namespace, work: pathlib.Path, test) -> dict[str, Any]:
    import torch
    from _common import train_options

    from companion.checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint
    from companion.decode import translate
    from companion.runs import train_run

    flags = companion_flags(args, work / "companion")
    given = train_options(flags)
    started = time.time()
    summary = train_run(given, command=flags[1:])
    entry: dict[str, Any] = {
        "command": "python -m companion " + " ".join(flags),
        **rates(summary["steps"], summary["tokens_seen"], summary["train_seconds"]),
        "epochs": round(summary["epochs"], 3),
        "torch_threads": torch.get_num_threads(),
        "averaged_from": summary.get("averaged_from"),
    }
    sources = [source for source, _ in test]
    for label, path in (("test", summary.get("averaged") or summary["checkpoint"]), ("final", summary["checkpoint"])):
        checkpoint = load_checkpoint(path)
        model = model_from_checkpoint(checkpoint)
        src_tok, tgt_tok = tokenizers_from_checkpoint(checkpoint)
        decode_start = time.time()
        hypotheses = translate(model, sources, src_tok, tgt_tok, beam_size=BEAM, alpha=ALPHA)
        scored = score(hypotheses, test)
        scored["decode_seconds"] = round(time.time() - decode_start, 1)
        scored["checkpoint"] = str(path)
        if label == "test":
            entry["vocab_sizes"] = [src_tok.vocab_size, tgt_tok.vocab_size]
            entry["parameters"] = model.num_parameters()
            entry["test"] = scored
        else:
            entry["test_final_weights"] = scored
    entry["wall_seconds_incl_data_and_decoding"] = round(time.time() - started, 1)
    return entry


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        joey_worker(pathlib.Path(args.worker[1]))
        return 0
    import torch

    sys.path.insert(0, str(HERE))
    from _common import hardware, write_results

    torch.set_num_threads(args.threads)
    work = pathlib.Path(args.work_dir)
    load_at_start = os.getloadavg()
    tokenizers, test = pretokenize(args.data_dir, work / "data", args.test_limit)
    results: dict[str, Any] = {}
    for system in args.systems:
        print(f"=== {system}: {args.minutes} minutes, {args.threads} threads", flush=True)
        loads = os.getloadavg()
        if system == "joeynmt":
            results[system] = run_joeynmt(args, work, tokenizers, test)
        else:
            results[system] = run_companion(args, work, test)
        results[system]["load_average_before"] = [round(x, 2) for x in loads]
        results[system]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps({k: v for k, v in results[system].items() if k != "config"}, indent=2), flush=True)
    payload = {
        "benchmark": "peer_joeynmt",
        "task": f"Multi30k {SRC}->{TGT}, scored on test_2016_flickr"
        + (f" (first {args.test_limit} sentences)" if args.test_limit else ""),
        "minutes_per_system": args.minutes,
        "threads_per_system": args.threads,
        "search": {"beam_size": BEAM, "alpha": ALPHA},
        "joeynmt_embed_init": args.joey_embed_init,
        "joeynmt_batch_tokens": args.joey_batch_tokens,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_average_at_start": [round(x, 2) for x in load_at_start],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "tokens_per_second_counts": "non-pad source + target tokens (with <eos>) per second of training",
        "results": results,
        "differences": DIFFERENCES,
    }
    if args.no_results:
        print(json.dumps({"hardware": hardware(), **payload}, indent=2))
    else:
        name = "peer_joeynmt" + (f"_{args.tag}" if args.tag else "")
        print(f"results written to {write_results(name, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
