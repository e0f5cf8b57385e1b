"""Training throughput and model FLOPs utilisation (MFU) of companion.Transformer on one GPU.

    python bench/prepare_tokens.py --out bench/data/multi30k_de-en.pt      # here: needs spaCy/tokenizers
    python bench/gpu_throughput.py --data bench/data/multi30k_de-en.pt    # on the GPU machine: torch only

Trains the paper's base model on length-bucketed Multi30k batches of about ``--max-tokens`` padded tokens per
side (default 25,000, as in the paper) with bf16 autocast, in eager mode, with ``torch.compile``, and in eager
mode without the fused Q/K/V projection (to measure what the fusion brings). For each
mode it reports target tokens/s, step time, MFU (matmul FLOPs of real tokens, see bench/flops.py, divided by
the step time and the peak), peak memory, and which scaled-dot-product-attention kernel ran. The peak is
989e12 bf16 dense FLOP/s (H100/H200 SXM datasheet) unless ``--peak-flops`` says otherwise; the script also
measures a large bf16 matmul in the same run and reports MFU against that rate.
Without a CUDA GPU it stops with an error, unless ``--smoke`` (a tiny model on the CPU, to test the script).
Writes bench/results/gpu_throughput.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import unflatten, with_provenance, write_results  # noqa: E402
from flops import training_flops  # noqa: E402

import companion  # noqa: E402
from companion.data import make_batches  # noqa: E402
from companion.train import label_smoothed_loss, noam_lr  # noqa: E402


def load_pairs(path: pathlib.Path) -> tuple[list[tuple[list[int], list[int]]], int]:
    """The training pairs and the vocabulary size of a file from ``bench/prepare_tokens.py``, or of one from
    ``bench/multi30k_gpu.py prepare`` (its training split, German -> English: one file serves both GPU scripts)."""
    data = torch.load(path, weights_only=True)
    src, tgt = ("src", "tgt") if "src_flat" in data else ("train_de", "train_en")
    pairs = list(
        zip(
            unflatten(data[f"{src}_flat"], data[f"{src}_offsets"]),
            unflatten(data[f"{tgt}_flat"], data[f"{tgt}_offsets"]),
        )
    )
    return pairs, int(data["vocab_size"])


def sdpa_backend(model, batch, device) -> str:
    """Name the attention kernel(s) a forward pass launches, from the profiler's event names."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof, torch.no_grad(), autocast(device):
        model(batch.src, batch.tgt_in)
    names = " ".join(e.key.lower() for e in prof.key_averages())
    found = [
        label
        for label, key in (
            ("flash", "flash"),
            ("memory-efficient", "efficient_attention"),
            ("cuDNN", "cudnn_attention"),
            ("math", "_scaled_dot_product_attention_math"),
        )
        if key in names
    ]
    return ", ".join(found) or "unknown"


def autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def matmul_rate(device, size: int = 8192, repeats: int = 20) -> float:
    """Measured bf16 dense matmul FLOP/s on this device (a practical peak)."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def run_mode(mode, config, batches, device, args) -> dict:
    torch.manual_seed(0)
    model = companion.Transformer(config).to(device)
    if mode == "eager-separate-qkv":  # the fused Q/K/V projection switched off: what the fusion brings
        for module in model.modules():
            if isinstance(module, companion.MultiHeadAttention):
                module.fuse_qkv = False
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=device.type == "cuda")
    step_fn = torch.compile(model, dynamic=True) if mode == "compile" else model
    backend = sdpa_backend(model.eval(), batches[0], device)
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step(i, batch):
        for group in optimizer.param_groups:
            group["lr"] = noam_lr(i + 1, config.d_model, 4000)
        with autocast(device):
            logits = step_fn(batch.src, batch.tgt_in)
        loss_sum, _, tokens = label_smoothed_loss(logits, batch.tgt_out, 0.1, config.pad_id)
        (loss_sum / batch.num_tgt_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_sum

    compile_start = time.perf_counter()
    for i in range(args.warmup_steps):
        step(i, batches[i % len(batches)])
    sync(device)
    warmup_seconds = time.perf_counter() - compile_start
    timed = [batches[(args.warmup_steps + i) % len(batches)] for i in range(args.steps)]
    flops = sum(training_flops(config, (b.src != 0).sum(1), (b.tgt_out != 0).sum(1)) for b in timed)
    tokens = sum(b.num_tgt_tokens for b in timed)
    src_tokens = sum(b.num_src_tokens for b in timed)
    start = time.perf_counter()
    for i, batch in enumerate(timed):
        loss = step(args.warmup_steps + i, batch)
    sync(device)
    seconds = time.perf_counter() - start
    result = {
        "mode": mode,
        "sdpa_backend": backend,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "warmup_seconds": warmup_seconds,
        "seconds": seconds,
        "step_seconds": seconds / args.steps,
        "target_tokens_per_second": tokens / seconds,
        "source_tokens_per_second": src_tokens / seconds,
        "model_flops_per_second": flops / seconds,
        "mfu_vs_peak": flops / seconds / args.peak_flops,
        "final_loss_per_token": float(loss.detach()) / timed[-1].num_tgt_tokens,
    }
    if device.type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data",
        type=pathlib.Path,
        required=True,
        help="file from bench/prepare_tokens.py or bench/multi30k_gpu.py prepare",
    )
    parser.add_argument("--max-tokens", type=int, default=25000, help="padded tokens per batch side")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per mode")
    parser.add_argument("--warmup-steps", type=int, default=15, help="untimed steps first (compilation)")
    parser.add_argument(
        "--modes",
        default="eager,compile,eager-separate-qkv",
        help="comma-separated: eager, compile, eager-separate-qkv (eager without the fused Q/K/V "
        "projection; default: all three)",
    )
    parser.add_argument("--peak-flops", type=float, default=989e12, help="peak bf16 dense FLOP/s for MFU")
    parser.add_argument("--smoke", action="store_true", help="tiny model on the CPU, to test this script")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="results JSON path")
    args = parser.parse_args()

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in ("eager", "compile", "eager-separate-qkv"):
            parser.error(f"--modes takes eager, compile and/or eager-separate-qkv, got {mode!r}")
    if not args.data.exists():
        parser.error(f"--data {args.data} does not exist: create it with bench/prepare_tokens.py")
    if args.smoke:
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        print(
            "error: bench/gpu_throughput.py needs a CUDA GPU (torch.cuda.is_available() is False); "
            "use --smoke to test the script on the CPU",
            file=sys.stderr,
        )
        return 2
    else:
        device = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = True

    pairs, vocab = load_pairs(args.data)
    if args.smoke:
        config = companion.TransformerConfig(
            vocab,
            vocab,
            d_model=64,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            d_ff=128,
            share_embeddings=True,
            tie_output=True,
        )
    else:
        config = companion.TransformerConfig.base(vocab, vocab)
    batches = make_batches(pairs, args.max_tokens, shuffle=True, seed=0)
    batches = [b.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else b for b in batches]
    results = {
        "config": config.to_dict(),
        "max_tokens": args.max_tokens,
        "peak_flops": args.peak_flops,
        "parameters": companion.Transformer(config).num_parameters(),
        "modes": [],
    }
    if device.type == "cuda":
        results["measured_matmul_flops"] = matmul_rate(device)
    for mode in modes:
        outcome = run_mode(mode, config, batches, device, args)
        if "measured_matmul_flops" in results:
            outcome["mfu_vs_measured_matmul"] = outcome["model_flops_per_second"] / results["measured_matmul_flops"]
        results["modes"].append(outcome)
        print(json.dumps(outcome, indent=2), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(with_provenance(results), indent=2) + "\n")  # e.g. $OUT on the GPU machine
        print(f"wrote {args.out}")
    else:
        print(f"wrote {write_results('gpu_throughput' + ('_smoke' if args.smoke else ''), results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
