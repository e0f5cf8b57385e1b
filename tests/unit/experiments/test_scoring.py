"""Tests for companion.book.experiments.scoring:
additive, general and dot-product scores, and the shared softmax step."""

from __future__ import annotations

import math

import pytest
import torch

from companion import scaled_dot_product_attention
from companion.book.experiments.scoring import AdditiveScore, DotScore, GeneralScore, attend


def _all_scorers(d: int) -> list[torch.nn.Module]:
    return [AdditiveScore(d, d, 7), GeneralScore(d, d), DotScore(), DotScore(scaled=True)]


# ------------------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize("scorer", _all_scorers(6), ids=lambda s: type(s).__name__)
def test_scores_have_one_row_per_query_and_one_column_per_key(scorer):
    query, keys = torch.randn(3, 4, 6), torch.randn(3, 9, 6)
    assert scorer(query, keys).shape == (3, 4, 9)


def test_additive_and_general_accept_different_query_and_key_widths():
    query, keys = torch.randn(2, 3, 5), torch.randn(2, 8, 11)
    assert AdditiveScore(5, 11, 4)(query, keys).shape == (2, 3, 8)
    assert GeneralScore(5, 11)(query, keys).shape == (2, 3, 8)


def test_attend_shapes_and_rows_sum_to_one():
    scores, values = torch.randn(2, 3, 6), torch.randn(2, 6, 4)
    context, weights = attend(scores, values)
    assert context.shape == (2, 3, 4) and weights.shape == (2, 3, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert (weights > 0).all()


# ------------------------------------------------------------------------- formulas by hand
def test_additive_score_matches_a_loop_over_pairs():
    scorer = AdditiveScore(3, 5, 4)
    query, keys = torch.randn(2, 2, 3), torch.randn(2, 6, 5)
    w_q, w_k, v = scorer.query_proj.weight, scorer.key_proj.weight, scorer.v
    expected = torch.empty(2, 2, 6)
    for b in range(2):
        for i in range(2):
            for j in range(6):
                expected[b, i, j] = v @ torch.tanh(w_q @ query[b, i] + w_k @ keys[b, j])
    torch.testing.assert_close(scorer(query, keys), expected)


def test_additive_score_on_numbers_worked_by_hand():
    scorer = AdditiveScore(1, 1, 2)
    with torch.no_grad():
        scorer.query_proj.weight.copy_(torch.tensor([[1.0], [0.0]]))
        scorer.key_proj.weight.copy_(torch.tensor([[0.0], [2.0]]))
        scorer.v.copy_(torch.tensor([1.0, -1.0]))
    query, keys = torch.tensor([[[0.5]]]), torch.tensor([[[1.0], [-1.0]]])
    # key 1: v . tanh([0.5, 2.0]); key 2: v . tanh([0.5, -2.0])
    expected = torch.tensor([[[math.tanh(0.5) - math.tanh(2.0), math.tanh(0.5) + math.tanh(2.0)]]])
    torch.testing.assert_close(scorer(query, keys), expected)


def test_precomputed_keys_give_the_same_scores():
    scorer = AdditiveScore(4, 6, 5)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 7, 6)
    torch.testing.assert_close(scorer.score_projected(query, scorer.project_keys(keys)), scorer(query, keys))


def test_general_score_is_the_bilinear_form():
    scorer = GeneralScore(3, 4)
    query, keys = torch.randn(2, 5, 3), torch.randn(2, 6, 4)
    expected = torch.einsum("bmq,qk,bnk->bmn", query, scorer.weight, keys)
    torch.testing.assert_close(scorer(query, keys), expected)
    assert scorer.weight.shape == (3, 4)


def test_general_score_with_identity_matrix_is_the_dot_score():
    scorer = GeneralScore(4, 4)
    with torch.no_grad():
        scorer.weight.copy_(torch.eye(4))
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    torch.testing.assert_close(scorer(query, keys), DotScore()(query, keys))


def test_dot_score_on_numbers_worked_by_hand():
    query = torch.tensor([[[1.0, 2.0, 0.0, 1.0]]])
    keys = torch.tensor([[[1.0, 1.0, 1.0, 1.0], [0.0, -1.0, 3.0, 2.0]]])
    torch.testing.assert_close(DotScore()(query, keys), torch.tensor([[[4.0, 0.0]]]))
    torch.testing.assert_close(DotScore(scaled=True)(query, keys), torch.tensor([[[2.0, 0.0]]]))


