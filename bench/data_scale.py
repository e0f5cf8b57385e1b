"""How preparing a large corpus scales: synthetic parallel corpora of N pairs, tokenizer training, the on-disk token
store and the first lazy batches, with wall time, pairs/s and peak memory (RSS) per size.

    python bench/data_scale.py --pairs 500000 1500000 4500000   # writes bench/results/data_scale_cpu.json
    python bench/data_scale.py --smoke --output /tmp/smoke.json  # a tiny run (the test suite runs this)

The corpus: two plain text files of random "sentences" of word-like tokens (a Zipf-distributed vocabulary of
20,000 words per language; sentence lengths like Multi30k's captions, mean ~12.6 words, the target's length the
source's +- a few words). Each size runs in a fresh process, so its peak RSS is its own: ``self`` is the main
process (reading, tokenizer training, writing, batch plan), ``largest_worker`` the largest tokenization worker;
``self`` read before training plus ``workers * largest_worker`` bounds what was resident at once while preparing;
when training starts the workers have exited and ``self`` alone is resident. The steps measured:

1. the data's identity (SHA-256 of both files, what the cache is keyed by);
2. a shared BPE tokenizer trained on both sides, streamed from the files;
3. ``prepare_store``: tokenization in ``--workers`` processes into memory-mapped id arrays;
4. ``StoredBatches`` (the batch plan: shuffle, length sort, token-count cuts) and collating the first batches.
5. training starts: two optimizer steps of the ``small`` model on lazy batches of ``--train-max-tokens`` from the store.

Generated corpora are kept in ``--work-dir`` (reused by later runs); the token stores are deleted after each size.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
from _common import RESULTS, with_provenance

VOCABULARY = 20_000
GENERATION_CHUNK = 50_000


def synthetic_words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct word-like strings of 2-10 lowercase letters."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < count:
        length = int(rng.integers(2, 11))
        words.add("".join(rng.choice(letters, length)))
    return sorted(words)


def generate_corpus(folder: pathlib.Path, num_pairs: int, seed: int = 0) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``train.src``/``train.tgt`` of ``num_pairs`` synthetic pairs (reused if already there)."""
    paths = folder / "train.src", folder / "train.tgt"
    done = folder / "complete"
    if done.is_file():
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    vocabularies = [synthetic_words(rng, VOCABULARY), synthetic_words(rng, VOCABULARY)]
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.1
    weights /= weights.sum()
    with open(paths[0], "w", encoding="utf-8") as src_file, open(paths[1], "w", encoding="utf-8") as tgt_file:
        for start in range(0, num_pairs, GENERATION_CHUNK):
            n = min(GENERATION_CHUNK, num_pairs - start)
            src_lengths = np.clip(np.rint(rng.gamma(9.0, 1.4, n)), 1, 60).astype(np.int64)
            tgt_lengths = np.clip(src_lengths + np.rint(rng.normal(0, 2, n)).astype(np.int64), 1, 60)
            for handle, lengths, vocabulary in (
                (src_file, src_lengths, vocabularies[0]),
                (tgt_file, tgt_lengths, vocabularies[1]),
            ):
                ids = rng.choice(VOCABULARY, size=int(lengths.sum()), p=weights).tolist()
                words = [vocabulary[i] for i in ids]
                bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
                handle.write("".join(" ".join(words[a:b]) + " .\n" for a, b in zip(bounds, bounds[1:])))
    done.write_text(str(num_pairs))
    return paths


