"""Positional encodings: the sinusoidal formula of section 3.5 and the modules that add it."""

from __future__ import annotations

import math
import re

import pytest
import torch

from companion import LearnedPositionalEncoding, PositionalEncoding, sinusoidal_encoding


def formula(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(same), one entry at a time, float64
    (the paper's base is 10000)."""
    table = torch.empty(num_positions, d_model, dtype=torch.float64)
    for pos in range(num_positions):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            table[pos, 2 * i] = math.sin(angle)
            table[pos, 2 * i + 1] = math.cos(angle)
    return table


@pytest.mark.parametrize("num_positions, d_model", [(1, 2), (50, 8), (300, 32)])
def test_sinusoidal_encoding_matches_the_formula(num_positions, d_model):
    table = sinusoidal_encoding(num_positions, d_model)
    assert table.shape == (num_positions, d_model) and table.dtype == torch.float32
    # float32 rounding of values in [-1, 1] is below 6e-8.
    torch.testing.assert_close(table.double(), formula(num_positions, d_model), atol=1e-7, rtol=0)


@pytest.mark.parametrize("base", [2.0, 100.0, 1e6])
def test_the_base_argument_replaces_10000_in_the_formula(base):
    table = sinusoidal_encoding(60, 8, base=base)
    torch.testing.assert_close(table.double(), formula(60, 8, base), atol=1e-7, rtol=0)
    assert not torch.allclose(table, sinusoidal_encoding(60, 8))  # a base that differs gives another table


def test_first_position_and_wavelengths():
    d_model = 16
    positions = torch.arange(0, 20000, 250, dtype=torch.float64)  # far enough to see the slow columns turn
    table = sinusoidal_encoding(20000, d_model).double()[::250]
    assert table[0, 0::2].tolist() == [0.0] * 8 and table[0, 1::2].tolist() == [1.0] * 8
    # Column pair 0 has wavelength 2*pi: sin(pos), cos(pos).
    torch.testing.assert_close(table[:, 0], torch.sin(positions), atol=1e-6, rtol=0)
    torch.testing.assert_close(table[:, 1], torch.cos(positions), atol=1e-6, rtol=0)
    # The slowest pair (columns d_model-2, d_model-1) has wavelength 2*pi * 10000^((d_model-2)/d_model),
    # approaching 10000*2*pi as d_model grows: sin(2*pi*pos/wavelength) and its cosine.
    wavelength = 2 * math.pi * 10000 ** ((d_model - 2) / d_model)
    torch.testing.assert_close(table[:, -2], torch.sin(2 * math.pi * positions / wavelength), atol=1e-6, rtol=0)
    torch.testing.assert_close(table[:, -1], torch.cos(2 * math.pi * positions / wavelength), atol=1e-6, rtol=0)
    assert table[:, -2].max() > 0.99 and table[:, -2].min() < -0.99  # the positions span a whole period of it


def test_a_fixed_offset_is_a_rotation():
    """PE(pos + k) is a linear function of PE(pos) (the paper's motivation): each (sin, cos) pair rotates
    by an angle that depends on k only."""
    d_model, k = 8, 3
    table = sinusoidal_encoding(40, d_model).double()
    for i in range(d_model // 2):
        theta = k / 10000 ** (2 * i / d_model)
        rotation = torch.tensor(
            [[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]], dtype=torch.float64
        )
        pairs = table[:, 2 * i : 2 * i + 2]  # rows (sin a, cos a)
        torch.testing.assert_close(pairs[:-k] @ rotation, pairs[k:], atol=1e-6, rtol=0)


def test_odd_d_model_is_rejected():
    with pytest.raises(ValueError, match=r"d_model must be even.*got 7"):
        sinusoidal_encoding(10, 7)


def test_positional_encoding_adds_the_table():
    module = PositionalEncoding(8, max_len=20, dropout=0.1).eval()
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(module(x), x + sinusoidal_encoding(5, 8), atol=0, rtol=0)
    # start= continues the positions (incremental decoding).
    torch.testing.assert_close(module(x, start=7), x + sinusoidal_encoding(12, 8)[7:], atol=0, rtol=0)


def test_dropout_applies_to_the_sum_of_embedding_and_position():
    p = 0.5
    module = PositionalEncoding(8, max_len=20, dropout=p).train()
    x = torch.randn(4, 10, 8)
    out = module(x)
    total = x + sinusoidal_encoding(10, 8)
    kept = out != 0
    assert 0.3 < kept.float().mean() < 0.7
    torch.testing.assert_close(out[kept], total[kept] / (1 - p))


def test_positions_beyond_max_len_raise():
    module = PositionalEncoding(8, max_len=6)
    module(torch.randn(1, 6, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"positions 0\.\.6 exceed max_len=6"):
        module(torch.randn(1, 7, 8))
    with pytest.raises(ValueError, match=r"positions 4\.\.6 exceed max_len=6"):
        module(torch.randn(1, 3, 8), start=4)


@pytest.mark.parametrize("encoding", [PositionalEncoding, LearnedPositionalEncoding])
def test_a_negative_start_is_refused_not_wrapped_around(encoding):
    """Python slicing would read table[-1:2] as empty (a shape error) or wrap to the table's end; the module
    refuses any start below 0 and names the argument."""
    module = encoding(8, max_len=6)
    with pytest.raises(ValueError, match=re.escape("start must be a position >= 0, got -1")):
        module(torch.randn(1, 3, 8), start=-1)
    with pytest.raises(ValueError, match=re.escape("start must be a position >= 0, got -5")):
        module(torch.randn(1, 2, 8), start=-5)  # a slice that would wrap to the last rows of the table


def test_wrong_feature_size_raises():
    module = PositionalEncoding(8, max_len=6)
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=8, got shape \(1, 3, 6\)"):
        module(torch.randn(1, 3, 6))


def test_learned_positional_encoding_adds_a_trainable_table():
    module = LearnedPositionalEncoding(8, max_len=10, dropout=0.0)
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(module(x), x + module.weight[:4])
    module(x).sum().backward()
    assert module.weight.grad is not None and module.weight.grad[:4].abs().sum() > 0
    assert (module.weight.grad[4:] == 0).all()


def test_learned_table_starts_on_the_scale_of_the_sinusoidal_table():
    """Both tables have root-mean-square 1/sqrt(2) at the start (the sinusoid's, since sin^2 + cos^2 = 1)."""
    learned = LearnedPositionalEncoding(256, max_len=512).weight.detach()
    sinusoid_rms = sinusoidal_encoding(512, 256).pow(2).mean().sqrt()
    assert abs(float(sinusoid_rms) - 2**-0.5) < 1e-6
    assert abs(float(learned.pow(2).mean().sqrt()) - 2**-0.5) < 0.01
    assert abs(float(learned.mean())) < 0.01


def test_learned_rows_of_unseen_positions_keep_their_values_under_adam():
    """Positions that never occur get no gradient, so Adam leaves their rows exactly as initialised."""
    module = LearnedPositionalEncoding(8, max_len=10, dropout=0.0)
    start = module.weight.detach().clone()
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        module(torch.randn(2, 4, 8)).pow(2).sum().backward()
        optimizer.step()
    assert not torch.equal(module.weight[:4], start[:4])
    assert torch.equal(module.weight[4:], start[4:])


# -- moved from test_bad_input.py: bad input fails early, naming the argument ---------------------------------
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: sinusoidal_encoding(0, 8), "num_positions must be a positive integer, got 0"),
        (lambda: sinusoidal_encoding(4, 7), "d_model must be even for sinusoidal encodings (sin/cos pairs), got 7"),
        (lambda: PositionalEncoding(8, max_len=4)(torch.randn(1, 5, 8)), "positions 0..4 exceed max_len=4"),
        (
            lambda: PositionalEncoding(8)(torch.randn(1, 5, 6)),
            "x must have last dimension d_model=8, got shape (1, 5, 6)",
        ),
    ],
    ids=["zero positions", "odd d_model", "beyond max_len", "wrong feature size"],
)
def test_position_helpers_reject(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
