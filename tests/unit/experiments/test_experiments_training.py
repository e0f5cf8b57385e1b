"""companion.book.experiments.training: the one training loop of the chapters' small models and its schedule."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from companion.book.experiments.training import fit, warmup_cosine, warmup_cosine_schedule


def regression_data(seed: int = 0, rows: int = 64):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 5, generator=generator)
    y = x @ torch.randn(5, 2, generator=generator) + 0.1 * torch.randn(rows, 2, generator=generator)
    return x, y


def linear_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Linear(5, 2)


def random_rows(x, y, batch_size=8):
    def draw(generator):
        rows = torch.randint(0, x.shape[0], (batch_size,), generator=generator)
        return x[rows], y[rows]

    return draw


def mse(model, batch):
    inputs, targets = batch
    return F.mse_loss(model(inputs), targets)


def test_fit_is_the_plain_loop_step_for_step():
    """The same Adam, schedule, clipping and batch draws written out by hand give bit-identical losses and weights."""
    x, y = regression_data()
    steps, warmup = 12, 3
    model = linear_model()
    losses = fit(
        model,
        random_rows(x, y),
        mse,
        steps,
        lr=0.05,
        seed=7,
        betas=(0.9, 0.98),
        schedule=warmup_cosine_schedule(warmup, steps),
        clip_norm=0.5,
    )

    reference = linear_model()
    generator = torch.Generator().manual_seed(7)
    optimizer = torch.optim.Adam(reference.parameters(), lr=0.05, betas=(0.9, 0.98))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, steps))
    expected = []
    for _ in range(steps):
        loss = mse(reference, random_rows(x, y)(generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(reference.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        expected.append(loss.item())

    assert losses == expected
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
    with torch.no_grad():
        assert F.mse_loss(model(x), y) < F.mse_loss(linear_model()(x), y)  # and it learns


def test_the_seed_fixes_the_batches_and_another_seed_changes_them():
    x, y = regression_data()
    runs = [fit(linear_model(), random_rows(x, y), mse, 5, lr=0.01, seed=seed) for seed in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_sgd_with_momentum_matches_torch_sgd():
    x, y = regression_data()
    model = linear_model()
    losses = fit(model, random_rows(x, y), mse, 6, lr=0.1, optimizer="sgd", momentum=0.5, seed=3)
    reference = linear_model()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.5)
    generator = torch.Generator().manual_seed(3)
    expected = []
    for _ in range(6):
        loss = mse(reference, random_rows(x, y)(generator))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        expected.append(loss.item())
    assert losses == expected


def test_an_iterable_of_batches_is_used_in_order_and_must_last():
    x, y = regression_data()
    batches = [(x[i : i + 8], y[i : i + 8]) for i in range(0, 32, 8)]
    seen = []

    def recording_loss(model, batch):
        seen.append(batch[0])
        return mse(model, batch)

    assert len(fit(linear_model(), iter(batches), recording_loss, 4, lr=0.01)) == 4
    assert all(a is b[0] for a, b in zip(seen, batches))
    with pytest.raises(ValueError, match=r"batches ran out after 4 batches, but steps=5"):
        fit(linear_model(), batches, mse, 5, lr=0.01)


def test_the_model_trains_in_train_mode_and_is_left_in_eval_mode():
    x, y = regression_data()
    modes = []

    def loss_recording_mode(model, batch):
        modes.append(model.training)
        return mse(model, batch)

    model = linear_model().eval()
    fit(model, random_rows(x, y), loss_recording_mode, 3, lr=0.01)
    assert modes == [True, True, True]
    assert not model.training


def test_clip_norm_bounds_every_update():
    """With plain SGD (lr 1, no momentum) the update is the clipped gradient, so its norm is at most clip_norm."""
    x, y = regression_data()
    model = linear_model()
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    fit(
        model, random_rows(x, y), lambda m, b: 100 * mse(m, b), 1, lr=1.0, optimizer="sgd", momentum=0.0, clip_norm=0.01
    )
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert 0 < float((after - before).norm()) <= 0.01 + 1e-6


def test_seed_global_rng_makes_dropout_reproducible():
    x, y = regression_data()

    def dropout_model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.5), nn.Linear(16, 2))

    runs = []
    for noise in (11, 12):
        torch.manual_seed(noise)  # a different global state before each run
        runs.append(fit(dropout_model(), random_rows(x, y), mse, 4, lr=0.01, seed=5, seed_global_rng=True))
    assert runs[0] == runs[1]
    torch.manual_seed(13)
    assert fit(dropout_model(), random_rows(x, y), mse, 4, lr=0.01, seed=5) != runs[0]


def test_adam_eps_reaches_the_optimizer():
    """A huge eps turns Adam's step into about lr * m / eps, so the weights barely move."""
    x, y = regression_data()
    model = linear_model()
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    fit(model, random_rows(x, y), mse, 3, lr=0.1, eps=1e6)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert 0 < float((after - before).abs().max()) < 1e-5


