"""The exported decoder step graph with its key/value cache against recomputing the prefix, both in ONNX Runtime.

    python bench/onnx_decode_speed.py                      # pretrained/de-en-small.pt, ~6 minutes on 2 cores
    python bench/onnx_decode_speed.py --checkpoint pretrained/en-de-small.pt --results onnx_decode_speed_en-de

``bench/decode_speed.py`` measures the cache in eager PyTorch, where every operation pays a fixed Python and
dispatch cost that the cache cannot remove, a large part of a step at a batch of 16 sentences. This script
asks the same question in a graph runtime, the one the book's in-page translator uses (ONNX Runtime; the page runs
its WebAssembly build), with one intra-op thread as the page does:

* **greedy**, test_2016_flickr in length-sorted batches of each of ``--batch-sizes``: the step graph that
  :func:`companion.export.export_onnx` writes (``decoder.onnx``: one new token per row, past/present keys and
  values, with the attention rows the page draws) under :func:`companion.export.onnx_greedy_decode`, against a
  graph of the decoder over the whole prefix that projects only the last position onto the vocabulary
  (:class:`RecomputeGraph`, logits only: the baseline of ``decode_speed.py``), under the same search
  (:func:`companion.decode.search_greedy`). Both read the encoder graph's output.
* the same greedy comparison in **eager PyTorch** (``companion.greedy_decode`` with and without the cache) with
  ``torch.set_num_threads(--threads)``, so that the two runtimes are compared at one thread count (bench/decode_speed.py
  uses PyTorch's default, here 2 threads).
* **beam 4** (alpha 0.6), one sentence at a time as the page translates (every ``--beam-every``-th test sentence):
  the same step graph under :func:`companion.export.onnx_beam_search` against the page's former decoder graph
  (commit b404b5c: the whole prefix each step, with every position's attention weights, which that page drew;
  :class:`RecomputeGraph` with ``with_maps=True``), under :func:`companion.decode.search_beam`. This is the
  native counterpart of the browser test's latency report (``tests/website/test_translator.py``), run back to
  back on one machine instead of on two days.
* **one call** of each graph on a beam's 4 rows (halfway through a sentence: 8 tokens of prefix, 14 of source),
  beside a graph of the output layer alone (the output layer, the never-generated tokens, the log-softmax: what
  every step pays after the decoder), with each graph's number of operations.

The methods alternate for ``--rounds`` rounds (the machine is shared); the report gives the median of the per-round
ratios and asserts that both graphs give the same outputs (at most 0.5% of the sentences may differ, as in
``decode_speed.py``: the graphs round differently). Writes ``bench/results/onnx_decode_speed.json`` (or
``--results STEM``.json) with hardware, ONNX Runtime's version, load and command.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import results_stem, write_results  # noqa: E402

from companion.checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint  # noqa: E402
from companion.data import BOS_ID, PAD_ID, load_multi30k, pad_sequences  # noqa: E402
from companion.decode import best_hypothesis, greedy_decode, max_output_lengths, search_beam, search_greedy  # noqa: E402
from companion.export import (  # noqa: E402
    _export,
    _never_generated_mask,
    _output_bias,
    _search_outputs,
    _top_k,
    export_onnx,
    load_onnx,
    onnx_beam_search,
    onnx_greedy_decode,
)
from companion.model import Transformer, eval_mode  # noqa: E402

BEAM, ALPHA = 4, 0.6
MAX_DIFFERING = 0.005  # share of sentences whose outputs may differ between the two graphs (rounding near ties)


class RecomputeGraph(nn.Module):
    """The decoder over the whole prefix: ``forward(prefixes [batch, t], src_ids [batch, n], memory [batch, n,
    d_model])`` -> ``logits [batch, tgt_vocab]`` of the last position (``<pad>``, ``<bos>`` at -inf), through
    :meth:`~companion.model.Transformer.decode_unchecked` with ``last_only``, and what the step graph derives from
    them for the searches (``log_probs``, ``next_ids``, ``top_log_probs``, ``top_ids``: the same work after the
    decoder, so that only the cache differs). ``with_maps`` instead returns what the page's former graph did:
    ``log_probs`` and every position's attention weights, ``self_attention [L, batch, H, t, t]`` and
    ``cross_attention [L, batch, H, t, n]`` (computed by the explicit attention path)."""

    def __init__(self, model: Transformer, *, with_maps: bool, bos_id: int = BOS_ID) -> None:
        super().__init__()
        self.model, self.with_maps = model, with_maps
        self.top_k = _top_k(model, None)
        self.register_buffer("never_generated", _never_generated_mask(model, bos_id), persistent=False)

    def forward(self, prefixes: torch.Tensor, src_ids: torch.Tensor, memory: torch.Tensor):
        src_mask = (src_ids != self.model.config.pad_id)[:, None, None, :]
        if not self.with_maps:
            logits = self.model.decode_unchecked(prefixes, memory, src_mask, last_only=True)
            logits = logits[:, -1].float().masked_fill(self.never_generated, float("-inf"))
            return logits, *_search_outputs(logits, self.top_k)
        logits, maps = self.model.decode_unchecked(prefixes, memory, src_mask, need_weights=True, last_only=True)
        logits = logits[:, -1].float().masked_fill(self.never_generated, float("-inf"))
        self_maps = torch.stack([weights for weights, _ in maps])
        cross_maps = torch.stack([weights for _, weights in maps])
        return logits, F.log_softmax(logits, dim=-1), self_maps, cross_maps


class OutputLayerGraph(nn.Module):
    """What every step does after the decoder, whichever graph runs it: ``y [rows, d_model]`` -> ``(logits,
    log_probs) [rows, tgt_vocab]`` (the output layer with ``<pad>``/``<bos>`` at -inf, as the step graph computes
    it, with the -inf in the bias; the log-softmax)."""

    def __init__(self, model: Transformer, bos_id: int = BOS_ID) -> None:
        super().__init__()
        self.weight = model.generator.weight
        self.register_buffer("output_bias", _output_bias(model, bos_id), persistent=False)

    def forward(self, y: torch.Tensor):
        logits = F.linear(y, self.weight, self.output_bias.to(self.weight.dtype)).float()
        return logits, F.log_softmax(logits, dim=-1)


def export_output_layer(model: Transformer, path: pathlib.Path) -> None:
    """Write :class:`OutputLayerGraph` to ``path`` (any number of rows)."""
    with eval_mode(model), torch.no_grad():
        _export(
            OutputLayerGraph(model),
            (torch.zeros(2, model.config.d_model),),
            path,
            ["y"],
            ["logits", "log_probs"],
            {"y": {0: torch.export.Dim("rows"), 1: torch.export.Dim.STATIC}},
        )


def export_recompute(model: Transformer, path: pathlib.Path, *, with_maps: bool) -> None:
    """Write :class:`RecomputeGraph` to ``path`` (any batch, prefix and source lengths up to ``max_len``)."""
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    prefixes = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8]])
    batch = torch.export.Dim("batch")
    src_len = torch.export.Dim("src_len", max=model.config.max_len)
    tgt_len = torch.export.Dim("tgt_len", max=model.config.max_len)
    searched = ["logits", "log_probs", "next_ids", "top_log_probs", "top_ids"]
    outputs = ["logits", "log_probs", "self_attention", "cross_attention"] if with_maps else searched
    with eval_mode(model), torch.no_grad():
        memory, _ = model.encode_unchecked(src)
        _export(
            RecomputeGraph(model, with_maps=with_maps),
            (prefixes, src, memory),
            path,
            ["prefixes", "src_ids", "memory"],
            outputs,
            {
                "prefixes": {0: batch, 1: tgt_len},
                "src_ids": {0: batch, 1: src_len},
                "memory": {0: batch, 1: src_len, 2: torch.export.Dim.STATIC},
            },
        )


class RecomputeStep:
    """A :class:`companion.decode.DecoderStep` over a :class:`RecomputeGraph` session: each call feeds every
    row's whole prefix; ``select`` moves each row's source and encoder output along."""

    def __init__(self, session, src: np.ndarray, memory: np.ndarray) -> None:
        self.session, self.src, self.memory = session, src, memory

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        feeds = {"prefixes": prefixes.numpy(), "src_ids": self.src, "memory": self.memory}
        return torch.from_numpy(self.session.run(["logits"], feeds)[0])

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        if not same_sources:
            index = rows.numpy()
            self.src, self.memory = self.src[index], self.memory[index]


def recompute_search(sessions: dict, graph: str, sources: Sequence[Sequence[int]], max_len: int, beam: int = 1):
    """Greedy (``beam`` 1) or beam search over the recompute graph ``sessions[graph]``, the encoder graph's
    ``memory`` repeated for each of a sentence's ``beam`` rows (as :func:`companion.export.onnx_beam_search`)."""
    src = pad_sequences([list(ids) for ids in sources], PAD_ID)
    memory = sessions["encoder"].run(["memory"], {"src_ids": src.numpy()})[0]
    rows = np.repeat(np.arange(len(sources)), beam)
    step = RecomputeStep(sessions[graph], src.numpy()[rows], memory[rows])
    limits = max_output_lengths(src, PAD_ID, 50, max_len)
    if beam == 1:
        return search_greedy(step, limits)
    return [best_tokens(found) for found in search_beam(step, limits, beam)]


