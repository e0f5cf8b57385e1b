"""Tests for companion.book.experiments.lookup:
the noisy key-value lookup task and the models that chapter 2 compares."""

from __future__ import annotations

import pytest
import torch

from companion.book.experiments.lookup import (
    SCORER_KINDS,
    AppendOne,
    LookupModel,
    LookupTask,
    evaluate_lookup,
    make_lookup_model,
    train_lookup,
)
from companion.book.experiments.scoring import AdditiveScore, DotScore


# ------------------------------------------------------------------------------------------- the task
def test_batch_shapes_and_dtypes():
    batch = LookupTask(key_dim=6, num_pairs=5, value_dim=3).sample(7, torch.Generator().manual_seed(0))
    assert batch.query.shape == (7, 1, 6)
    assert batch.keys.shape == (7, 5, 6)
    assert batch.values.shape == (7, 5, 3)
    assert batch.target.shape == (7,) and batch.target.dtype == torch.long
    assert ((batch.target >= 0) & (batch.target < 5)).all()


def test_keys_lie_on_the_sphere_of_radius_sqrt_d():
    batch = LookupTask(key_dim=9).sample(32, torch.Generator().manual_seed(1))
    torch.testing.assert_close(batch.keys.norm(dim=-1), torch.full((32, 16), 3.0))


def test_rotation_is_orthogonal_and_fixed_by_the_seed():
    task = LookupTask(key_dim=8, seed=3)
    torch.testing.assert_close(task.rotation @ task.rotation.T, torch.eye(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(LookupTask(key_dim=8, seed=3).rotation, task.rotation)
    assert not torch.allclose(LookupTask(key_dim=8, seed=4).rotation, task.rotation)


def test_without_noise_the_query_is_the_rotated_target_key():
    task = LookupTask(key_dim=5, noise=0.0)
    batch = task.sample(4, torch.Generator().manual_seed(2))
    expected = batch.keys[torch.arange(4), batch.target] @ task.rotation.T
    torch.testing.assert_close(batch.query[:, 0], expected)
    assert task.oracle_accuracy(batch) == 1.0


def test_sampling_is_reproducible_given_the_generator():
    task = LookupTask(key_dim=4)
    first = task.sample(3, torch.Generator().manual_seed(5))
    second = task.sample(3, torch.Generator().manual_seed(5))
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_oracle_accuracy_falls_with_noise():
    generator = torch.Generator().manual_seed(0)
    clean = LookupTask(key_dim=8, noise=0.1)
    noisy = LookupTask(key_dim=8, noise=3.0)
    assert clean.oracle_accuracy(clean.sample(2000, generator)) > 0.99
    assert noisy.oracle_accuracy(noisy.sample(2000, generator)) < 0.6


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(key_dim=0), "key_dim"),
        (dict(key_dim=4, num_pairs=0), "num_pairs"),
        (dict(key_dim=4, value_dim=-1), "value_dim"),
        (dict(key_dim=4, noise=-0.1), "noise"),
    ],
)
def test_bad_task_arguments_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LookupTask(**kwargs)


# ----------------------------------------------------------------------------------------- the models
@pytest.mark.parametrize("kind", SCORER_KINDS)
def test_every_kind_returns_context_weights_and_scores(kind):
    task = LookupTask(key_dim=6, num_pairs=4, value_dim=3)
    batch = task.sample(5, torch.Generator().manual_seed(0))
    context, weights, scores = make_lookup_model(kind, 6)(batch.query, batch.keys, batch.values)
    assert context.shape == (5, 1, 3) and weights.shape == scores.shape == (5, 1, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, 1))


def test_parameter_counts_follow_the_formulas():
    d = 10
    count = lambda kind: sum(p.numel() for p in make_lookup_model(kind, d).parameters())  # noqa: E731
    assert count("dot") == count("scaled_dot") == count("general") == d * d
    assert count("additive_no_bias") == 2 * d * d + d  # W_q, W_k, v
    assert count("additive") == 2 * d * d + 2 * d  # plus the hidden bias (the extra column of W_q)


