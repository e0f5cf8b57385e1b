"""The chapters' idea figures: the tensors they draw are what attention, heads, masks and sinusoids are."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from companion.attention import scaled_dot_product_attention  # noqa: E402
from companion.book.experiments.idea_figures import (  # noqa: E402
    draw_head_split,
    draw_masks,
    draw_query_meets_keys,
    draw_sinusoid_strip,
)
from companion.positional import sinusoidal_encoding  # noqa: E402


def test_query_meets_keys_is_one_row_of_attention():
    fig, parts = draw_query_meets_keys(num_keys=6, d_k=4, d_v=3, seed=1)
    plt.close(fig)
    q, k, v = parts["q"], parts["K"], parts["V"]
    expected = scaled_dot_product_attention(q[None, None, None], k[None, None], v[None, None])
    expected = expected[0] if isinstance(expected, tuple) else expected
    assert torch.allclose(parts["output"], expected.reshape(-1), atol=1e-6)
    assert torch.allclose(parts["scores"], k @ q / math.sqrt(4))
    assert torch.isclose(parts["weights"].sum(), torch.tensor(1.0))
    assert len(fig.axes) == 4


def test_query_meets_keys_rejects_a_query_outside_the_tokens():
    with pytest.raises(ValueError, match="query_index"):
        draw_query_meets_keys(num_keys=3, query_index=3)


def test_head_split_concatenates_each_head_in_its_own_columns():
    fig, parts = draw_head_split(seq_len=3, d_model=6, num_heads=3)
    plt.close(fig)
    assert len(parts["heads"]) == 3
    for h, head in enumerate(parts["heads"]):
        assert head.shape == (3, 2)
        assert torch.equal(parts["concat"][:, 2 * h : 2 * h + 2], head)
    rows = parts["weights"].sum(-1)
    assert torch.allclose(rows, torch.ones_like(rows))


def test_head_split_needs_divisible_width():
    with pytest.raises(ValueError, match="d_model"):
        draw_head_split(d_model=7, num_heads=2)


def test_masks_hide_padding_and_the_future():
    fig, masks = draw_masks(src_lengths=(5, 3), tgt_lengths=(4, 2), sentence=1)
    plt.close(fig)
    enc, causal, dec, cross = masks["encoder padding"], masks["causal"], masks["decoder self"], masks["cross"]
    assert enc.shape == (5, 5) and cross.shape == (4, 5) and dec.shape == (4, 4)
    assert enc[:, :3].all() and not enc[:, 3:].any()  # source padding hidden from every query
    assert torch.equal(causal, torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(dec, causal & torch.tensor([True, True, False, False]))
    assert torch.equal(cross, enc[:1].expand(4, 5))


def test_masks_reject_mismatched_batches():
    with pytest.raises(ValueError, match="src_lengths"):
        draw_masks(src_lengths=(3,), tgt_lengths=(2, 2))
    with pytest.raises(ValueError, match="sentence"):
        draw_masks(src_lengths=(3,), tgt_lengths=(2,), sentence=1)


def test_sinusoid_strip_draws_the_library_table():
    fig, table = draw_sinusoid_strip(num_positions=20, d_model=10)
    plt.close(fig)
    assert torch.equal(table, sinusoidal_encoding(20, 10))
    with pytest.raises(ValueError, match="d_model"):
        draw_sinusoid_strip(d_model=1)