def best_tokens(found) -> list[int]:
    """The winning hypothesis's tokens under the length penalty ``ALPHA`` (what the page shows)."""
    return list(best_hypothesis(found, ALPHA).tokens)


def batches(ids: list[list[int]], size: int) -> list[list[list[int]]]:
    """``ids`` sorted by length (longest first) and cut into batches of ``size`` sentences."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
    return [[ids[i] for i in order[start : start + size]] for start in range(0, len(order), size)]


def timed(decode: Callable, groups: list[list[list[int]]]) -> tuple[float, list[float], list]:
    """Run ``decode`` over each group: total seconds, seconds per group, outputs in order."""
    outputs, each = [], []
    for group in groups:
        start = time.perf_counter()
        outputs.extend(decode(group))
        each.append(time.perf_counter() - start)
    return sum(each), each, outputs


class TimedSession:
    """An ONNX Runtime session that adds up the seconds its ``run`` calls take (``seconds``, ``calls``)."""

    def __init__(self, session) -> None:
        self.session, self.seconds, self.calls = session, 0.0, 0

    def run(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.session.run(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def graph_share(decode: Callable, groups, sessions: dict, graph: str) -> dict:
    """One more (untimed-round) pass of ``decode`` over ``groups`` with ``sessions[graph]`` timed: the calls of the
    decoder graph, their milliseconds each and their share of the search's time (the rest: the search itself,
    moving rows, the encoder graph)."""
    timed_session = sessions[graph] = TimedSession(sessions[graph])
    try:
        total, _, _ = timed(decode, groups)
    finally:
        sessions[graph] = timed_session.session
    return {
        "graph_calls": timed_session.calls,
        "graph_ms_per_call": 1000 * timed_session.seconds / timed_session.calls,
        "graph_share_of_search": timed_session.seconds / total,
    }


def alternate(name: str, cached: Callable, recompute: Callable, groups, rounds: int) -> dict:
    """Time ``cached`` and ``recompute`` over ``groups`` in alternation; check their outputs agree."""
    for decode in (cached, recompute):  # the first calls allocate and pick kernels: not timed
        timed(decode, groups[:2])
    cached_s, recompute_s, per_group = [], [], {"cached": [], "recompute": []}
    for round_ in range(rounds):
        c_total, c_each, c_out = timed(cached, groups)
        r_total, r_each, r_out = timed(recompute, groups)
        cached_s.append(c_total)
        recompute_s.append(r_total)
        per_group["cached"].append(c_each)
        per_group["recompute"].append(r_each)
        differing = sum(a != b for a, b in zip(c_out, r_out))
        assert differing <= MAX_DIFFERING * len(c_out), f"{name}: {differing} of {len(c_out)} outputs differ"
        print(
            f"{name}, round {round_ + 1}: cached {c_total:.2f} s, recompute {r_total:.2f} s "
            f"-> {r_total / c_total:.2f}x ({differing} outputs differ)",
            flush=True,
        )
    ratios = [r / c for r, c in zip(recompute_s, cached_s)]
    result = {
        "sentences": len(c_out),
        "groups": len(groups),
        "cached_seconds_per_round": cached_s,
        "recompute_seconds_per_round": recompute_s,
        "ratio_per_round": ratios,
        "speedup": statistics.median(ratios),
        "outputs_differing_last_round": differing,
    }
    if all(len(group) == 1 for group in groups):  # one sentence at a time: the page's latency per sentence
        for method, rounds_each in per_group.items():
            result[f"{method}_median_ms_per_sentence"] = 1000 * statistics.median(
                statistics.median(column) for column in zip(*rounds_each)
            )
    print(f"{name}: median ratio {result['speedup']:.2f}x", flush=True)
    return result


def per_call(
    sessions: dict, graphs: pathlib.Path, model: Transformer, *, rows: int, prefix: int, src_len: int, calls: int
) -> dict:
    """Microseconds per call (median of 5 runs of ``calls`` calls, after as many untimed) of the cached step graph,
    of the former page graph and of the output layer alone, on ``rows`` rows (a sentence's beam) with a prefix of
    ``prefix`` tokens and a source of ``src_len``; and how many operations (nodes) each graph holds."""
    import onnx

    config, generator = model.config, np.random.default_rng(0)
    layers, heads = config.num_decoder_layers, config.num_heads
    d_head = config.d_model // heads

    def floats(*shape: int) -> np.ndarray:
        return generator.standard_normal(shape).astype(np.float32)

    src = np.full((rows, src_len), 5, dtype=np.int64)
    feeds = {
        "decoder": {
            "token_ids": np.full((rows, 1), 5, dtype=np.int64),
            "src_ids": src,
            "cross_kv": floats(2, layers, rows, heads, src_len, d_head),
            "past_kv": floats(2, layers, rows, heads, prefix - 1, d_head),
        },
        "recompute_maps": {
            "prefixes": np.full((rows, prefix), 5, dtype=np.int64),
            "src_ids": src,
            "memory": floats(rows, src_len, config.d_model),
        },
        "output_layer": {"y": floats(rows, config.d_model)},
    }
    result = {"rows": rows, "prefix_tokens": prefix, "source_tokens": src_len}
    for name, feed in feeds.items():
        session = sessions[name]
        for _ in range(calls):
            session.run(None, feed)
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                session.run(None, feed)
            runs.append((time.perf_counter() - start) / calls * 1e6)
        result[f"{name}_us_per_call"] = statistics.median(runs)
        result[f"{name}_nodes"] = len(onnx.load(graphs / f"{name}.onnx").graph.node)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=pathlib.Path, default=pathlib.Path("pretrained/de-en-small.pt"))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64], help="greedy (default 1 16 64)")
    parser.add_argument("--beam-every", type=int, default=4, help="beam 4 on every N-th test sentence (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1, the page's)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--results", default="onnx_decode_speed", type=results_stem, help="results file stem")
    args = parser.parse_args(argv)
    for name in ("rounds", "threads", "beam_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.batch_sizes) < 1:
        parser.error("--batch-sizes must be at least 1")

    import onnxruntime

    checkpoint = load_checkpoint(args.checkpoint)
    model = model_from_checkpoint(checkpoint)
    src_tok, _ = tokenizers_from_checkpoint(checkpoint)
    run_info = checkpoint.get("run_info") or {}
    src_lang, tgt_lang = run_info.get("src", "de"), run_info.get("tgt", "en")
    test = load_multi30k(src_lang, tgt_lang, data_dir=args.data_dir, splits=("test",))["test"]
    max_len = model.config.max_len
    ids = [src_tok.encode(s)[: max_len - 1] + [src_tok.eos_id] for s, _ in test]

    with tempfile.TemporaryDirectory() as folder:
        graphs = pathlib.Path(folder)
        export_onnx(model, graphs)
        export_recompute(model, graphs / "recompute.onnx", with_maps=False)
        export_recompute(model, graphs / "recompute_maps.onnx", with_maps=True)
        sessions = load_onnx(graphs, threads=args.threads)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        export_output_layer(model, graphs / "output_layer.onnx")
        for name in ("recompute", "recompute_maps", "output_layer"):
            path = str(graphs / f"{name}.onnx")
            sessions[name] = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

        greedy = {
            size: alternate(
                f"greedy, batch {size}",
                lambda group: onnx_greedy_decode(sessions, group, max_len=max_len),
                lambda group: recompute_search(sessions, "recompute", group, max_len),
                batches(ids, size),
                args.rounds,
            )
            for size in args.batch_sizes
        }
        torch.set_num_threads(args.threads)  # eager PyTorch at the same thread count, same batches
        eager = {
            size: alternate(
                f"eager PyTorch greedy, batch {size}",
                lambda group: greedy_decode(model, pad_sequences(group, PAD_ID)),
                lambda group: greedy_decode(model, pad_sequences(group, PAD_ID), use_cache=False),
                batches(ids, size),
                args.rounds,
            )
            for size in args.batch_sizes
        }
        singles = [[sentence] for sentence in ids[:: args.beam_every]]

        def cached_beam(group):
            return [best_tokens(found) for found in onnx_beam_search(sessions, group, BEAM, max_len=max_len)]

        def recompute_beam(group):
            return recompute_search(sessions, "recompute_maps", group, max_len, beam=BEAM)

        beam = alternate(f"beam {BEAM}, one sentence at a time", cached_beam, recompute_beam, singles, args.rounds)
        beam["where_the_time_goes"] = {
            "cached": graph_share(cached_beam, singles, sessions, "decoder"),
            "recompute": graph_share(recompute_beam, singles, sessions, "recompute_maps"),
        }
        for method, share in beam["where_the_time_goes"].items():
            print(
                f"beam {BEAM}, {method}: {share['graph_calls']} decoder calls, "
                f"{share['graph_ms_per_call']:.3f} ms each, "
                f"{100 * share['graph_share_of_search']:.0f}% of the search's time"
            )
        rows = {"rows": BEAM, "prefix": 8, "src_len": 14, "calls": 300}  # a beam of 4 halfway through a sentence
        calls = per_call(sessions, graphs, model, **rows)
        print(
            f"one call, {BEAM} rows, prefix 8, source 14: cached step {calls['decoder_us_per_call']:.0f} us "
            f"({calls['decoder_nodes']} operations), former page graph {calls['recompute_maps_us_per_call']:.0f} us "
            f"({calls['recompute_maps_nodes']}), output layer alone {calls['output_layer_us_per_call']:.0f} us"
        )

    path = write_results(
        args.results,
        {
            "checkpoint": str(args.checkpoint),
            "direction": f"{src_lang}-{tgt_lang}",
            "onnxruntime": onnxruntime.__version__,
            "onnxruntime_threads": args.threads,
            "load_average_at_end": list(os.getloadavg()),
            "rounds": args.rounds,
            "cached": "decoder.onnx of companion.export.export_onnx: one token per row, past/present keys and values, "
            "this position's attention rows (the page's decoder)",
            "greedy_baseline": "RecomputeGraph: the decoder over the whole prefix, logits of the last position only",
            "beam_baseline": "RecomputeGraph(with_maps=True): the page's former decoder graph (commit b404b5c), "
            "the whole prefix with every position's attention weights",
            "greedy": {str(size): result for size, result in greedy.items()},
            "eager_pytorch_greedy": {str(size): result for size, result in eager.items()},
            "eager_pytorch": "companion.greedy_decode with and without use_cache (CachedStep / RecomputeStep), "
            f"torch {torch.__version__} with {args.threads} thread(s): the same comparison outside the graph runtime",
            f"beam{BEAM}_alpha{ALPHA}_one_sentence_at_a_time": beam,
            "per_call": calls,
            "target": "issue 23: at least 2x at a batch of 16 (greedy); the page's beam-4 latency at least halved",
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