def test_append_one_is_the_bias_trick():
    scorer = AdditiveScore(4, 3, 5)
    model = LookupModel(scorer, AppendOne())
    query, keys = torch.randn(2, 1, 3), torch.randn(2, 6, 3)
    w = scorer.query_proj.weight  # [hidden, 4]: the last column acts as the bias
    expected = torch.tanh((query @ w[:, :3].T + w[:, 3])[:, :, None, :] + scorer.key_proj(keys)[:, None]) @ scorer.v
    _, _, scores = model(query, keys, torch.randn(2, 6, 2))
    torch.testing.assert_close(scores, expected)


def test_additive_without_bias_is_odd_and_with_bias_is_not():
    query, keys = torch.randn(3, 1, 5), torch.randn(3, 7, 5)
    plain = make_lookup_model("additive_no_bias", 5)
    torch.testing.assert_close(plain.scorer(-query, -keys), -plain.scorer(query, keys))
    biased = make_lookup_model("additive", 5)
    _, _, scores = biased(query, keys, torch.randn(3, 7, 2))
    _, _, mirrored = biased(-query, -keys, torch.randn(3, 7, 2))
    assert not torch.allclose(mirrored, -scores, atol=1e-4)


def test_dot_kinds_project_the_query_and_differ_only_by_the_scale():
    torch.manual_seed(0)
    dot = make_lookup_model("dot", 16)
    scaled = make_lookup_model("scaled_dot", 16)
    scaled.load_state_dict(dot.state_dict())
    assert isinstance(dot.scorer, DotScore) and dot.query_proj is not None
    query, keys = torch.randn(2, 1, 16), torch.randn(2, 5, 16)
    _, _, raw = dot(query, keys, torch.randn(2, 5, 3))
    _, _, divided = scaled(query, keys, torch.randn(2, 5, 3))
    torch.testing.assert_close(divided, raw / 4.0)


def test_unknown_kind_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="kind must be one of"):
        make_lookup_model("cosine", 4)


# -------------------------------------------------------------------------------------------- training
def test_training_reduces_the_loss_and_beats_chance():
    torch.manual_seed(0)
    task = LookupTask(key_dim=16, num_pairs=8)
    model = make_lookup_model("scaled_dot", 16)
    test = task.sample(500, torch.Generator().manual_seed(99))
    before = evaluate_lookup(model, test)
    losses = train_lookup(model, task, steps=150, batch_size=32, lr=1e-2, seed=0)
    after = evaluate_lookup(model, test)
    assert len(losses) == 150
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    assert after["mse"] < 0.5 * before["mse"]
    assert after["accuracy"] > 0.9  # chance is 1/8


def test_training_is_reproducible_and_sgd_is_available():
    task = LookupTask(key_dim=8, num_pairs=4)
    runs = []
    for _ in range(2):
        torch.manual_seed(1)
        runs.append(train_lookup(make_lookup_model("dot", 8), task, steps=5, lr=0.1, seed=3, optimizer="sgd"))
    assert runs[0] == runs[1]


def test_evaluation_accuracy_uses_the_largest_weight():
    task = LookupTask(key_dim=4, num_pairs=3, noise=0.0)
    batch = task.sample(64, torch.Generator().manual_seed(0))
    model = make_lookup_model("scaled_dot", 4)
    with torch.no_grad():
        model.query_proj.weight.copy_(task.rotation.T * 50.0)  # undo R and sharpen: the oracle rule
    result = evaluate_lookup(model, batch)
    assert result["accuracy"] == 1.0 and result["mse"] < 1e-3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(steps=0), "steps"),
        (dict(steps=1, lr=0.0), "lr"),
        (dict(steps=1, batch_size=0), "batch_size"),
        (dict(steps=1, optimizer="rmsprop"), "optimizer"),
    ],
)
def test_bad_training_arguments_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_lookup(make_lookup_model("dot", 4), LookupTask(key_dim=4), **kwargs)


def test_training_needs_a_lookup_model_and_task():
    with pytest.raises(TypeError, match="LookupModel"):
        train_lookup(torch.nn.Linear(4, 4), LookupTask(key_dim=4), steps=1)
    with pytest.raises(TypeError, match="LookupTask"):
        train_lookup(make_lookup_model("dot", 4), "task", steps=1)
