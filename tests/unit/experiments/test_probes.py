"""companion.book.experiments.probes: the synthetic tasks compute what they promise, the models have the stated
shapes and a
parameter count independent of the number of heads, training reduces the loss, and the mixing bound holds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from companion.book.experiments.probes import (
    PositionalMixer,
    SequenceClassifier,
    accuracy,
    fit,
    mixing_error_bound,
    offset_mixing_task,
    relative_error,
    two_pointer_task,
)


# -- two pointers ------------------------------------------------------------------------------------------------
def test_two_pointer_labels_are_the_ordered_pair_of_pointed_values():
    task = two_pointer_task(500, seq_len=5, num_values=4, seed=3)
    assert task.tokens.shape == (500, 6) and task.labels.shape == (500,) and task.pointers.shape == (500, 2)
    assert task.vocab_size == 4 + 5 * 4 and task.num_classes == 16
    for row in range(500):
        p1, p2 = task.pointers[row].tolist()
        values = task.tokens[row, :5]
        assert p1 != p2
        assert task.labels[row] == values[p1] * 4 + values[p2]
        assert task.tokens[row, -1] == task.query_id(p1, p2)
    assert int(task.tokens[:, :5].max()) < 4 <= int(task.tokens[:, 5].min())


def test_two_pointer_query_ids_are_distinct_and_all_pairs_occur():
    task = two_pointer_task(4000, seq_len=4, num_values=3, seed=0)
    ids = {task.query_id(a, b) for a in range(4) for b in range(4) if a != b}
    assert ids == set(range(3, task.vocab_size))
    assert set(task.tokens[:, -1].tolist()) == ids
    assert len({tuple(p) for p in task.pointers.tolist()}) == 12


def test_two_pointer_task_is_reproducible_and_seed_dependent():
    a, b, c = (two_pointer_task(50, seed=s) for s in (1, 1, 2))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_classifier_shapes_and_parameter_count_do_not_depend_on_heads(heads):
    model = SequenceClassifier(vocab_size=30, num_classes=7, d_model=16, num_heads=heads, num_layers=2, max_len=9)
    reference = SequenceClassifier(vocab_size=30, num_classes=7, d_model=16, num_heads=1, num_layers=2, max_len=9)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    logits, maps = model(torch.randint(0, 30, (3, 9)), need_weights=True)
    assert logits.shape == (3, 7) and len(maps) == 2 and maps[0].shape == (3, heads, 9, 9)


def test_classifier_learns_the_two_pointer_task():
    torch.manual_seed(0)
    train, test = two_pointer_task(4000, 4, 3, seed=0), two_pointer_task(500, 4, 3, seed=1)
    model = SequenceClassifier(train.vocab_size, train.num_classes, d_model=16, num_heads=2, max_len=5)
    before = accuracy(model, test.tokens, test.labels)
    losses = fit(model, train.tokens, train.labels, F.cross_entropy, steps=150, batch_size=64, lr=1e-2)
    assert len(losses) == 150 and sum(losses[-20:]) < 0.5 * sum(losses[:20])
    assert accuracy(model, test.tokens, test.labels) > max(0.8, before + 0.3)


# -- offset mixing -----------------------------------------------------------------------------------------------
def test_offset_mixing_targets_take_each_group_from_its_offset():
    x, y = offset_mixing_task(3, seq_len=5, d_model=6, offsets=[-1, 2, 0], seed=0)
    assert x.shape == y.shape == (3, 5, 6)
    for i in range(5):
        torch.testing.assert_close(y[:, i, 0:2], x[:, (i - 1) % 5, 0:2])
        torch.testing.assert_close(y[:, i, 2:4], x[:, (i + 2) % 5, 2:4])
        torch.testing.assert_close(y[:, i, 4:6], x[:, i, 4:6])


def test_mixing_error_bound_values():
    assert mixing_error_bound(1, 2) == 0.5
    assert mixing_error_bound(1, 4) == 0.75 and mixing_error_bound(3, 4) == 0.25
    assert mixing_error_bound(4, 4) == 0.0 and mixing_error_bound(16, 4) == 0.0


def test_positional_mixer_attention_does_not_depend_on_the_input():
    mixer = PositionalMixer(seq_len=6, d_model=8, num_heads=2)
    with torch.no_grad():
        out_a, w_a = mixer(torch.randn(2, 6, 8), need_weights=True)
        out_b, w_b = mixer(torch.randn(2, 6, 8), need_weights=True)
    assert out_a.shape == (2, 6, 8) and w_a.shape == (2, 2, 6, 6)
    torch.testing.assert_close(w_a, w_b)
    assert not torch.allclose(out_a, out_b)


@pytest.mark.parametrize("heads", [1, 2])
def test_one_head_cannot_beat_the_bound_and_two_heads_reach_zero(heads):
    """The bound max(0, 1 - h/k) on a two-offset task: one head stays near 1/2, two heads get close to 0."""
    torch.manual_seed(0)
    x, y = offset_mixing_task(2048, seq_len=6, d_model=8, offsets=[-1, 1], seed=0)
    x_test, y_test = offset_mixing_task(512, seq_len=6, d_model=8, offsets=[-1, 1], seed=1)
    mixer = PositionalMixer(seq_len=6, d_model=8, num_heads=heads)
    fit(mixer, x, y, F.mse_loss, steps=300, batch_size=64, lr=2e-2)
    with torch.no_grad():
        error = relative_error(mixer(x_test), y_test)
    bound = mixing_error_bound(heads, 2)
    assert error > bound - 0.05
    assert error < bound + 0.05


# -- bad input ---------------------------------------------------------------------------------------------------
def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="seq_len must be at least 2"):
        two_pointer_task(10, seq_len=1)
    with pytest.raises(ValueError, match="num_examples must be a positive integer, got 0"):
        two_pointer_task(0)
    task = two_pointer_task(5, seq_len=4)
    with pytest.raises(ValueError, match="p1 and p2 must differ"):
        task.query_id(2, 2)
    with pytest.raises(ValueError, match=r"p2 \(a position of seq_len=4\) must be an integer in \[0, 3\], got 4"):
        task.query_id(0, 4)
    with pytest.raises(ValueError, match="offsets must be distinct modulo seq_len=4"):
        offset_mixing_task(2, 4, 8, [1, 5])
    with pytest.raises(ValueError, match=r"the number of offsets \(3\) must divide d_model=8"):
        offset_mixing_task(2, 4, 8, [0, 1, 2])
    with pytest.raises(ValueError, match="d_model must be divisible by num_heads"):
        SequenceClassifier(10, 3, d_model=16, num_heads=3)
    mixer = PositionalMixer(5, 8, 2)
    with pytest.raises(ValueError, match=r"x must have seq_len=5 positions, got shape \(1, 4, 8\)"):
        mixer(torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match="inputs and targets must hold the same positive number of rows"):
        fit(mixer, torch.randn(3, 5, 8), torch.randn(2, 5, 8), F.mse_loss, steps=1)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        fit(mixer, torch.randn(3, 5, 8), torch.randn(3, 5, 8), F.mse_loss, steps=1, lr=0)
    with pytest.raises(ValueError, match="prediction and target must have the same shape"):
        relative_error(torch.zeros(2), torch.zeros(3))
