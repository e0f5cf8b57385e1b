"""Greedy decoding with the key/value cache against recomputing the whole prefix at every step.

    python bench/decode_speed.py --checkpoint bench/runs/multi30k-de-en/averaged.pt [--sentences 1000]

Translates the test_2016_flickr sources (the checkpoint's direction) in length-sorted batches of
``--batch-size`` twice: with ``companion.greedy_decode`` (incremental decoding, each step feeds one token and
reuses the cached keys/values) and with a plain loop that re-runs the decoder over the whole prefix each step,
as a plain ``nn.Transformer`` loop does. Both pick tokens with the same rule, so the outputs must be identical
(asserted). Then it measures beam search (beam 4, alpha 0.6) throughput in sentences/s.
Target (issue 7): the cached version at least 2x faster. Writes bench/results/decode_speed.json.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402

from companion.checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint  # noqa: E402
from companion.data import BOS_ID, EOS_ID, load_multi30k  # noqa: E402
from companion.decode import _next_log_probs, beam_search, greedy_decode, max_output_lengths  # noqa: E402


@torch.no_grad()
def greedy_recompute(model, src: torch.Tensor, max_extra_len: int = 50) -> list[list[int]]:
    """Greedy search without a cache: the decoder re-reads the whole prefix at every step."""
    memory, src_mask = model.encode(src)
    limits = max_output_lengths(src, model.config.pad_id, max_extra_len, model.config.max_len)
    outputs: list[list[int]] = [[] for _ in range(src.shape[0])]
    running = list(range(src.shape[0]))
    prefix = src.new_full((len(running), 1), BOS_ID)
    while running:
        tokens = _next_log_probs(model, prefix, memory, src_mask, None, BOS_ID).argmax(dim=-1)
        keep = []
        for row, (sentence, token) in enumerate(zip(running, tokens.tolist())):
            if token == EOS_ID:
                continue
            outputs[sentence].append(token)
            if len(outputs[sentence]) < limits[sentence]:
                keep.append(row)
        index = torch.tensor(keep, dtype=torch.long)
        prefix = torch.cat([prefix, tokens[:, None]], dim=1)[index]
        memory, src_mask = memory[index], src_mask[index]
        running = [running[row] for row in keep]
    return outputs


def batches(ids: list[list[int]], size: int, pad_id: int):
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        width = max(len(ids[i]) for i in chunk)
        yield chunk, torch.tensor([ids[i] + [pad_id] * (width - len(ids[i])) for i in chunk])


def timed_decode(decode, ids, size, pad_id) -> tuple[float, list[list[int]]]:
    results: list[list[int]] = [[] for _ in ids]
    start = time.perf_counter()
    for chunk, src in batches(ids, size, pad_id):
        for i, out in zip(chunk, decode(src)):
            results[i] = out
    return time.perf_counter() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=pathlib.Path, required=True)
    parser.add_argument("--sentences", type=int, default=1000, help="test sentences to translate (default all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()

    checkpoint = load_checkpoint(args.checkpoint)
    model = model_from_checkpoint(checkpoint)
    src_tok, _ = tokenizers_from_checkpoint(checkpoint)
    run_info = checkpoint.get("run_info") or {}
    src_lang, tgt_lang = run_info.get("src", "de"), run_info.get("tgt", "en")
    test = load_multi30k(src_lang, tgt_lang, data_dir=args.data_dir)["test"][: args.sentences]
    ids = [src_tok.encode(s)[: model.config.max_len - 1] + [src_tok.eos_id] for s, _ in test]
    pad = model.config.pad_id

    cached_s, cached = timed_decode(lambda s: greedy_decode(model, s), ids, args.batch_size, pad)
    recompute_s, recomputed = timed_decode(lambda s: greedy_recompute(model, s), ids, args.batch_size, pad)
    assert cached == recomputed, "cached and recomputed greedy decoding must produce the same tokens"
    beam_s, _ = timed_decode(lambda s: beam_search(model, s, beam_size=4, alpha=0.6), ids, args.batch_size, pad)
    tokens = sum(len(o) for o in cached)
    speedup = recompute_s / cached_s
    print(f"greedy, {len(ids)} sentences ({tokens} output tokens): cached {cached_s:.1f} s, "
          f"recompute {recompute_s:.1f} s -> {speedup:.2f}x; beam 4: {len(ids) / beam_s:.1f} sentences/s")
    path = write_results("decode_speed", {
        "checkpoint": str(args.checkpoint), "direction": f"{src_lang}-{tgt_lang}", "sentences": len(ids),
        "batch_size": args.batch_size, "output_tokens": tokens, "config": model.config.to_dict(),
        "greedy_cached_seconds": cached_s, "greedy_recompute_seconds": recompute_s, "speedup": speedup,
        "identical_outputs": True, "beam4_seconds": beam_s, "beam4_sentences_per_second": len(ids) / beam_s,
        "target_speedup": 2.0, "meets_target": speedup >= 2.0,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
