"""The FLOP count behind the GPU benchmark's MFU equals PyTorch's own count of the linear layers' matmuls."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import companion

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from flops import training_flops_parts  # noqa: E402


@pytest.mark.parametrize("layers", [(1, 1), (2, 3)])
def test_weight_flops_match_pytorch_flop_counter(layers):
    config = companion.TransformerConfig(
        50,
        60,
        d_model=16,
        num_heads=2,
        num_encoder_layers=layers[0],
        num_decoder_layers=layers[1],
        d_ff=24,
        dropout=0.0,
        tie_output=True,
    )
    model = companion.Transformer(config)
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 60, (3, 5))  # no padding: every token is real
    counter = FlopCounterMode(display=False)
    with counter:
        model(src, tgt).sum().backward()
    counts = counter.get_flop_counts()["Global"]
    matmuls = sum(v for op, v in counts.items() if op.__name__.split(".")[0] in ("mm", "addmm"))
    weights, attention = training_flops_parts(config, torch.full((3,), 7), torch.full((3,), 5))
    assert weights == pytest.approx(matmuls, rel=1e-9)
    assert attention > 0


def test_attention_flops_follow_the_causal_count():
    config = companion.TransformerConfig(
        50, 60, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=8
    )
    _, attention = training_flops_parts(config, torch.tensor([4]), torch.tensor([3]))
    # encoder 4*4 keys, decoder self 1+2+3 keys, cross 3*4 keys; 4 * d FLOPs per key forward, x3 with backward
    assert attention == pytest.approx(12 * 8 * (16 + 6 + 12))
