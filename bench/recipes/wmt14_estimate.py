"""ESTIMATE (not a measurement) of the wall time of bench/recipes/wmt14_base.sh on 8 H200 GPUs.

FLOPs per step from bench/flops.py (matmuls only, forward + backward) for a batch of the paper's size: about
25,000 source and 25,000 target tokens, here 926 sentence pairs of 27 BPE tokens per side (WMT14 en-de with a
37k shared BPE averages about 27 tokens per side), with the base model and a 37,000-entry vocabulary. Divided by
the H200's datasheet bf16 dense throughput (989 TFLOP/s per GPU, NVIDIA H200 SXM datasheet) times an assumed
model-FLOPs utilisation (MFU) of 40% (an assumption: no GPU run of this recipe exists), times 8 GPUs.

    python bench/recipes/wmt14_estimate.py            # prints the estimate
    python bench/recipes/wmt14_estimate.py --mfu 0.3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from flops import training_flops  # noqa: E402

from companion import TransformerConfig  # noqa: E402

H200_BF16_DENSE_FLOPS = 989e12  # per GPU, datasheet (H200 SXM), dense (no sparsity)
STEPS, GPUS, PAIRS_PER_STEP, TOKENS_PER_SENTENCE, VOCAB = 100_000, 8, 926, 27, 37_000


def estimate(mfu: float = 0.4, gpus: int = GPUS) -> dict[str, float]:
    """FLOPs per step, seconds per step and hours for the recipe's 100,000 steps at ``mfu``."""
    config = TransformerConfig.base(VOCAB, VOCAB, share_embeddings=True)
    lengths = torch.full((PAIRS_PER_STEP,), TOKENS_PER_SENTENCE)
    flops = training_flops(config, lengths, lengths)
    seconds = flops / (H200_BF16_DENSE_FLOPS * mfu * gpus)
    return {"flops_per_step": flops, "seconds_per_step": seconds, "hours": seconds * STEPS / 3600}


EXCLUDED = " (training only: data preparation, evaluation and checkpoints come on top)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mfu", type=float, default=0.4, help="assumed model-FLOPs utilisation (default 0.4)")
    parser.add_argument("--gpus", type=int, default=GPUS)
    args = parser.parse_args()
    result = estimate(args.mfu, args.gpus)
    print(
        f"ESTIMATE (not measured): {result['flops_per_step'] / 1e12:.1f} TFLOPs per step; at {args.mfu:.0%} MFU of "
        f"{args.gpus} x H200 (989 TFLOP/s bf16 dense each, datasheet): {result['seconds_per_step'] * 1000:.0f} ms "
        f"per step, {result['hours'] * 60:.0f} minutes for {STEPS:,} steps" + EXCLUDED
    )


if __name__ == "__main__":
    main()