def peak_rss_mib() -> dict[str, float]:
    """Peak resident memory of this process and of its largest (finished) child, in MiB (Linux: ru_maxrss in KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"self": round(own, 1), "largest_worker": round(child, 1)}


def _memory_bounds(preparation: dict[str, float], final: dict[str, float], workers: int) -> dict[str, float]:
    """What was resident at once, bounded from the peaks: during preparation the main process and up to ``workers``
    tokenization workers; when training starts the main process alone (the workers have exited), its peak set by
    the logits of a batch (``train_max_tokens`` x vocabulary floats, a few copies for softmax and gradients)."""
    during_preparation = preparation["self"] + workers * preparation["largest_worker"]
    return {
        "self_during_preparation": preparation["self"],
        "bound_during_preparation": round(during_preparation, 1),
        "self_when_training_starts": final["self"],
        "bound_overall": round(max(during_preparation, final["self"]), 1),
    }


def start_training(store, tokenizer, max_tokens: int) -> dict:
    """Two optimizer steps of the ``small`` model on lazy batches of ``max_tokens`` read from ``store``: training
    starts from the store as ``companion train`` does (the vocabulary, not the width, sets the logits' memory)."""
    import torch

    from companion import Transformer, TransformerConfig
    from companion.data import StoredBatches
    from companion.train import TrainConfig, Trainer

    torch.manual_seed(0)
    batches = StoredBatches(store, max_tokens, seed=0)
    model = Transformer(TransformerConfig.from_preset("small", tokenizer.vocab_size, tokenizer.vocab_size))
    config = TrainConfig(max_steps=2, warmup=10, device="cpu", progress=False, log_every=1)
    summary = Trainer(model, config, batches, languages=("xx", "yy")).train()
    return {"preset": "small", "max_tokens": max_tokens, "steps": summary["steps"], "last_loss": summary["last_loss"]}


def measure_one(num_pairs: int, args: argparse.Namespace) -> dict:
    """Prepare a corpus of ``num_pairs`` pairs in this process; the timings and peak memory."""
    from companion.data import StoredBatches, SubwordTokenizer, files_corpus, prepare_store

    src_path, tgt_path = generate_corpus(args.work_dir / f"corpus-{num_pairs}", num_pairs)
    cache = args.work_dir / f"stores-{num_pairs}"
    shutil.rmtree(cache, ignore_errors=True)
    load_before = [round(x, 2) for x in os.getloadavg()]
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    corpus = files_corpus("xx", "yy", train=(src_path, tgt_path))
    identity = corpus.identity("train")
    seconds["identity_sha256"] = time.perf_counter() - start
    mark = time.perf_counter()
    texts = corpus.texts("train")  # source, target of each pair, streamed from the files
    if args.tokenizer_pairs:
        texts = itertools.islice(texts, 2 * args.tokenizer_pairs)
    tokenizer = SubwordTokenizer.train(texts, vocab_size=args.vocab_size)
    seconds["tokenizer_training"] = time.perf_counter() - mark
    mark = time.perf_counter()
    store = prepare_store(
        corpus, "train", tokenizer, tokenizer, cache_dir=cache, workers=args.workers, chunk_pairs=args.chunk_pairs
    )
    seconds["token_store"] = time.perf_counter() - mark
    mark = time.perf_counter()
    batches = StoredBatches(store, args.max_tokens, seed=0)
    seconds["batch_plan"] = time.perf_counter() - mark
    mark = time.perf_counter()
    first = [batches[k] for k in range(min(8, len(batches)))]
    shares = [batches.local(k, rank, 2) for k in range(min(8, len(batches))) for rank in range(2)]
    seconds["first_8_batches_and_rank_shares"] = time.perf_counter() - mark
    preparation_memory = peak_rss_mib()  # before training: the workers have finished, the model is not built yet
    mark = time.perf_counter()
    training = start_training(store, tokenizer, args.train_max_tokens)
    seconds["first_2_training_steps"] = time.perf_counter() - mark
    total = time.perf_counter() - start
    memory = peak_rss_mib()
    store_bytes = sum(p.stat().st_size for p in store.path.iterdir())
    result = {
        "pairs": len(store),
        "settings": {
            "workers": args.workers,
            "vocab_size": args.vocab_size,
            "max_tokens": args.max_tokens,
            "tokenizer_trained_on_pairs": min(args.tokenizer_pairs or num_pairs, num_pairs),
        },
        "corpus_bytes": identity["src_file"]["bytes"] + identity["tgt_file"]["bytes"],
        "tokens": {side: store.meta["sides"][side]["tokens"] for side in ("src", "tgt")},
        "store_bytes": store_bytes,
        "batches": len(batches),
        "training_start": training,
        "first_batch_rows": [len(b) for b in first],
        "rank_share_rows": [len(share) for share, _ in shares[:4]],
        "seconds": {k: round(v, 2) for k, v in seconds.items()} | {"total": round(total, 2)},
        "pairs_per_second": {
            "preparation_total": round(num_pairs / total),
            "tokenizer_training": round(num_pairs / seconds["tokenizer_training"]),
            "token_store": round(num_pairs / seconds["token_store"]),
        },
        "peak_rss_mib": memory | _memory_bounds(preparation_memory, memory, args.workers),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    shutil.rmtree(cache, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[500_000, 1_500_000, 4_500_000])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenization processes")
    parser.add_argument("--vocab-size", type=int, default=37_000, help="shared BPE vocabulary (the paper: 37,000)")
    parser.add_argument("--max-tokens", type=int, default=25_000, help="tokens per batch (the paper: ~25,000)")
    parser.add_argument(
        "--tokenizer-pairs", type=int, default=0, help="train the BPE on the first N pairs only (default: all)"
    )
    parser.add_argument(
        "--append", action="store_true", help="keep the runs already in --output (a size measured again is replaced)"
    )
    parser.add_argument("--chunk-pairs", type=int, default=20_000, help="pairs per tokenization task")
    parser.add_argument(
        "--train-max-tokens", type=int, default=4000, help="tokens per batch of the two training steps at the end"
    )
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/companion_data_scale"))
    parser.add_argument("--output", type=pathlib.Path, default=RESULTS / "data_scale_cpu.json")
    parser.add_argument("--smoke", action="store_true", help="one tiny corpus (2,000 pairs, vocabulary 300)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # internal: one size, JSON out
    args = parser.parse_args()
    if args.smoke:
        args.pairs, args.vocab_size, args.max_tokens, args.chunk_pairs = [2_000], 300, 2_000, 500
    if args.one is not None:
        print(json.dumps(measure_one(args.one, args)))
        return
    earlier = _earlier(args) if args.append else {"runs": [], "commands": []}
    runs = earlier["runs"]
    for num_pairs in args.pairs:
        generate_corpus(args.work_dir / f"corpus-{num_pairs}", num_pairs)  # not part of the measurement
        command = [sys.executable, __file__, "--one", str(num_pairs), *_passed_options(args)]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        runs = [run for run in runs if run["pairs"] != num_pairs] + [json.loads(output.strip().splitlines()[-1])]
        runs.sort(key=lambda run: run["pairs"])
        print(output.strip().splitlines()[-1], flush=True)
        _write(args, runs, earlier["commands"])


def _earlier(args: argparse.Namespace) -> dict:
    """The runs and commands already in ``--output`` (for ``--append``)."""
    if not args.output.is_file():
        return {"runs": [], "commands": []}
    record = json.loads(args.output.read_text())
    return {"runs": list(record["runs"]), "commands": record.get("commands", [record["command"]])}


def _passed_options(args: argparse.Namespace) -> list[str]:
    return [
        "--workers", str(args.workers), "--vocab-size", str(args.vocab_size), "--max-tokens", str(args.max_tokens),
        "--work-dir", str(args.work_dir), "--tokenizer-pairs", str(args.tokenizer_pairs),
        "--chunk-pairs", str(args.chunk_pairs),
    ]  # fmt: skip


def _write(args: argparse.Namespace, runs: list[dict], earlier_commands: list[str]) -> None:
    record = with_provenance(
        {
            "what": "preparing a synthetic parallel corpus of N pairs: identity hash, shared BPE training, token "
            "store in worker processes, batch plan and the first batches (bench/data_scale.py)",
            "target": "4.5M pairs prepared and the first batches built with peak RSS < 4 GiB in < 30 min",
            "runs": runs,
        }
    )
    record["commands"] = [*earlier_commands, record["command"]]  # with --append: every command that added runs
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(partial, args.output)


if __name__ == "__main__":
    main()