def test_on_step_sees_every_step_with_its_loss_and_unclipped_gradient_norm():
    x, y = regression_data()
    seen = []
    losses = fit(
        linear_model(),
        random_rows(x, y),
        mse,
        4,
        lr=0.01,
        seed=2,
        clip_norm=1e-3,
        on_step=lambda step, loss, norm: seen.append((step, loss, norm)),
    )
    assert [s for s, _, _ in seen] == [0, 1, 2, 3]
    assert [loss for _, loss, _ in seen] == losses
    first = linear_model()  # the first step's gradient norm, by hand: before clipping, so far above 1e-3
    mse(first, random_rows(x, y)(torch.Generator().manual_seed(2))).backward()
    expected = float(torch.cat([p.grad.flatten() for p in first.parameters()]).norm())
    assert seen[0][2] == pytest.approx(expected, rel=1e-5) and expected > 1e-3


def test_a_diverged_run_stops_and_records_inf_when_asked():
    x, y = regression_data()
    calls = []

    def loss_that_explodes(model, batch):
        calls.append(len(calls))
        loss = mse(model, batch)
        return loss * float("nan") if len(calls) == 3 else loss

    model = linear_model()
    losses = fit(model, random_rows(x, y), loss_that_explodes, 10, lr=0.01, stop_on_nonfinite=True)
    assert len(losses) == 3 and losses[2] == math.inf and all(math.isfinite(v) for v in losses[:2])
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())  # the NaN was never back-propagated
    assert not model.training
    calls.clear()
    assert math.isnan(fit(linear_model(), random_rows(x, y), loss_that_explodes, 4, lr=0.01)[2])


def test_warmup_cosine_rises_linearly_then_decays_to_the_floor():
    warmup, total = 4, 20
    values = [warmup_cosine(step, warmup, total) for step in range(total + 1)]
    assert values[:warmup] == [0.25, 0.5, 0.75, 1.0]
    assert values[warmup] == 1.0
    assert all(a >= b for a, b in zip(values[warmup:], values[warmup + 1 :]))
    assert math.isclose(values[total], 0.1)
    assert math.isclose(warmup_cosine(12, warmup, total, floor=0.0), 0.5)  # half-way through the cosine
    schedule = warmup_cosine_schedule(warmup, total, floor=0.2)
    assert [schedule(s) for s in range(total + 1)] == [warmup_cosine(s, warmup, total, 0.2) for s in range(total + 1)]


def test_schedule_sets_the_learning_rate_of_each_step(monkeypatch):
    x, y = regression_data()
    used_rates = []
    plain_step = torch.optim.SGD.step

    def recording_step(self, *args, **kwargs):
        used_rates.append(self.param_groups[0]["lr"])
        return plain_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", recording_step)
    fit(linear_model(), random_rows(x, y), mse, 5, lr=0.2, optimizer="sgd", schedule=lambda s: 1.0 / (s + 1))
    assert used_rates == pytest.approx([0.2 / (s + 1) for s in range(5)])


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"model": "not a module"}, TypeError, "model must be a torch.nn.Module, got str"),
        ({"model": nn.ReLU()}, ValueError, "model has no parameters"),
        ({"batches": 3}, TypeError, "batches must be a function"),
        ({"loss_fn": None}, TypeError, "loss_fn must be a callable"),
        ({"steps": 0}, ValueError, "steps"),
        ({"lr": 0.0}, ValueError, "lr must be a positive number, got 0.0"),
        ({"lr": True}, ValueError, "lr must be a positive number"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"seed_global_rng": 1}, TypeError, "seed_global_rng must be True or False, got 1"),
        ({"optimizer": "adamw"}, ValueError, r"optimizer must be one of \['adam', 'sgd'\], got 'adamw'"),
        ({"betas": (0.9,)}, ValueError, "betas must be a pair of numbers in"),
        ({"betas": (0.9, 1.0)}, ValueError, r"betas\[1\] must be a number in \[0, 1\), got 1.0"),
        ({"eps": 0.0}, ValueError, "eps must be a positive number"),
        ({"momentum": -0.1}, ValueError, "momentum must be a non-negative number"),
        ({"schedule": 0.5}, TypeError, "schedule must be None or a callable"),
        ({"clip_norm": 0}, ValueError, "clip_norm must be a positive number"),
        ({"stop_on_nonfinite": "yes"}, TypeError, "stop_on_nonfinite must be True or False, got 'yes'"),
        ({"on_step": 1}, TypeError, "on_step must be None or a callable"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    x, y = regression_data()
    arguments = {"model": linear_model(), "batches": random_rows(x, y), "loss_fn": mse, "steps": 2, "lr": 0.01}
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        fit(**arguments)


def test_a_loss_that_is_not_a_scalar_tensor_is_rejected():
    x, y = regression_data()
    with pytest.raises(TypeError, match=r"loss_fn must return a 0-d tensor, got Tensor of shape \(8, 2\)"):
        fit(linear_model(), random_rows(x, y), lambda m, b: m(b[0]) - b[1], 1, lr=0.01)
    with pytest.raises(TypeError, match="loss_fn must return a 0-d tensor, got float"):
        fit(linear_model(), random_rows(x, y), lambda m, b: 1.0, 1, lr=0.01)


@pytest.mark.parametrize(
    "args, message",
    [
        ((-1, 10), "warmup must be an integer >= 0"),
        ((2.5, 10), "warmup must be an integer >= 0"),
        ((2, 0), "total"),
        ((2, 10, 1.5), r"floor must be a number in \[0, 1\]"),
    ],
)
def test_bad_schedule_settings_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        warmup_cosine_schedule(*args)
