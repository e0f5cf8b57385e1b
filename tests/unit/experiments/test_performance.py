"""Tests for companion.book.experiments.performance: structure and consistency of the measurements, never timing."""

from __future__ import annotations

import math

import pytest
import torch

import companion
from companion.attention import fast_attention, scaled_dot_product_attention
from companion.book.experiments import performance as perf


def _tiny(vocab: int = 50) -> companion.TransformerConfig:
    return companion.TransformerConfig(
        vocab, vocab, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.0
    )


# ------------------------------------------------------------------------------------------- timing helpers
def test_median_seconds_runs_warmup_plus_repeats_and_returns_the_median():
    calls = []
    median, times = perf.median_seconds(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and len(times) == 5
    assert median == sorted(times)[2] and all(t >= 0 for t in times)


def test_median_seconds_reads_the_given_clock():
    ticks = iter(range(100))
    median, times = perf.median_seconds(lambda: None, repeats=3, warmup=0, clock=lambda: float(next(ticks)))
    assert times == [1.0, 1.0, 1.0] and median == 1.0


@pytest.mark.parametrize("repeats, warmup", [(0, 1), (2, -1), (2, 1.5)])
def test_median_seconds_refuses_bad_counts(repeats, warmup):
    with pytest.raises(ValueError, match="repeats|warmup"):
        perf.median_seconds(lambda: None, repeats=repeats, warmup=warmup)


def test_random_batch_shapes_and_no_special_ids():
    config = _tiny()
    src, tgt = perf.random_batch(config, 3, 5, 7, torch.Generator().manual_seed(0))
    assert src.shape == (3, 5) and tgt.shape == (3, 8)
    assert int(src.min()) >= 4 and int(tgt.min()) >= 4
    assert int(src.max()) < config.src_vocab_size and int(tgt.max()) < config.tgt_vocab_size
    with pytest.raises(ValueError, match="src_len"):
        perf.random_batch(config, 3, 0, 7, torch.Generator())


def test_training_step_updates_the_parameters_and_returns_the_loss():
    torch.manual_seed(0)
    config = _tiny()
    model = companion.Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    src, tgt = perf.random_batch(config, 2, 4, 4, torch.Generator().manual_seed(1))
    before = [p.detach().clone() for p in model.parameters()]
    loss = perf.training_step(model, optimizer, src, tgt)()
    assert math.isfinite(loss) and loss > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_training_step_without_optimizer_leaves_gradients_only():
    torch.manual_seed(0)
    config = _tiny()
    model = companion.Transformer(config)
    src, tgt = perf.random_batch(config, 2, 4, 4, torch.Generator().manual_seed(1))
    before = [p.detach().clone() for p in model.parameters()]
    perf.training_step(model, None, src, tgt)()
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


# ------------------------------------------------------------------------------------------- memory
def test_saved_tensor_bytes_counts_each_storage_once():
    x = torch.randn(10, 20, requires_grad=True)
    # x * x saves x twice (both operands): one storage, 800 bytes
    assert perf.saved_tensor_bytes(lambda: x * x) == 10 * 20 * 4
    assert perf.saved_tensor_bytes(lambda: x * x, exclude=[x]) == 0
    assert perf.saved_tensor_bytes(lambda: x + 1) == 0  # addition saves nothing


def test_saved_tensor_bytes_explicit_attention_keeps_the_weights_fused_does_not():
    q = torch.randn(2, 2, 64, 8, requires_grad=True)
    explicit = perf.saved_tensor_bytes(lambda: scaled_dot_product_attention(q, q, q)[0], exclude=[q])
    fused = perf.saved_tensor_bytes(lambda: fast_attention(q, q, q), exclude=[q])
    weights = 2 * 2 * 64 * 64 * 4
    assert explicit >= weights > fused


def test_saved_tensor_bytes_of_the_model_is_affine_in_the_batch():
    torch.manual_seed(0)
    config = _tiny()
    model = companion.Transformer(config)
    sizes = []
    for batch in (2, 4, 6):
        src, tgt = perf.random_batch(config, batch, 6, 6, torch.Generator().manual_seed(0))
        sizes.append(perf.saved_tensor_bytes(lambda: model(src, tgt[:, :-1]), exclude=model.parameters()))
    per_two_sentences = sizes[1] - sizes[0]
    assert per_two_sentences > 0 and sizes[2] - sizes[1] == per_two_sentences  # a fixed part plus a per-sentence part
    assert 0 <= sizes[0] - per_two_sentences < per_two_sentences


def test_peak_allocated_bytes_sees_a_tensor_allocated_inside():
    def allocate():
        big = torch.empty(1000, 1000)  # 4 MB, freed at return
        return big.sum()

    peak = perf.peak_allocated_bytes(allocate)
    assert 4_000_000 <= peak < 8_000_000


# ------------------------------------------------------------------------------------------- fits
def test_fit_power_law_recovers_exponent_and_prefactor():
    xs = [1.0, 2.0, 4.0, 8.0]
    exponent, prefactor = perf.fit_power_law(xs, [3.0 * x**1.5 for x in xs])
    assert exponent == pytest.approx(1.5) and prefactor == pytest.approx(3.0)


@pytest.mark.parametrize("x, y", [([1.0], [1.0]), ([1.0, 2.0], [1.0]), ([1.0, -2.0], [1.0, 2.0])])
def test_fit_power_law_refuses_bad_data(x, y):
    with pytest.raises(ValueError):
        perf.fit_power_law(x, y)


# ------------------------------------------------------------------------------------------- breakdown
def test_step_breakdown_has_every_label_and_sums_to_the_step():
    torch.manual_seed(0)
    config = _tiny()
    model = companion.Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    src, tgt = perf.random_batch(config, 4, 6, 6, torch.Generator().manual_seed(0))
    step = perf.training_step(model, optimizer, src, tgt)
    step()
    shares, total = perf.step_breakdown(model, step)
    assert tuple(shares) == perf.BREAKDOWN_LABELS
    assert all(seconds >= 0 for seconds in shares.values())
    assert sum(shares.values()) == pytest.approx(total)
    for label in perf.BREAKDOWN_LABELS[:7]:  # every part of a step is found and attributed
        assert shares[label] > 0, label
    assert not any(hook for m in model.modules() for hook in (m._forward_hooks, m._forward_pre_hooks)), (
        "the labelling hooks are removed afterwards"
    )


# ------------------------------------------------------------------------------------------- roofline
def test_matmul_point_counts():
    point = perf.matmul_point("p", 10, 20, 30, bytes_per_element=2)
    assert point.flops == 2 * 10 * 20 * 30
    assert point.bytes == 2 * (10 * 20 + 20 * 30 + 10 * 30)
    assert point.intensity == pytest.approx(point.flops / point.bytes)
    big = perf.matmul_point("p", 10**9, 128, 512)
    assert big.intensity < 128 * 512 / (128 + 512)  # the limit for many tokens, from below
    with pytest.raises(ValueError, match="m"):
        perf.matmul_point("p", 0, 2, 3)


def test_accelerator_roofline_and_bounds():
    chip = perf.Accelerator("toy", peak_flops=100.0, bandwidth=10.0)
    assert chip.ridge_intensity == 10.0
    assert chip.attainable_flops(1.0) == 10.0 and chip.attainable_flops(50.0) == 100.0
    memory_bound = perf.RooflinePoint("m", flops=10.0, bytes=10.0)  # intensity 1 < 10
    assert memory_bound.bound_seconds(chip) == 1.0
    compute_bound = perf.RooflinePoint("c", flops=1000.0, bytes=1.0)
    assert compute_bound.bound_seconds(chip) == 10.0
    assert perf.H200_SXM.ridge_intensity == pytest.approx(989e12 / 4.8e12)


def test_fused_attention_intensity_is_half_the_length_in_bf16():
    for length in (30, 400):
        _, _, fused = perf.attention_points(8, length, 512, 8)
        assert fused.intensity == pytest.approx(length / 2)
    with pytest.raises(ValueError, match="divisible"):
        perf.attention_points(1, 4, 10, 3)


def test_roofline_operations_cover_one_layer_and_the_output():
    config = companion.TransformerConfig.base(37000, 37000)
    ops = perf.roofline_operations(config, 25_000, 30)
    names = [op.name for op in ops]
    assert len(names) == len(set(names)) == 9
    assert "output layer" in names and "fused attention" in names
    qkv = ops[names.index("Q, K, V projection")]
    tokens = 25_000 // 30 * 30
    assert qkv.flops == 2 * tokens * 512 * 1536
    with pytest.raises(ValueError, match="length"):
        perf.roofline_operations(config, 10, 30)