def test_attend_on_numbers_worked_by_hand():
    scores = torch.tensor([[[0.0, math.log(3.0)]]])  # softmax -> [1/4, 3/4]
    values = torch.tensor([[[4.0, 0.0], [0.0, 8.0]]])
    context, weights = attend(scores, values)
    torch.testing.assert_close(weights, torch.tensor([[[0.25, 0.75]]]))
    torch.testing.assert_close(context, torch.tensor([[[1.0, 6.0]]]))


@pytest.mark.parametrize("with_mask", [False, True])
def test_scaled_dot_score_plus_attend_equals_scaled_dot_product_attention(with_mask):
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
    mask = torch.rand(2, 5, 7) > 0.3 if with_mask else None
    context, weights = attend(DotScore(scaled=True)(q, k), v, mask=mask)
    expected, expected_weights = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(context, expected)
    torch.testing.assert_close(weights, expected_weights)


# ------------------------------------------------------------------------------------------ masks
def test_masked_keys_get_zero_weight_and_do_not_change_the_context():
    scores, values = torch.randn(2, 3, 5), torch.randn(2, 5, 4)
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, True]])[:, None, :]
    context, weights = attend(scores, values, mask=mask)
    assert (weights[0, :, 3:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    # Changing the hidden values or scores must not change the first example's context.
    values2, scores2 = values.clone(), scores.clone()
    values2[0, 3:] = 100.0
    scores2[0, :, 3:] = 50.0
    context2, _ = attend(scores2, values2, mask=mask)
    torch.testing.assert_close(context2[0], context[0])
    # Same as attending over the first three keys only.
    short, _ = attend(scores[:1, :, :3], values[:1, :3])
    torch.testing.assert_close(context[:1], short)


def test_a_two_dimensional_mask_broadcasts_over_the_batch():
    scores, values = torch.randn(2, 3, 4), torch.randn(2, 4, 2)
    mask = torch.ones(3, 4, dtype=torch.bool).tril()
    _, weights = attend(scores, values, mask=mask)
    assert (weights.triu(1) == 0).all()


def test_fully_masked_rows_give_zero_weights_and_no_nan_in_values_or_gradients():
    scores = torch.randn(1, 2, 3, requires_grad=True)
    values = torch.randn(1, 3, 4, requires_grad=True)
    mask = torch.tensor([[[True, False, True], [False, False, False]]])
    context, weights = attend(scores, values, mask=mask)
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert (weights[0, 1] == 0).all() and (context[0, 1] == 0).all()
    torch.testing.assert_close(weights[0, 0].sum(), torch.tensor(1.0))
    context.sum().backward()
    assert torch.isfinite(scores.grad).all() and torch.isfinite(values.grad).all()


def test_gradients_reach_every_parameter():
    for scorer in (AdditiveScore(4, 4, 3), GeneralScore(4, 4)):
        query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
        context, _ = attend(scorer(query, keys), keys)
        context.square().sum().backward()
        for name, p in scorer.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name


# ------------------------------------------------------------------------------------ bad input
def test_bad_constructor_arguments_raise():
    with pytest.raises(ValueError, match="hidden_dim"):
        AdditiveScore(3, 3, 0)
    with pytest.raises(ValueError, match="query_dim"):
        GeneralScore(-1, 3)
    with pytest.raises(TypeError, match="scaled"):
        DotScore(scaled="yes")


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="query"):
        DotScore()(torch.randn(3, 4), torch.randn(1, 3, 4))
    with pytest.raises(TypeError, match="keys"):
        DotScore()(torch.randn(1, 3, 4), [[1.0]])
    with pytest.raises(ValueError, match="batch size"):
        DotScore()(torch.randn(2, 3, 4), torch.randn(3, 3, 4))
    with pytest.raises(ValueError, match="keys"):
        DotScore()(torch.randn(1, 3, 4), torch.randn(1, 3, 5))
    with pytest.raises(ValueError, match="query_dim=3"):
        AdditiveScore(3, 4, 5)(torch.randn(1, 2, 4), torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match="key_dim=4"):
        GeneralScore(3, 4)(torch.randn(1, 2, 3), torch.randn(1, 3, 3))
    with pytest.raises(ValueError, match="at least one position"):
        DotScore()(torch.randn(1, 0, 4), torch.randn(1, 3, 4))


def test_bad_attend_arguments_raise():
    scores, values = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    with pytest.raises(ValueError, match="values"):
        attend(scores, torch.randn(2, 5, 5))
    with pytest.raises(TypeError, match="mask"):
        attend(scores, values, mask=torch.ones(2, 3, 4))
    with pytest.raises(ValueError, match="mask"):
        attend(scores, values, mask=torch.ones(2, 3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="scores"):
        attend(torch.randn(3, 4), values)
