"""Training protocol: schedule, label-smoothed loss, trainer (overfit, copy task, accumulation, limits, NaN)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F
from _copy_model import exact_match

from companion import Transformer, TransformerConfig
from companion.checkpoint import latest_valid_checkpoint, list_checkpoints, load_checkpoint
from companion.data import make_batches, synthetic_pairs
from companion.devices import mps_available, resolve_device
from companion.errors import ConfigError, DeviceUnavailableError, TrainingDivergedError
from companion.train import NoamSchedule, TrainConfig, Trainer, cooldown_factor, label_smoothed_loss, noam_lr

pytestmark = pytest.mark.usefixtures("one_thread")


def small_model(vocab: int = 20, **overrides) -> Transformer:
    settings = dict(
        d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64, dropout=0.0, max_len=32
    )
    settings.update(overrides)
    return Transformer(TransformerConfig(vocab, vocab, **settings))


def copy_batches(n: int = 400, max_tokens: int = 200, seed: int = 0, vocab: int = 20, max_len: int = 8):
    return make_batches(synthetic_pairs("copy", n, max_len=max_len, vocab_size=vocab, seed=seed), max_tokens, seed=seed)


# -- schedule ---------------------------------------------------------------------------------------------
def test_noam_matches_the_formula_and_peaks_at_warmup():
    d_model, warmup = 512, 4000
    for step in (1, 10, 1000, 3999, 4000, 4001, 20000, 100000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert noam_lr(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    values = [noam_lr(s, d_model, warmup) for s in range(1, 12001)]
    assert max(range(len(values)), key=values.__getitem__) + 1 == warmup
    assert values[warmup - 1] == pytest.approx((d_model * warmup) ** -0.5)
    assert all(a < b for a, b in zip(values[: warmup - 1], values[1:warmup]))  # rising during warmup
    assert all(a > b for a, b in zip(values[warmup - 1 : -1], values[warmup:]))  # decaying afterwards
    assert noam_lr(100, 256, 50, factor=2.0) == pytest.approx(2 * noam_lr(100, 256, 50))
    assert noam_lr(0, d_model, warmup) == 0.0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(step=-1, d_model=8), "step"),
        (dict(step=1.5, d_model=8), "step"),
        (dict(step=1, d_model=0), "d_model"),
        (dict(step=1, d_model=8, warmup=0), "warmup"),
        (dict(step=1, d_model=8, factor=0), "factor"),
    ],
)
def test_noam_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        noam_lr(**kwargs)


def logged_training(tmp_path, **config) -> tuple[Trainer, list[dict]]:
    """A small model trained on the copy task with ``config``, one metrics line per step; the trainer and the
    ``train`` lines of its metrics.jsonl."""
    config = TrainConfig(progress=False, device="cpu", log_every=1, **config)
    trainer = Trainer(small_model(), config, copy_batches(), out_dir=tmp_path)
    trainer.train()
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return trainer, [r for r in logged if r["kind"] == "train"]


def test_trainer_steps_follow_the_schedule(tmp_path):
    trainer, train_lines = logged_training(tmp_path, max_steps=7, warmup=4, lr_factor=3.0)
    assert [r["step"] for r in train_lines] == list(range(1, 8))
    for record in train_lines:  # the lr logged at step n is the one the next step will use: noam(n + 1)
        assert record["lr"] == pytest.approx(noam_lr(record["step"] + 1, 32, 4, 3.0))
    for key in ("loss", "nll", "ppl", "tokens_per_s", "epoch", "train_seconds", "time"):
        assert key in train_lines[0]
    for record in train_lines:  # perplexity is exp of the per-token negative log-likelihood
        assert record["ppl"] == pytest.approx(math.exp(record["nll"]), rel=1e-12)
    assert trainer.optimizer.param_groups[0]["betas"] == (0.9, 0.98)
    assert trainer.optimizer.param_groups[0]["eps"] == 1e-9


def test_cooldown_factor_is_one_then_falls_linearly_to_zero():
    assert [cooldown_factor(p, 0.25) for p in (0.0, 0.5, 0.75)] == [1.0, 1.0, 1.0]
    assert cooldown_factor(0.875, 0.25) == pytest.approx(0.5)
    assert cooldown_factor(0.95, 0.25) == pytest.approx(0.2)
    assert cooldown_factor(1.0, 0.25) == 0.0 and cooldown_factor(1.3, 0.25) == 0.0  # a budget overrun stays at 0
    assert cooldown_factor(0.999, 0.0) == 1.0  # no cooldown
    assert cooldown_factor(0.5, 1.0) == pytest.approx(0.5)  # decay over the whole run
    with pytest.raises(ValueError, match="progress"):
        cooldown_factor(-0.1, 0.2)
    with pytest.raises(ValueError, match="cooldown"):
        cooldown_factor(0.5, 1.5)
    with pytest.raises(ValueError, match="cooldown"):
        NoamSchedule(64, 10, cooldown=-0.1)
    with pytest.raises(ConfigError, match="--cooldown"):
        TrainConfig(max_steps=5, cooldown=2.0)


def test_cooldown_brings_the_rate_to_zero_at_the_step_limit(tmp_path):
    _, train_lines = logged_training(tmp_path, max_steps=8, warmup=2, cooldown=0.5)
    lrs = {r["step"]: r["lr"] for r in train_lines}
    for step, lr in lrs.items():  # the lr logged at step n is the next step's: noam(n + 1) x the cooldown at n / 8
        assert lr == pytest.approx(noam_lr(step + 1, 32, 2) * cooldown_factor(step / 8, 0.5))
    assert lrs[3] == pytest.approx(noam_lr(4, 32, 2))  # before the last half: the paper's schedule
    assert lrs[6] == pytest.approx(noam_lr(7, 32, 2) * 0.5)
    assert lrs[8] == 0.0


def test_cooldown_follows_the_nearest_limit():
    batches = copy_batches(n=60, max_tokens=200)
    trainer = Trainer(small_model(), TrainConfig(max_steps=100, max_epochs=2, cooldown=0.5, device="cpu"), batches)
    trainer.state.epoch, trainer.state.batch_index = 1, 0  # half the epochs, 10% of the steps
    assert trainer._budget_progress(10, time_progress=0.0) == pytest.approx(0.5)
    assert trainer._budget_progress(10, time_progress=0.9) == pytest.approx(0.9)  # max_minutes nearer its end
    assert trainer._budget_progress(95, time_progress=0.0) == pytest.approx(0.95)
    timed = Trainer(small_model(), TrainConfig(max_minutes=20, cooldown=0.3, device="cpu"), batches)
    assert timed._time_progress(60.0 * 17) == pytest.approx(0.85)
    assert timed._budget_progress(10_000, timed._time_progress(60.0 * 17)) == pytest.approx(0.85)


def test_resume_inside_the_cooldown_gives_the_same_weights(tmp_path):
    """12 steps straight (a checkpoint at step 6) == a fresh model resumed from step 6 to 12, with the rate
    cooling down over the last 75% of the steps."""
    batches = copy_batches(n=80, max_tokens=120)
    config = dict(max_steps=12, warmup=3, cooldown=0.75, progress=False, device="cpu")
    torch.manual_seed(0)
    straight = small_model(dropout=0.1)
    Trainer(straight, TrainConfig(save_every=6, keep_last=None, **config), batches, out_dir=tmp_path).train()
    torch.manual_seed(5)
    resumed_model = small_model(dropout=0.1)
    resumed = Trainer(resumed_model, TrainConfig(**config), batches, out_dir=tmp_path / "again")
    resumed.load_checkpoint(tmp_path / "checkpoints" / "step_00000006.pt")
    assert resumed.schedule.progress == pytest.approx(0.5)
    resumed.train()
    assert resumed.scheduler.get_last_lr()[0] == 0.0
    for (name, a), b in zip(straight.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


# -- loss -------------------------------------------------------------------------------------------------
def test_label_smoothing_zero_equals_cross_entropy_with_ignore_index():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss_sum, nll_sum, count = label_smoothed_loss(logits, target, smoothing=0.0, pad_id=0)
    reference = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=0, reduction="sum")
    assert int(count) == int((target != 0).sum())
    torch.testing.assert_close(loss_sum, reference)
    torch.testing.assert_close(nll_sum, reference)


def test_label_smoothing_matches_pytorch_and_ignores_padding():
    torch.manual_seed(1)
    logits = torch.randn(4, 6, 9, requires_grad=True)
    target = torch.randint(1, 9, (4, 6))
    target[:, 4:] = 0
    loss_sum, nll_sum, _ = label_smoothed_loss(logits, target, smoothing=0.1, pad_id=0)
    reference = F.cross_entropy(
        logits.reshape(-1, 9), target.reshape(-1), ignore_index=0, label_smoothing=0.1, reduction="sum"
    )
    torch.testing.assert_close(loss_sum, reference)
    assert loss_sum > nll_sum  # smoothing penalises confident predictions
    loss_sum.backward()
    assert logits.grad[:, 4:].abs().max() == 0  # padded positions get no gradient
    assert logits.grad[:, :4].abs().max() > 0


def test_label_smoothing_rejects_bad_input():
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothed_loss(torch.randn(2, 3, 5), torch.ones(2, 3, dtype=torch.long), smoothing=1.0)
    with pytest.raises(ValueError, match="logits"):
        label_smoothed_loss(torch.randn(2, 4, 5), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="target"):
        label_smoothed_loss(torch.randn(2, 3, 5), torch.ones(2, 3))


# -- learning ---------------------------------------------------------------------------------------------
def test_overfits_one_batch_to_near_zero_loss():
    torch.manual_seed(0)
    pairs = synthetic_pairs("reverse", 8, min_len=3, max_len=7, vocab_size=20, seed=3)
    batch = make_batches(pairs, 10**6, shuffle=False)
    assert len(batch) == 1
    model = small_model(d_model=64, num_heads=4, d_ff=128)
    config = TrainConfig(max_steps=150, warmup=50, lr_factor=0.5, label_smoothing=0.0, progress=False, device="cpu")
    trainer = Trainer(model, config, batch)
    summary = trainer.train()
    assert summary["steps"] == 150 and summary["stop_reason"] == "max_steps"
    result = trainer.evaluate(batch)
    assert result["valid_nll"] < 0.005, result


@pytest.mark.slow
def test_copy_task_reaches_99_percent_exact_match_within_a_step_budget():
    # A step budget, not a wall-clock one, so that a loaded machine cannot fail the test. On this seed the model
    # passes 99% after 500 steps (~40 s on one idle CPU thread); 800 leaves room for platform differences.
    torch.manual_seed(0)
    train = make_batches(synthetic_pairs("copy", 20000, max_len=8, vocab_size=20, seed=0), 800, seed=0)
    held_out = synthetic_pairs("copy", 500, max_len=8, vocab_size=20, seed=123)
    model = Transformer(
        TransformerConfig(
            20,
            20,
            d_model=64,
            num_heads=2,
            num_encoder_layers=2,
            num_decoder_layers=2,
            d_ff=128,
            dropout=0.0,
            max_len=32,
        )
    )
    config = TrainConfig(max_steps=300, warmup=100, lr_factor=0.5, label_smoothing=0.0, progress=False, device="cpu")
    trainer = Trainer(model, config, train)
    accuracy = 0.0
    while trainer.state.step < 800:
        trainer.train()
        accuracy = exact_match(model, held_out)
        if accuracy >= 0.99:
            break
        config.max_steps += 100
    assert accuracy >= 0.99, f"exact match {accuracy:.3f} after {trainer.state.step} steps"


def test_gradient_accumulation_equals_one_big_batch():
    torch.manual_seed(0)
    pairs = synthetic_pairs("copy", 12, min_len=2, max_len=9, vocab_size=20, seed=5)
    first, second = make_batches(pairs[:6], 10**6, shuffle=False)[0], make_batches(pairs[6:], 10**6, shuffle=False)[0]
    whole = make_batches(pairs, 10**6, shuffle=False)
    assert len(whole) == 1 and first.src.shape[1] != second.src.shape[1]
    reference = small_model()
    twin = small_model()
    twin.load_state_dict(reference.state_dict())
    big = Trainer(reference, TrainConfig(max_steps=1, warmup=1, progress=False, device="cpu"), whole)
    big.train()
    accumulated = Trainer(
        twin, TrainConfig(max_steps=1, warmup=1, accum_steps=2, progress=False, device="cpu"), [first, second]
    )
    accumulated.train()
    # Adam's first moment after one step is 0.1 * gradient: the gradients must agree.
    for (name, p), q in zip(reference.named_parameters(), twin.parameters()):
        torch.testing.assert_close(
            big.optimizer.state[p]["exp_avg"], accumulated.optimizer.state[q]["exp_avg"], atol=1e-8, rtol=1e-4, msg=name
        )
        if not name.endswith("k_proj.bias"):  # its true gradient is 0 (softmax ignores it): Adam amplifies noise
            torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=name)
    assert not torch.equal(reference.generator.weight, small_model().generator.weight)


# -- limits, evaluation, logging --------------------------------------------------------------------------
def test_time_limit_and_epoch_limit_stop_training():
    batches = copy_batches(n=60, max_tokens=200)
    trainer = Trainer(small_model(), TrainConfig(max_minutes=1e-6, progress=False, device="cpu"), batches)
    summary = trainer.train()
    assert summary["stop_reason"] == "max_minutes" and summary["steps"] == 1
    trainer = Trainer(small_model(), TrainConfig(max_epochs=2, progress=False, device="cpu"), batches)
    summary = trainer.train()
    assert summary["stop_reason"] == "max_epochs" and summary["steps"] == 2 * len(batches)


def test_periodic_validation_and_progress_bar(tmp_path, capsys):
    train, valid = copy_batches(seed=0), copy_batches(n=50, seed=1)
    config = TrainConfig(max_steps=6, eval_every=3, log_every=2, device="cpu", progress=True)
    Trainer(small_model(), config, train, valid, out_dir=tmp_path).train()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [3, 6]
    assert all(r["valid_ppl"] == pytest.approx(math.exp(r["valid_nll"])) for r in records if r["kind"] == "valid")
    err = capsys.readouterr().err
    assert "loss=" in err and "lr=" in err and "tok_s=" in err
    Trainer(small_model(), TrainConfig(max_steps=2, device="cpu", progress=False), train).train()
    assert "tok_s=" not in capsys.readouterr().err


def test_nan_loss_stops_with_the_step_and_keeps_weights():
    model = small_model()
    trainer = Trainer(model, TrainConfig(max_steps=3, progress=False, device="cpu"), copy_batches())
    trainer.train()
    with torch.no_grad():
        model.encoder.layers[0].ffn.linear1.weight[0, 0] = float("nan")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.config.max_steps = 10
    with pytest.raises(TrainingDivergedError, match=r"nan at step 4 .*--lr-factor"):
        trainer.train()
    assert trainer.state.step == 3
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], equal_nan=True)


# -- configuration and devices ---------------------------------------------------------------------------
def test_train_config_validates():
    with pytest.raises(ConfigError, match=r"set a limit: max_steps \(--max-steps\), max_minutes"):
        TrainConfig()
    with pytest.raises(ValueError, match="accum_steps"):
        TrainConfig(max_steps=1, accum_steps=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        TrainConfig(max_steps=1, label_smoothing=1.5)
    config = TrainConfig(max_steps=5, clip_grad=1.0)
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({"max_steps": 1, "learning_rate": 3})


def test_trainer_rejects_bad_arguments():
    with pytest.raises(TypeError, match="model"):
        Trainer(torch.nn.Linear(2, 2), TrainConfig(max_steps=1), copy_batches())
    with pytest.raises(ValueError, match="train_batches"):
        Trainer(small_model(), TrainConfig(max_steps=1), [])
    with pytest.raises(TypeError, match=r"train_batches\[0\]"):
        Trainer(small_model(), TrainConfig(max_steps=1), [torch.zeros(2, 3)])


def test_device_resolution():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    not_a_device = "device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got 'tpu'"
    with pytest.raises(ConfigError, match=f"^{re.escape(not_a_device)}$"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailableError, match="CUDA is not available.*--device cpu"):
            resolve_device("cuda")


def test_device_names_of_the_wrong_type_or_of_devices_a_run_cannot_use_are_refused():
    with pytest.raises(
        TypeError, match=re.escape("device must be a string such as 'auto', 'cpu', 'cuda' or 'mps', got 0")
    ):
        resolve_device(0)  # type: ignore[arg-type]
    # "meta" is a torch device, but not one a run can compute on
    not_for_a_run = "device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got 'meta'"
    with pytest.raises(ConfigError, match=f"^{re.escape(not_for_a_run)}$"):
        resolve_device("meta")


@pytest.mark.skipif(mps_available(), reason="Apple's MPS backend is available on this machine")
def test_mps_where_it_is_not_available_is_a_device_unavailable_error():
    message = "device 'mps' was requested, but Apple's MPS backend is not available here"
    with pytest.raises(DeviceUnavailableError, match=f"^{re.escape(message)}$"):
        resolve_device("mps")


def test_gradient_clipping_bounds_the_gradient_norm():
    torch.manual_seed(0)
    batch = copy_batches()[:1]
    clipped, free = small_model(), small_model()
    free.load_state_dict(clipped.state_dict())

    def first_moment_norm(trainer: Trainer) -> float:
        # After one step Adam's first moment is (1 - beta1) * gradient, so it reveals the gradient used.
        moments = [s["exp_avg"] for s in trainer.optimizer.state.values()]
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(m) for m in moments]))) / 0.1

    a = Trainer(clipped, TrainConfig(max_steps=1, warmup=1, clip_grad=1e-3, progress=False, device="cpu"), batch)
    a.train()
    b = Trainer(free, TrainConfig(max_steps=1, warmup=1, progress=False, device="cpu"), batch)
    b.train()
    assert first_moment_norm(a) == pytest.approx(1e-3, rel=1e-3)
    assert first_moment_norm(b) > 0.1


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_minutes", float("inf")),
        ("lr_factor", float("nan")),
        ("clip_grad", float("inf")),
        ("label_smoothing", float("nan")),
        ("eps", float("nan")),
        ("save_every_minutes", float("nan")),
    ],
)
def test_train_config_rejects_non_finite_numbers(field, value):
    with pytest.raises(ConfigError, match=rf"{field}( \(--[a-z-]+\))? must be a finite number"):
        TrainConfig(**{"max_steps": 1, field: value})


def test_train_config_options_declare_their_flags_and_check_their_types():
    with pytest.raises(ConfigError, match=r"bf16 \(--no-bf16\) must be True or False, got 'yes'"):
        TrainConfig(max_steps=1, bf16="yes")
    with pytest.raises(ConfigError, match=r"cpu_bf16 \(--cpu-bf16\) must be True or False, got 1"):
        TrainConfig(max_steps=1, cpu_bf16=1)
    with pytest.raises(ConfigError, match=r"device \(--device\) must be a string"):
        TrainConfig(max_steps=1, device=0)


def test_the_loss_names_a_target_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"target holds token id 7, outside the vocabulary \[0, 5\)"):
        label_smoothed_loss(torch.zeros(1, 2, 5), torch.tensor([[1, 7]]))


# -- divergence: a diverged run never leaves a "good" checkpoint ------------------------------------------------
def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _diverging_trainer(tmp_path, at_step: int, **config) -> Trainer:
    """A trainer whose optimizer step number ``at_step`` turns one weight into inf (a stand-in for a huge
    learning rate, deterministic and fast)."""
    trainer = Trainer(
        small_model(),
        TrainConfig(max_steps=10, warmup=4, progress=False, device="cpu", **config),
        copy_batches(200),
        out_dir=tmp_path,
    )
    calls = []

    def after_step(optimizer, args, kwargs):
        calls.append(1)
        if len(calls) == at_step:
            with torch.no_grad():
                next(trainer.model.parameters()).view(-1)[0] = float("inf")

    trainer.optimizer.register_step_post_hook(after_step)
    return trainer


def test_an_update_that_makes_weights_nonfinite_stops_and_saves_nothing_from_them(tmp_path):
    trainer = _diverging_trainer(tmp_path, at_step=3, save_every=1)
    with pytest.raises(TrainingDivergedError, match="step 3") as caught:
        trainer.train()
    assert "step_00000002.pt" in str(caught.value) and "verified" in str(caught.value)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_00000001.pt", "step_00000002.pt"]
    for path in list_checkpoints(tmp_path / "checkpoints"):
        load_checkpoint(path)  # every file on disk loads, and loading checks that every tensor is finite
    with pytest.raises(TrainingDivergedError, match="inf or nan"):
        trainer.save_checkpoint()  # not even on request


def test_a_nonfinite_gradient_is_caught_before_the_update(tmp_path):
    trainer = Trainer(
        small_model(),
        TrainConfig(max_steps=5, warmup=4, progress=False, device="cpu", save_every=1),
        copy_batches(200),
        out_dir=tmp_path,
    )
    calls = []

    def poison(grad: torch.Tensor) -> torch.Tensor:  # the loss stays finite; one gradient does not
        calls.append(1)
        return grad * float("inf") if len(calls) == 2 else grad

    first = next(trainer.model.parameters())
    first.register_hook(poison)
    before = []
    trainer.optimizer.register_step_pre_hook(lambda optimizer, args, kwargs: before.append(_weights(trainer.model)))
    with pytest.raises(TrainingDivergedError, match="gradient norm became (inf|nan) at step 2") as caught:
        trainer.train()
    assert "not applied" in str(caught.value) and "step_00000001.pt" in str(caught.value)
    assert trainer.state.step == 1 and len(before) == 1  # the second update never ran
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_the_latest_good_checkpoint_is_verified_not_just_the_newest_file(tmp_path):
    trainer = _diverging_trainer(tmp_path, at_step=4, save_every=1)
    folder = tmp_path / "checkpoints"
    real_save = trainer.save_checkpoint

    def save_then_damage(*args, **kwargs):
        path = real_save(*args, **kwargs)
        if path.name == "step_00000003.pt":
            path.write_bytes(path.read_bytes()[:100])  # torn by a disk fault after the write
        return path

    trainer.save_checkpoint = save_then_damage
    with pytest.raises(TrainingDivergedError) as caught:
        trainer.train()
    message = str(caught.value)
    assert str(folder / "step_00000002.pt") in message and "step_00000003.pt" not in message
    assert "passed over" in message
    assert latest_valid_checkpoint(folder)[0] == folder / "step_00000002.pt"


def test_a_nonfinite_validation_loss_stops_without_a_final_checkpoint(tmp_path, monkeypatch):
    trainer = Trainer(
        small_model(),
        TrainConfig(max_steps=2, warmup=4, progress=False, device="cpu"),
        copy_batches(200),
        copy_batches(20),
        out_dir=tmp_path,
    )

    def overflowing(batches=None, log=False):
        trainer.state.last_valid = {"valid_loss": math.inf, "valid_nll": math.inf, "valid_ppl": math.inf}
        return trainer.state.last_valid

    monkeypatch.setattr(trainer, "evaluate", overflowing)
    with pytest.raises(TrainingDivergedError, match="validation loss is inf"):
        trainer.train()
    assert list_checkpoints(tmp_path / "checkpoints") == []


# -- the loss's closed-form gradient ------------------------------------------------------------------------
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_gradient_matches_autograd_of_its_formula(smoothing):
    """The hand-written backward against autograd through the formula, both outputs, padding included."""
    torch.manual_seed(2)
    logits = torch.randn(3, 7, 13, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 13, (3, 7))
    target[1, 4:] = 0
    target[2, :] = 0  # a row of padding only
    loss_sum, nll_sum, _ = label_smoothed_loss(logits, target, smoothing=smoothing, pad_id=0)
    weights = (0.7, -1.3)  # gradients flowing into both outputs at once
    (got,) = torch.autograd.grad(weights[0] * loss_sum + weights[1] * nll_sum, logits)
    log_probs = F.log_softmax(logits, dim=-1)
    keep = target != 0
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~keep, 0.0).sum()
    uniform = -log_probs.mean(dim=-1).masked_fill(~keep, 0.0).sum()
    reference = (1 - smoothing) * nll + smoothing * uniform
    (expected,) = torch.autograd.grad(weights[0] * reference + weights[1] * nll, logits)
    torch.testing.assert_close(loss_sum, reference)
    torch.testing.assert_close(got, expected)
    assert got[2].abs().max() == 0
    assert torch.autograd.gradcheck(lambda x: label_smoothed_loss(x, target, smoothing, 0)[:2], (logits,))


def test_label_smoothed_loss_gradient_keeps_the_logits_dtype():
    logits = torch.randn(2, 3, 11).to(torch.bfloat16).requires_grad_()
    target = torch.tensor([[1, 2, 0], [3, 0, 0]])
    loss_sum, _, _ = label_smoothed_loss(logits, target)
    assert loss_sum.dtype == torch.float32
    loss_sum.backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_bfloat16_logits_go_through_cache_sized_chunks_with_the_whole_array_numbers(monkeypatch, smoothing):
    """16-bit logits on CPU are taken a few rows at a time (here forced to 2 rows a chunk, 4 chunks): the loss
    and the gradient equal, to the bit, the whole-array computation on the float32 copy of the same logits, and
    the gradient comes back in bfloat16 with padding rows at zero."""
    import companion.train.loss as loss_module

    torch.manual_seed(3)
    logits = torch.randn(2, 4, 13).to(torch.bfloat16)
    target = torch.randint(1, 13, (2, 4))
    target[1, 2:] = 0
    monkeypatch.setattr(loss_module, "_CHUNK_SCORES", 2 * 13)
    assert loss_module._rows_per_chunk(logits.reshape(-1, 13)) == 2
    assert loss_module._rows_per_chunk(logits.reshape(-1, 13).float()) == 8  # float32: one chunk, as before
    results = []
    for x in (logits.clone().requires_grad_(), logits.float().requires_grad_()):
        loss_sum, nll_sum, _ = label_smoothed_loss(x, target, smoothing=smoothing, pad_id=0)
        (0.7 * loss_sum - 1.3 * nll_sum).backward()
        results.append((loss_sum.detach(), nll_sum.detach(), x.grad))
    (chunked_loss, chunked_nll, chunked_grad), (loss, nll, grad) = results
    assert torch.equal(chunked_loss, loss) and torch.equal(chunked_nll, nll)
    assert chunked_grad.dtype == torch.bfloat16
    assert torch.equal(chunked_grad, grad.to(torch.bfloat16))
    assert chunked_grad[1, 2:].abs().max() == 0 and chunked_grad[0].abs().max() > 0


def test_cpu_bf16_trains_the_forward_pass_under_autocast_and_keeps_float32_weights():
    """TrainConfig(cpu_bf16=True) on CPU: the output layer's products come out in bfloat16, the weights stay
    float32, and the copy task learns about as fast as in float32 (same seed and steps); off by default."""
    assert TrainConfig(max_steps=1).cpu_bf16 is False
    seen: dict[str, torch.dtype] = {}

    def record(module, inputs, output) -> None:
        seen.setdefault("logits", output.dtype)

    final = {}
    for cpu_bf16 in (False, True):
        torch.manual_seed(0)
        model = small_model()
        if cpu_bf16:
            model.generator.register_forward_hook(record)
        batches = copy_batches(n=200)
        config = TrainConfig(max_steps=100, cpu_bf16=cpu_bf16, device="cpu", warmup=30, progress=False)
        trainer = Trainer(model, config, batches, batches[:2])
        first = trainer.evaluate()["valid_nll"]
        trainer.train()
        final[cpu_bf16] = trainer.evaluate()["valid_nll"]
        assert final[cpu_bf16] < first - 0.7  # learned, in nats per token
    assert seen["logits"] == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert abs(final[True] - final[False]) < 0.3, final
