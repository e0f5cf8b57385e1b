"""Measurements for the performance appendix: timing with medians, memory of a training step, fitted scaling
exponents, a per-operation breakdown of a training step and a roofline estimate from datasheet numbers.

Everything here measures the CPU it runs on, except :func:`roofline_operations`, which only *estimates* where
operations would sit on an accelerator's roofline from its peak rate and memory bandwidth (no device is needed).

Memory is counted two ways, both on the CPU's tensors, neither reading the process's resident size:

* :func:`saved_tensor_bytes`: the bytes of the distinct tensor storages that autograd keeps for the backward pass
  while ``fn`` runs (its ``saved_tensors_hooks``), the activation memory of a forward pass;
* :func:`peak_allocated_bytes`: the highest running sum of the allocations minus frees that
  :mod:`torch.profiler` records (``profile_memory=True``) while ``fn`` runs, counted from zero at its start.

:func:`memory_returned_after_free` is the exception: it reads a fresh interpreter's resident size (Linux) to show
where the memory of a freed tensor goes, back to the system or kept for reuse (``companion.devices.keep_freed_memory``).

Shapes: ``src [batch, n]`` and ``tgt [batch, t + 1]`` token ids (the model reads ``tgt[:, :-1]`` and predicts
``tgt[:, 1:]``); attention inputs ``[batch, heads, n, d_head]``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from ..._validation import check_number, check_positive_int
from ...attention import MultiHeadAttention
from ...model import FeedForward, Transformer, TransformerConfig
from ...train import label_smoothed_loss

__all__ = [
    "median_seconds",
    "random_batch",
    "training_step",
    "saved_tensor_bytes",
    "peak_allocated_bytes",
    "memory_returned_after_free",
    "fit_power_law",
    "BREAKDOWN_LABELS",
    "step_breakdown",
    "Accelerator",
    "H200_SXM",
    "RooflinePoint",
    "matmul_point",
    "attention_points",
    "roofline_operations",
]


# ----------------------------------------------------------------------------------------------------------
# Timing and memory
def median_seconds(
    fn: Callable[[], object], repeats: int = 3, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, list[float]]:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed: ``(median seconds, every time)``.

    ``clock`` reads the time: wall-clock by default; ``time.thread_time`` counts the CPU seconds of the calling
    thread only, which other jobs on a shared machine do not inflate (with ``torch.set_num_threads(1)`` every
    operator runs on the calling thread).
    """
    check_positive_int("repeats", repeats)
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times), times


