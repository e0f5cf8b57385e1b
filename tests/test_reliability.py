"""Reliability (issue 12): a diverged run never leaves a "good" checkpoint, and every bad input gets a clear error.

Grouped by the issue's headings: High (divergence and non-finite numbers), Medium (line alignment, run-folder
lock, corrupt data, resume with other data), Low (small failures and silent surprises) and the defaults a user
meets. No test depends on wall-clock time: limits are step counts, clocks are faked or monkeypatched.
"""

from __future__ import annotations

import math

import pytest
import torch

from companion import Transformer, TransformerConfig
from companion.checkpoint import (
    _digest,
    atomic_save,
    latest_valid_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint,
)
from companion.cli import main
from companion.data import make_batches, synthetic_pairs
from companion.decode import beam_search, greedy_decode
from companion.errors import CheckpointError, ConfigError, NonFiniteOutputError, TrainingDivergedError
from companion.runs import RunConfig, TranslateConfig
from companion.train import TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

COPY = ["train", "--task", "copy", "--preset", "tiny", "--num-examples", "300", "--max-tokens", "200",
        "--no-progress", "--device", "cpu", "--threads", "1"]


def small_model(vocab: int = 20) -> Transformer:
    return Transformer(TransformerConfig(vocab, vocab, d_model=32, num_heads=2, num_encoder_layers=1,
                                         num_decoder_layers=1, d_ff=64, dropout=0.0, max_len=32))


def copy_batches(n: int = 200, max_tokens: int = 200, vocab: int = 20):
    return make_batches(synthetic_pairs("copy", n, max_len=8, vocab_size=vocab, seed=0), max_tokens, seed=0)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


# ========================================================================================================
# High: divergence writes non-finite checkpoints and calls them good
# ========================================================================================================
FLOAT_OPTIONS = [("lr_factor", "--lr-factor", 1e6), ("max_minutes", "--max-minutes", 1e30),
                 ("clip_grad", "--clip-grad", 1e30), ("save_every_minutes", "--save-every-minutes", 1e30)]


@pytest.mark.parametrize("field, flag, absurd", FLOAT_OPTIONS)
@pytest.mark.parametrize("bad", ["inf", "nan", "-inf", "absurd"])
def test_inf_nan_and_absurd_float_options_are_refused_everywhere(field, flag, absurd, bad, tmp_path, capsys):
    value = absurd if bad == "absurd" else float(bad)
    with pytest.raises(ConfigError, match=field):
        TrainConfig(max_steps=1, **{field: value})
    with pytest.raises(ConfigError, match=flag):
        RunConfig(max_steps=1, **{field: value})
    assert main([*COPY, "--max-steps", "1", f"{flag}={value}", "--out", str(tmp_path / "run")]) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e30])
def test_alpha_must_be_finite_and_sensible(value, tiny_model, tokens):
    with pytest.raises(ConfigError, match="--alpha"):
        TranslateConfig(checkpoint="x.pt", alpha=value)
    if not math.isfinite(value):
        with pytest.raises(ValueError, match="alpha"):
            beam_search(tiny_model(), tokens(1, 3, 23), alpha=value)


def _diverging_trainer(tmp_path, at_step: int, **config) -> Trainer:
    """A trainer whose optimizer step number ``at_step`` turns one weight into inf (a stand-in for a huge
    learning rate, deterministic and fast)."""
    trainer = Trainer(small_model(), TrainConfig(max_steps=10, warmup=4, progress=False, device="cpu", **config),
                      copy_batches(), out_dir=tmp_path)
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
    trainer = Trainer(small_model(), TrainConfig(max_steps=5, warmup=4, progress=False, device="cpu", save_every=1),
                      copy_batches(), out_dir=tmp_path)
    calls = []

    def poison(grad: torch.Tensor) -> torch.Tensor:  # the loss stays finite; one gradient does not
        calls.append(1)
        return grad * float("inf") if len(calls) == 2 else grad

    first = next(trainer.model.parameters())
    first.register_hook(poison)
    before = []
    trainer.optimizer.register_step_pre_hook(lambda optimizer, args, kwargs: before.append(weights(trainer.model)))
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
    trainer = Trainer(small_model(), TrainConfig(max_steps=2, warmup=4, progress=False, device="cpu"),
                      copy_batches(), copy_batches(20), out_dir=tmp_path)

    def overflowing(batches=None, log=False):
        trainer.state.last_valid = {"valid_loss": math.inf, "valid_nll": math.inf, "valid_ppl": math.inf}
        return trainer.state.last_valid

    monkeypatch.setattr(trainer, "evaluate", overflowing)
    with pytest.raises(TrainingDivergedError, match="validation loss is inf"):
        trainer.train()
    assert list_checkpoints(tmp_path / "checkpoints") == []


def test_a_checkpoint_with_nonfinite_weights_is_never_written_and_refused_on_load(tmp_path):
    model = small_model()
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="inf or nan"):
        save_checkpoint(tmp_path / "bad.pt", model=model, step=1)
    assert not (tmp_path / "bad.pt").exists()
    # a file written by an older version (or by hand), sealed with a valid digest: refused on load
    good = small_model()
    save_checkpoint(tmp_path / "old.pt", model=good, step=1)
    checkpoint = torch.load(tmp_path / "old.pt", weights_only=True)
    checkpoint["model_state"] = model.state_dict()
    checkpoint["content_sha256"] = _digest(checkpoint)
    atomic_save(checkpoint, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match=r"old\.pt is unusable: 1 tensor\(s\) hold inf or nan"):
        load_checkpoint(tmp_path / "old.pt")
    checkpoint["trainer_state"] = {"optimizer": {"state": {0: {"exp_avg": torch.tensor([math.inf])}}}}
    with pytest.raises(CheckpointError, match="trainer_state/optimizer/state/0/exp_avg"):
        write_checkpoint(checkpoint, tmp_path / "x.pt")


def test_decoding_a_model_whose_scores_are_not_finite_fails_clearly(tiny_model, tokens):
    model = tiny_model()
    with torch.no_grad():
        model.tgt_embed.weight.mul_(1e38)  # finite but absurd weights: the scores overflow
    src = tokens(2, 5, 23)
    with pytest.raises(NonFiniteOutputError, match="inf or nan"):
        greedy_decode(model, src)
    with pytest.raises(NonFiniteOutputError, match="inf or nan"):
        beam_search(model, src, beam_size=3)
