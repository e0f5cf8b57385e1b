"""Tests of companion.book.experiments.assembled (the chapter "The Transformer assembled") and
tools/draw_architecture.py."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys

import pytest
import torch

import companion
from companion.book.experiments import assembled as exp
from companion.data import make_batches, synthetic_pairs

ROOT = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.usefixtures("one_thread")


def small_config(**overrides) -> companion.TransformerConfig:
    settings = dict(
        src_vocab_size=13,
        tgt_vocab_size=11,
        d_model=16,
        num_heads=2,
        num_encoder_layers=2,
        num_decoder_layers=3,
        d_ff=32,
        dropout=0.0,
        max_len=32,
    )
    settings.update(overrides)
    return companion.TransformerConfig(**settings)


@pytest.fixture
def toy_batches():
    pairs = synthetic_pairs("reverse", 200, min_len=2, max_len=6, vocab_size=12, seed=0)
    return make_batches(pairs, max_tokens=120, seed=0)


# -- shape records and the figure -------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_record_shapes_sees_every_sublayer_with_its_shape(norm_first):
    config = small_config(norm_first=norm_first)
    model = companion.Transformer(config).eval()
    src, tgt = torch.randint(4, 13, (3, 7)), torch.randint(4, 11, (3, 5))
    records = exp.record_shapes(model, src, tgt)
    encoder = [r for r in records if r.side == "encoder"]
    decoder = [r for r in records if r.side == "decoder"]
    final_norms = 1 if norm_first else 0
    assert len(encoder) == 2 + 4 * 2 + final_norms
    assert len(decoder) == 2 + 6 * 3 + final_norms + 2
    assert (
        [r.label for r in encoder[:2]]
        == [r.label for r in decoder[:2]]
        == ["embedding", "x sqrt(d) + positional encoding"]
    )
    assert all(r.shape == (3, 7, 16) for r in encoder)
    assert [r.shape for r in decoder[-2:]] == [(3, 5, 11), (3, 5, 11)]
    assert [r.order for r in records] == list(range(len(records)))
    cross = [r for r in records if r.label.startswith("cross-attention")]
    assert len(cross) == 3
    assert all(r.inputs == {"Q from decoder": (3, 5, 16), "K, V from encoder": (3, 7, 16)} for r in cross)
    first_layer = [r.module.rsplit(".", 1)[-1] for r in encoder if r.layer == 0]
    expected = ["norm1", "out_proj", "norm2", "ffn"] if norm_first else ["out_proj", "norm1", "ffn", "norm2"]
    assert first_layer == expected


def test_record_shapes_with_shared_embeddings_labels_both_sides():
    config = small_config(src_vocab_size=13, tgt_vocab_size=13, share_embeddings=True, tie_output=True)
    records = exp.record_shapes(
        companion.Transformer(config).eval(), torch.randint(4, 13, (2, 6)), torch.randint(4, 13, (2, 4))
    )
    embeddings = [r for r in records if r.label == "embedding"]
    assert [(r.side, r.shape) for r in embeddings] == [("encoder", (2, 6, 16)), ("decoder", (2, 4, 16))]


def test_record_shapes_removes_its_hooks_and_rejects_other_models():
    model = companion.Transformer(small_config()).eval()
    exp.record_shapes(model, torch.randint(4, 13, (1, 4)), torch.randint(4, 11, (1, 3)))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    with pytest.raises(TypeError, match="model must be a companion.Transformer"):
        exp.record_shapes(torch.nn.Linear(2, 2), torch.zeros(1, 2), torch.zeros(1, 2))


def test_shape_symbols_names_only_unambiguous_sizes():
    config = small_config()
    assert exp.shape_symbols(config, 2, 7, 5) == {2: "B", 7: "n", 5: "t", 16: "d", 11: "V"}
    assert 7 not in exp.shape_symbols(config, 2, 7, 7)  # n == t: ambiguous, no symbol


def test_draw_architecture_has_one_box_per_record_and_cross_arrows():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = companion.Transformer(small_config()).eval()
    records = exp.record_shapes(model, torch.randint(4, 13, (2, 7)), torch.randint(4, 11, (2, 5)))
    fig = exp.draw_architecture(records, exp.shape_symbols(model.config, 2, 7, 5))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert sum("[2, 7, 16] = [B, n, d]" in t for t in texts) == sum(r.side == "encoder" for r in records)
    assert any("cross-attention" in t and "[2, 5, 16]" in t for t in texts)
    plt.close(fig)
    with pytest.raises(ValueError, match="records"):
        exp.draw_architecture([])


def test_draw_architecture_script_runs_and_is_deterministic(tmp_path):
    outputs = []
    for name in ("a.png", "b.png"):
        out = tmp_path / name
        result = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "draw_architecture.py"), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0][:8] == b"\x89PNG\r\n\x1a\n" and len(outputs[0]) > 10_000
    assert outputs[0] == outputs[1]
    bad = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "draw_architecture.py"), "--out", str(tmp_path / "x.jpg")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "--out must be a .png" in bad.stderr


# -- feed-forward network ---------------------------------------------------------------------------------


def test_ffn_as_conv1d_equals_the_ffn():
    ffn = companion.FeedForward(16, 64)
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(exp.apply_conv_ffn(exp.ffn_as_conv1d(ffn), x), ffn(x))
    with pytest.raises(TypeError, match="ffn must be a companion.FeedForward"):
        exp.ffn_as_conv1d(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="x must be"):
        exp.apply_conv_ffn(exp.ffn_as_conv1d(ffn), torch.randn(9, 16))


def test_layer_flops_and_parameters_match_the_formulas():
    config = small_config(d_model=32, num_heads=4, d_ff=128)
    layer = companion.EncoderLayer(config).eval()
    d, d_ff, n = 32, 128, 10
    flops = exp.layer_flops(layer, n)
    assert flops == {
        "layer": 8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff,
        "attention": 8 * n * d * d + 4 * n * n * d,
        "ffn": 4 * n * d * d_ff,
    }
    params = exp.layer_parameter_counts(layer)
    assert params == {
        "attention": 4 * (d * d + d),
        "ffn": 2 * d * d_ff + d_ff + d,
        "norm": 4 * d,
        "total": sum(p.numel() for p in layer.parameters()),
    }
    decoder_params = exp.layer_parameter_counts(companion.DecoderLayer(config))
    assert decoder_params["attention"] == 8 * (d * d + d) and decoder_params["norm"] == 6 * d
    with pytest.raises(ValueError, match="n must be a positive integer"):
        exp.layer_flops(layer, 0)


# -- post-LN / pre-LN -------------------------------------------------------------------------------------


def test_gradient_norms_at_init_one_value_per_layer_and_seeded(toy_batches):
    config = small_config(src_vocab_size=12, tgt_vocab_size=12)
    first = exp.gradient_norms_at_init(config, toy_batches[0], seed=3)
    again = exp.gradient_norms_at_init(config, toy_batches[0], seed=3)
    assert first == again
    assert len(first["encoder"]) == 2 and len(first["decoder"]) == 3 and len(first["decoder_ffn_w2"]) == 3
    assert all(v > 0 and math.isfinite(v) for values in first.values() for v in values)
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        exp.gradient_norms_at_init({"d_model": 16}, toy_batches[0])


def test_warmup_schedule():
    schedule = exp.warmup_schedule(1e-3, 10)
    assert schedule(1) == pytest.approx(1e-4) and schedule(10) == pytest.approx(1e-3)
    assert schedule(500) == pytest.approx(1e-3)
    assert exp.warmup_schedule(1e-3, 0)(1) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="warmup"):
        exp.warmup_schedule(1e-3, -1)
    with pytest.raises(ValueError, match="peak_lr"):
        exp.warmup_schedule(0.0, 5)


def test_train_small_lowers_the_loss(toy_batches):
    config = small_config(src_vocab_size=12, tgt_vocab_size=12, num_encoder_layers=1, num_decoder_layers=1)
    result = exp.train_small(config, toy_batches, 60, exp.warmup_schedule(3e-3, 10), seed=0)
    assert len(result.losses) == len(result.grad_norms) == 60
    assert result.final_loss(10) < result.losses[0] - 0.5
    assert not result.model.training
    with pytest.raises(ValueError, match="batches must not be empty"):
        exp.train_small(config, [], 5, exp.warmup_schedule(1e-3, 0))
    with pytest.raises(ValueError, match="steps"):
        exp.train_small(config, toy_batches, 0, exp.warmup_schedule(1e-3, 0))
    with pytest.raises(TypeError, match="lr must be a callable"):
        exp.train_small(config, toy_batches, 5, 1e-3)


def test_train_small_uses_the_learning_rate_of_each_step(toy_batches):
    config = small_config(src_vocab_size=12, tgt_vocab_size=12, num_encoder_layers=1, num_decoder_layers=1)
    frozen = exp.train_small(config, toy_batches, 3, lambda step: 1e-30, seed=1)  # no visible update
    torch.manual_seed(1)
    fresh = companion.Transformer(config).eval()  # the same initial weights
    with torch.no_grad():
        for step in range(3):
            batch = toy_batches[step]
            logits = fresh(batch.src, batch.tgt_in)
            expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=0)
            assert frozen.losses[step] == pytest.approx(float(expected), abs=1e-5)
    moving = exp.train_small(config, toy_batches, 3, exp.warmup_schedule(1e-2, 0), seed=1)
    assert moving.losses[0] == pytest.approx(frozen.losses[0]) and moving.losses[2] != pytest.approx(
        frozen.losses[2], abs=1e-4
    )


# -- Table 1 ----------------------------------------------------------------------------------------------


def test_stepwise_rnn_steps_equal_the_recurrence():
    rnn = exp.StepwiseRNN(6).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    h = torch.zeros_like(x)
    for _ in range(9):
        h = rnn.step(x, h)
    torch.testing.assert_close(h, rnn(x))
    partial = rnn.step(x, rnn.step(x, torch.zeros_like(x)))  # two steps: positions 0 and 1 are final
    torch.testing.assert_close(partial[:, :2], rnn(x)[:, :2])
    assert not torch.allclose(partial[:, 2:], rnn(x)[:, 2:])


def test_restricted_attention_sees_exactly_its_window():
    n, r = 11, 2
    layer = exp.RestrictedSelfAttention(4, r).double()
    band = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() <= r
    assert torch.equal(exp.dependency_matrix(layer, n, 4), band)
    x = torch.randn(1, n, 4)
    assert exp.count_flops(lambda: exp.RestrictedSelfAttention(4, r)(x)) == 8 * n * 16 + 4 * n * (2 * r + 1) * 4
    with pytest.raises(ValueError, match="x must be"):
        exp.RestrictedSelfAttention(4, r)(torch.randn(1, n, 5))


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("self-attention", lambda n: 1),
        ("recurrent", lambda n: n - 1),
        ("convolution", lambda n: n - 1),  # k = 3: one position per layer
        ("dilated convolution", lambda n: math.ceil(math.log(n, 3) - 1e-9)),
        ("restricted self-attention", lambda n: math.ceil((n - 1) / 2)),
    ],
)
def test_max_path_length_matches_table_1(kind, expected):
    for n in (6, 10, 20):
        causal = kind in ("recurrent", "dilated convolution")
        reachable = torch.tril(torch.ones(n, n, dtype=torch.bool)) if causal else torch.ones(n, n, dtype=torch.bool)
        length = exp.max_path_length(
            lambda layer: exp.dependency_matrix(exp.make_table1_layer(kind, 3, k=3, r=2, layer=layer), n, 3), reachable
        )
        assert length == expected(n), (kind, n)


def test_boolean_composition_equals_the_stack_jacobian():
    layers = [exp.make_table1_layer("dilated convolution", 3, k=2, layer=i) for i in range(3)]
    composed = exp.dependency_matrix(lambda z: layers[2](layers[1](layers[0](z))), 9, 3)
    single = [exp.dependency_matrix(layer, 9, 3).double() for layer in layers]
    assert torch.equal(composed, (single[2] @ single[1] @ single[0]) > 0)


def test_max_path_length_errors():
    with pytest.raises(RuntimeError, match="do not connect"):
        exp.max_path_length(
            lambda layer: torch.eye(4, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool), max_layers=3
        )
    with pytest.raises(ValueError, match=r"must be a \[4, 4\] matrix"):
        exp.max_path_length(lambda layer: torch.ones(3, 3, dtype=torch.bool), torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="kind must be one of"):
        exp.make_table1_layer("lstm", 4)
    with pytest.raises(ValueError, match="odd kernel"):
        exp.make_table1_layer("convolution", 4, k=4)


def test_count_operations_grows_with_n_only_for_the_recurrence():
    rnn, attention = exp.StepwiseRNN(4), companion.MultiHeadAttention(4, 1)
    with torch.no_grad():
        attention(*(torch.randn(1, 4, 4),) * 3)  # the first call also builds the fused Q/K/V weight
        rnn_ops = [exp.count_operations(lambda: rnn(torch.randn(1, n, 4))) for n in (4, 8, 16)]
        attention_ops = [exp.count_operations(lambda: attention(*(torch.randn(1, n, 4),) * 3)) for n in (4, 8, 16)]
    assert rnn_ops[1] - rnn_ops[0] == (rnn_ops[2] - rnn_ops[1]) / 2 > 0
    assert len(set(attention_ops)) == 1
