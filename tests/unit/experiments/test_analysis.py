"""companion.book.experiments.analysis: head removal is exact and reversible, entropy and shares are right, the
ablation and
pruning measurements add up, and bad input is refused with a clear message."""

from __future__ import annotations

import math

import pytest
import torch

from companion import MultiHeadAttention, scaled_dot_product_attention
from companion.book.experiments.analysis import (
    all_heads,
    attention_entropy,
    attention_modules,
    attention_share,
    gradient_importance,
    head_ablation,
    head_columns,
    heads_removed,
    prune_heads,
    pruning_curve,
)

D_MODEL, HEADS = 16, 4


@pytest.fixture
def mha() -> MultiHeadAttention:
    return MultiHeadAttention(D_MODEL, HEADS).eval()


def per_head_outputs(mha: MultiHeadAttention, x: torch.Tensor) -> list[torch.Tensor]:
    """Each head's contribution to the output, ``head_i W^O_i`` ``[batch, seq, d_model]``, computed by hand."""
    q, k, v = (mha.split_heads(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    heads, _ = scaled_dot_product_attention(q, k, v)  # [batch, heads, seq, d_head]
    return [heads[:, i] @ mha.out_proj.weight[:, head_columns(mha, i)].T for i in range(mha.num_heads)]


def test_pruning_removes_exactly_the_heads_contribution(mha):
    x = torch.randn(2, 5, D_MODEL)
    contributions = per_head_outputs(mha, x)
    with torch.no_grad():
        full = mha(x, x, x)
        torch.testing.assert_close(full, sum(contributions) + mha.out_proj.bias, atol=1e-5, rtol=0)
        prune_heads(mha, [1, 3])
        pruned = mha(x, x, x)
    torch.testing.assert_close(pruned, full - contributions[1] - contributions[3], atol=1e-5, rtol=0)
    assert not torch.allclose(pruned, full, atol=1e-3)


def test_pruning_every_head_leaves_only_the_output_bias(mha):
    x = torch.randn(2, 5, D_MODEL)
    prune_heads(mha, range(HEADS))
    with torch.no_grad():
        out = mha(x, x, x)
    torch.testing.assert_close(out, mha.out_proj.bias.expand_as(out))


def test_heads_removed_restores_the_weights_even_after_an_error(tiny_model):
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    name = next(iter(attention_modules(model)))
    with pytest.raises(RuntimeError, match="boom"):
        with heads_removed(model, [(name, 0), (name, 2)]):
            weight = attention_modules(model)[name].out_proj.weight
            assert bool((weight[:, head_columns(attention_modules(model)[name], 2)] == 0).all())
            raise RuntimeError("boom")
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_heads_removed_changes_a_transformers_output_and_only_inside(tiny_model, tokens):
    model = tiny_model()
    src, tgt = tokens(2, 6, 23), tokens(2, 5, 19)
    with torch.no_grad():
        full = model(src, tgt)
        with heads_removed(model, [("decoder.layers.0.cross_attn", 1)]):
            pruned = model(src, tgt)
        again = model(src, tgt)
    assert not torch.allclose(full, pruned, atol=1e-4)
    torch.testing.assert_close(again, full)


def test_attention_modules_and_all_heads_cover_the_model(tiny_model):
    model = tiny_model()
    names = list(attention_modules(model))
    # 2 encoder layers (self) + 2 decoder layers (self + cross)
    assert len(names) == 6 and "encoder.layers.1.self_attn" in names and "decoder.layers.0.cross_attn" in names
    heads = all_heads(model)
    assert len(heads) == 6 * 4 and heads[0] == (names[0], 0) and heads[-1] == (names[-1], 3)


def test_entropy_of_known_distributions():
    n = 5
    one_hot = torch.eye(n)[None, None]  # [1, 1, n, n]: every query on one key
    uniform = torch.full((1, 1, n, n), 1.0 / n)
    weights = torch.cat([one_hot, uniform], dim=1)  # [1, 2, n, n]
    entropy = attention_entropy(weights)
    torch.testing.assert_close(entropy, torch.tensor([0.0, math.log(n)]))


def test_entropy_skips_masked_queries_and_all_zero_rows():
    weights = torch.zeros(1, 1, 3, 4)
    weights[0, 0, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0])  # entropy log 2
    weights[0, 0, 1] = torch.tensor([0.25, 0.25, 0.25, 0.25])  # entropy log 4, masked out below
    # row 2 stays all zero (a fully masked query): never counted
    mask = torch.tensor([[True, False, True]])
    torch.testing.assert_close(attention_entropy(weights, mask), torch.tensor([math.log(2)]))
    torch.testing.assert_close(attention_entropy(weights), torch.tensor([(math.log(2) + math.log(4)) / 2]))


def test_entropy_matches_a_direct_computation_on_real_weights(mha):
    x = torch.randn(3, 7, D_MODEL)
    with torch.no_grad():
        _, weights = mha(x, x, x, need_weights=True)
    expected = torch.stack([-(weights[:, h] * weights[:, h].log()).sum(-1).mean() for h in range(HEADS)])
    torch.testing.assert_close(attention_entropy(weights), expected, atol=1e-5, rtol=0)


def test_attention_share_of_selected_keys():
    n = 4
    weights = torch.zeros(1, 2, n, n)
    weights[0, 0] = torch.eye(n)  # head 0 looks at itself
    weights[0, 1, :, 0] = 1.0  # head 1 looks at the first token
    itself = torch.eye(n, dtype=torch.bool)
    first = torch.zeros(n, n, dtype=torch.bool)
    first[:, 0] = True
    torch.testing.assert_close(attention_share(weights, itself), torch.tensor([1.0, 0.25]))
    torch.testing.assert_close(attention_share(weights, first), torch.tensor([0.25, 1.0]))
    later = torch.tensor([[False, True, True, True]])  # skip query 0, where both selectors overlap
    torch.testing.assert_close(attention_share(weights, first, later), torch.tensor([0.0, 1.0]))


def test_head_ablation_and_pruning_curve_are_consistent(tiny_model, tokens):
    model = tiny_model()
    src, tgt = tokens(4, 6, 23), tokens(4, 5, 19)
    target = tokens(4, 5, 19)

    def loss() -> float:
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(model(src, tgt).transpose(1, 2), target).item()

    base = loss()
    changes = head_ablation(model, loss)
    assert set(changes) == set(all_heads(model))
    assert any(abs(c) > 1e-6 for c in changes.values())
    one = ("encoder.layers.0.self_attn", 2)
    with heads_removed(model, [one]):
        assert changes[one] == pytest.approx(loss() - base, abs=1e-9)
    order = sorted(changes, key=changes.get)[:5]
    curve = pruning_curve(model, loss, order)
    assert len(curve) == 6 and curve[0] == pytest.approx(base)
    assert curve[1] == pytest.approx(base + changes[order[0]], abs=1e-9)
    with heads_removed(model, order):
        assert curve[-1] == pytest.approx(loss(), abs=1e-9)
    assert loss() == pytest.approx(base, abs=1e-9), "the weights are restored after the measurements"


def test_gradient_importance_matches_a_finite_difference(tiny_model, tokens):
    """|dL/d xi_h| at xi = 1 equals the derivative of the loss when head h's columns of W^O are scaled."""
    model = tiny_model().double()
    examples = [(tokens(1, 6, 23), tokens(1, 5, 19), tokens(1, 5, 19)) for _ in range(3)]

    def loss_fn(m, example):
        src, tgt, target = example
        return torch.nn.functional.cross_entropy(m(src, tgt).transpose(1, 2), target)

    importance = gradient_importance(model, examples, loss_fn)
    assert set(importance) == set(all_heads(model))
    assert all(p.grad is None for p in model.parameters()), "model parameters get no gradient"
    name, head = "decoder.layers.1.self_attn", 2
    attention = attention_modules(model)[name]
    cols = head_columns(attention, head)
    eps, slopes = 1e-5, []
    for example in examples:
        values = []
        for scale in (1 + eps, 1 - eps):
            with torch.no_grad():
                attention.out_proj.weight[:, cols] *= scale
                values.append(loss_fn(model, example).item())
                attention.out_proj.weight[:, cols] /= scale
        slopes.append(abs(values[0] - values[1]) / (2 * eps))
    assert importance[name, head] == pytest.approx(sum(slopes) / len(slopes), rel=1e-4)
    assert importance[name, head] > 0
    # the hooks are gone: the model computes what it computed before
    with torch.no_grad():
        before = loss_fn(model, examples[0]).item()
    assert before == pytest.approx(loss_fn(model, examples[0]).item())
    assert all(not m._forward_pre_hooks for m in model.modules())


# -- bad input ---------------------------------------------------------------------------------------------------
def test_bad_head_index_or_name_is_refused(mha, tiny_model):
    with pytest.raises(ValueError, match=r"head must be in \[0, num_heads=4\), got 4"):
        prune_heads(mha, [4])
    with pytest.raises(TypeError, match="head must be an int"):
        head_columns(mha, 1.0)
    with pytest.raises(TypeError, match="attention must be a companion MultiHeadAttention"):
        head_columns(torch.nn.Linear(2, 2), 0)
    model = tiny_model()
    with pytest.raises(ValueError, match="no MultiHeadAttention named 'encoder.layers.9.self_attn'"):
        with heads_removed(model, [("encoder.layers.9.self_attn", 0)]):
            pass
    with pytest.raises(TypeError, match="heads must hold \\(module name, head index\\) pairs"):
        with heads_removed(model, ["encoder.layers.0.self_attn"]):
            pass
    with pytest.raises(ValueError, match="order must not name the same head twice"):
        pruning_curve(model, lambda: 0.0, [("encoder.layers.0.self_attn", 0)] * 2)
    with pytest.raises(TypeError, match="loss_fn must be a callable"):
        head_ablation(model, 3.0)
    with pytest.raises(ValueError, match="loss_fn returned nan"):
        head_ablation(model, lambda: float("nan"))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        attention_modules("model")
    with pytest.raises(ValueError, match="examples must hold at least one example"):
        gradient_importance(model, [], lambda m, e: torch.zeros(()))
    with pytest.raises(TypeError, match="loss_fn must return a 0-d tensor, got float"):
        gradient_importance(model, [0], lambda m, e: 1.0)
    assert all(not m._forward_pre_hooks for m in model.modules()), "hooks removed after an error"
    with pytest.raises(ValueError, match="model has no MultiHeadAttention"):
        gradient_importance(torch.nn.Linear(2, 2), [0], lambda m, e: torch.zeros(()))


def test_bad_weights_or_masks_are_refused():
    with pytest.raises(ValueError, match=r"weights must have 4 dimensions, got shape \(3, 3\)"):
        attention_entropy(torch.rand(3, 3))
    with pytest.raises(TypeError, match="query_mask must be boolean"):
        attention_entropy(torch.rand(1, 1, 3, 3), torch.ones(1, 3))
    with pytest.raises(ValueError, match=r"query_mask must have shape \[batch, m\] = \(1, 3\), got \(1, 4\)"):
        attention_entropy(torch.rand(1, 1, 3, 3), torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="some head has no query"):
        attention_entropy(torch.rand(1, 1, 3, 3), torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="keys must be a boolean selector"):
        attention_share(torch.rand(1, 1, 3, 3), torch.eye(3))
    with pytest.raises(ValueError, match=r"keys must have shape \[m, n\] = \(3, 3\)"):
        attention_share(torch.rand(1, 1, 3, 3), torch.eye(4, dtype=torch.bool))