def random_batch(
    config: TransformerConfig, batch_size: int, src_len: int, tgt_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids without padding: ``src [batch_size, src_len]``, ``tgt [batch_size, tgt_len + 1]``.

    Ids start at 4, above the special tokens, so every position is a real token.
    """
    for name, value in (("batch_size", batch_size), ("src_len", src_len), ("tgt_len", tgt_len)):
        check_positive_int(name, value)
    src = torch.randint(4, config.src_vocab_size, (batch_size, src_len), generator=generator)
    tgt = torch.randint(4, config.tgt_vocab_size, (batch_size, tgt_len + 1), generator=generator)
    return src, tgt


def training_step(
    model: Transformer,
    optimizer: torch.optim.Optimizer | None,
    src: torch.Tensor,
    tgt: torch.Tensor,
    smoothing: float = 0.1,
) -> Callable[[], float]:
    """A function running one training step on ``src [batch, n]``, ``tgt [batch, t + 1]``; it returns the loss.

    The step: teacher-forced forward, label-smoothed loss per token, backward, and ``optimizer.step()`` when an
    optimizer is given (``None`` times forward and backward only). Gradients are cleared first.
    """

    def step() -> float:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
        logits = model(src, tgt[:, :-1])
        with record_function("loss"):
            loss_sum, _, tokens = label_smoothed_loss(logits, tgt[:, 1:], smoothing, model.config.pad_id)
            loss = loss_sum / tokens
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        return float(loss.detach())

    return step


def saved_tensor_bytes(fn: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the distinct tensor storages autograd saves for the backward pass while ``fn`` runs.

    A storage saved twice (the same weight used by two products) is counted once; views share their base's
    storage. Storages of the tensors in ``exclude`` are left out: pass ``model.parameters()`` to count only
    activations (a product saves its weight, too, for the input gradient). Give a function that runs the
    forward pass only.
    """
    excluded = {tensor.untyped_storage().data_ptr() for tensor in exclude}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sum(storages.values())


def peak_allocated_bytes(fn: Callable[[], object]) -> int:
    """Highest net bytes of CPU tensor memory allocated while ``fn`` runs, from zero at its start.

    Reads the allocation and free events that :mod:`torch.profiler` records with ``profile_memory=True`` (its raw
    Kineto events named ``[memory]``, one per allocation or free, with the signed size) in the order they
    happened, and returns the maximum of their running sum. Memory allocated before ``fn`` (the parameters, the
    optimizer's state once created) is not counted, nor are its frees; memory ``fn`` allocates and keeps is.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    # The raw (Kineto) events hold one "[memory]" event per allocation (+bytes) and per free (-bytes).
    raw_events = prof.profiler.kineto_results.events()  # type: ignore[union-attr]
    changes = sorted((event.start_ns(), event.nbytes()) for event in raw_events if event.name() == "[memory]")
    running, peak = 0, 0
    for _, change in changes:
        running += change
        peak = max(peak, running)
    return peak


_FREE_ONE_BLOCK = """
import json, os, sys
import torch
from companion.devices import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = torch.ones(int(sys.argv[2]) * 2**20 // 4)  # float32, every page written
held = resident()
del block
print(json.dumps({"kept": kept, "returned_bytes": held - resident()}))
"""


def memory_returned_after_free(keep: bool, megabytes: int = 64, env: dict[str, str] | None = None) -> dict[str, object]:
    """Allocate a ``megabytes`` MiB tensor in a fresh interpreter, free it, and return how much the process's resident
    memory dropped: ``{"kept": whether keep_freed_memory() applied, "returned_bytes": ...}``. ``keep`` calls
    :func:`companion.devices.keep_freed_memory` first; ``env`` replaces the child's environment (default: this
    one's). Reads ``/proc/self/statm``, so Linux only (a RuntimeError elsewhere)."""
    check_positive_int("megabytes", megabytes)
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"memory_returned_after_free reads /proc/self/statm (Linux); this is {sys.platform}")
    mode = "keep" if keep else "default"
    done = subprocess.run(
        [sys.executable, "-c", _FREE_ONE_BLOCK, mode, str(megabytes)],
        env=dict(os.environ) if env is None else env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the child interpreter failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def fit_power_law(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares line through ``(log x, log y)``: ``(exponent, prefactor)`` with ``y ~ prefactor * x**exponent``."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1 or xs.size < 2:
        raise ValueError(f"x and y must be 1-D with the same length >= 2, got shapes {xs.shape} and {ys.shape}")
    if (xs <= 0).any() or (ys <= 0).any():
        raise ValueError("x and y must be positive to fit a power law on a log-log scale")
    exponent, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
    return float(exponent), float(math.exp(intercept))


# ----------------------------------------------------------------------------------------------------------
# Where a training step spends its time
BREAKDOWN_LABELS = (
    "attention: Q, K, V, O projections and head reshapes",
    "attention: scores, softmax, weighted sum",
    "feed-forward",
    "layer norm",
    "embeddings and positions",
    "output projection and loss",
    "optimizer (Adam)",
    "other (residuals, dropout, autograd)",
)


def _label_modules(model: Transformer) -> list[torch.utils.hooks.RemovableHandle]:
    """Forward hooks that wrap each part of ``model`` in a ``record_function`` range named by its label."""
    labels: list[tuple[nn.Module, str]] = []
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            labels.append((module, "attention"))
        elif isinstance(module, FeedForward):
            labels.append((module, BREAKDOWN_LABELS[2]))
        elif isinstance(module, nn.LayerNorm):
            labels.append((module, BREAKDOWN_LABELS[3]))
    labels += [(model.src_embed, BREAKDOWN_LABELS[4]), (model.src_pos, BREAKDOWN_LABELS[4])]
    if model.tgt_embed is not model.src_embed:
        labels.append((model.tgt_embed, BREAKDOWN_LABELS[4]))
    labels += [(model.tgt_pos, BREAKDOWN_LABELS[4]), (model.generator, BREAKDOWN_LABELS[5])]
    handles = []
    for module, label in labels:
        ranges: list[record_function] = []

        def enter(_module, _inputs, label=label, ranges=ranges):
            ranges.append(record_function(f"part::{label}"))
            ranges[-1].__enter__()

        def leave(_module, _inputs, _output, ranges=ranges):
            ranges.pop().__exit__(None, None, None)

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave))
    return handles


def _forward_label(event) -> str | None:
    """The breakdown label of a forward operator event, from the innermost labelled range around it."""
    parent = event
    while parent is not None:
        if parent.name.startswith("part::") and parent.name != "part::step":
            label = parent.name[len("part::") :]
            if label == "attention":
                kernel = "scaled_dot_product" in event.name or "attention" in event.name
                return BREAKDOWN_LABELS[1] if kernel else BREAKDOWN_LABELS[0]
            return label
        if parent.name == "loss" and parent is not event:
            loss_ops = ("log_softmax", "nll", "cross_entropy", "mean", "sum", "div", "mul", "sub", "ne", "masked")
            return BREAKDOWN_LABELS[5] if any(key in event.name for key in loss_ops) else None
        parent = parent.cpu_parent
    return None


def step_breakdown(model: Transformer, step: Callable[[], object]) -> tuple[dict[str, float], float]:
    """Profile one call of ``step`` (a training step of ``model``): ``(seconds per label, step seconds)``.

    Forward operators are labelled by the part of the model that ran them (forward hooks open a
    ``torch.profiler.record_function`` range per part; inside attention, the fused attention kernel is told apart
    from the projections). Each backward node is given the label of the forward operator that created it (the profiler
    records the same sequence number for both). The optimizer is the profiler's ``Optimizer.step`` range.
    Times are each top-level event's total CPU time; what no label claims is "other". The labels are
    ``BREAKDOWN_LABELS``, every one present in the result (zero when nothing was attributed).
    """
    handles = _label_modules(model)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("part::step"):
                step()
    finally:
        for handle in handles:
            handle.remove()
    events = prof.events()
    step_event = next(event for event in events if event.name == "part::step")
    seconds = dict.fromkeys(BREAKDOWN_LABELS, 0.0)
    by_sequence: dict[int, str] = {}
    for event in events:
        if event.name.startswith(("part::", "autograd::", "Optimizer", "[memory]")) or event.name == "loss":
            continue
        label = _forward_label(event)
        if label is None:
            continue
        parent_label = _forward_label(event.cpu_parent) if event.cpu_parent is not None else None
        if event.sequence_nr >= 0:
            by_sequence.setdefault(event.sequence_nr, label)
        parent = event.cpu_parent
        if parent_label is None or parent.name.startswith("part::") or parent.name == "loss":
            seconds[label] += event.cpu_time_total / 1e6  # a top-level operator of its part: children included
    for event in events:
        if event.name.startswith("autograd::engine::evaluate_function"):
            label = by_sequence.get(event.sequence_nr)
            if label is not None:
                seconds[label] += event.cpu_time_total / 1e6
        elif event.name.startswith("Optimizer.step"):
            seconds[BREAKDOWN_LABELS[6]] += event.cpu_time_total / 1e6
    total = step_event.cpu_time_total / 1e6
    seconds[BREAKDOWN_LABELS[7]] = max(0.0, total - sum(seconds[label] for label in BREAKDOWN_LABELS[:7]))
    return seconds, total


# ----------------------------------------------------------------------------------------------------------
# A roofline estimate from datasheet numbers
@dataclass(frozen=True)
class Accelerator:
    """An accelerator's datasheet numbers: peak dense rate (FLOP/s) and memory bandwidth (bytes/s)."""

    name: str
    peak_flops: float
    bandwidth: float

    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte above which the peak rate, not the bandwidth, bounds an operation."""
        return self.peak_flops / self.bandwidth

    def attainable_flops(self, intensity: float) -> float:
        """The roofline: ``min(peak, intensity * bandwidth)`` FLOP/s at ``intensity`` FLOPs per byte."""
        return min(self.peak_flops, intensity * self.bandwidth)


H200_SXM = Accelerator("NVIDIA H200 SXM (datasheet: bf16 dense, HBM3e)", peak_flops=989e12, bandwidth=4.8e12)
"""Dense bf16 Tensor Core rate (the datasheet's 1,979 TFLOP/s assume 2-of-4 structured sparsity) and HBM3e
bandwidth."""


@dataclass(frozen=True)
class RooflinePoint:
    """One operation of a forward pass: its FLOPs and the bytes it must move to and from memory at least."""

    name: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte."""
        return self.flops / self.bytes

    def bound_seconds(self, chip: Accelerator) -> float:
        """Lower bound on its time on ``chip``: the larger of compute time and memory time."""
        return max(self.flops / chip.peak_flops, self.bytes / chip.bandwidth)


def matmul_point(name: str, m: int, k: int, n: int, bytes_per_element: int = 2) -> RooflinePoint:
    """``[m, k] @ [k, n]``: ``2 m k n`` FLOPs; reads both inputs and writes the output once."""
    for arg, value in (("m", m), ("k", k), ("n", n), ("bytes_per_element", bytes_per_element)):
        check_positive_int(arg, value)
    return RooflinePoint(name, 2.0 * m * k * n, float(bytes_per_element) * (m * k + k * n + m * n))


def attention_points(
    sentences: int, length: int, d_model: int, num_heads: int, bytes_per_element: int = 2
) -> tuple[RooflinePoint, RooflinePoint, RooflinePoint]:
    """Self-attention over ``sentences`` of ``length`` tokens (forward), three ways of computing it:

    * ``scores QK^T`` unfused: reads Q and K ``[sentences, heads, length, d_head]``, writes the
      ``[sentences, heads, length, length]`` scores;
    * ``softmax`` unfused: reads and writes the scores (about 5 FLOPs per score: max, subtract, exp, sum, divide);
    * ``fused attention`` (FlashAttention-style): the scores and the weighted sum, ``4 length^2 d`` FLOPs per
      sentence, moving only Q, K, V and the output.
    """
    for arg, value in (("sentences", sentences), ("length", length), ("d_model", d_model), ("num_heads", num_heads)):
        check_positive_int(arg, value)
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    b, s, d = sentences, length, d_model
    scores = b * num_heads * s * s
    return (
        RooflinePoint("scores QK^T (unfused)", 2.0 * b * s * s * d, bytes_per_element * (2 * b * s * d + scores)),
        RooflinePoint("softmax (unfused)", 5.0 * scores, bytes_per_element * 2.0 * scores),
        RooflinePoint("fused attention", 4.0 * b * s * s * d, bytes_per_element * 4.0 * b * s * d),
    )


def roofline_operations(
    config: TransformerConfig, tokens: int, length: int, bytes_per_element: int = 2
) -> list[RooflinePoint]:
    """The main operations of one encoder layer's forward pass plus the output layer, for a batch of ``tokens``
    tokens in sentences of ``length`` (``tokens // length`` sentences), with ``bytes_per_element`` (2: bf16).

    Products: the fused Q, K, V projection ``[tokens, d] @ [d, 3d]``, the output projection ``[d, d]``, the two FFN
    products ``[d, d_ff]`` and ``[d_ff, d]``, and the output layer ``[d, V]``; the attention of
    :func:`attention_points`; layer norm (reads and writes ``[tokens, d]``, about 8 FLOPs per element).
    """
    check_positive_int("tokens", tokens)
    check_positive_int("length", length)
    check_number("bytes_per_element", bytes_per_element, low=1)
    if length > tokens:
        raise ValueError(f"length ({length}) must not exceed tokens ({tokens})")
    d, f, v = config.d_model, config.d_ff, config.tgt_vocab_size
    sentences = tokens // length
    m = sentences * length
    return [
        matmul_point("Q, K, V projection", m, d, 3 * d, bytes_per_element),
        *attention_points(sentences, length, d, config.num_heads, bytes_per_element),
        matmul_point("attention output projection", m, d, d, bytes_per_element),
        matmul_point("FFN first product", m, d, f, bytes_per_element),
        matmul_point("FFN second product", m, f, d, bytes_per_element),
        RooflinePoint("layer norm", 8.0 * m * d, bytes_per_element * 2.0 * m * d),
        matmul_point("output layer", m, d, v, bytes_per_element),
    ]
