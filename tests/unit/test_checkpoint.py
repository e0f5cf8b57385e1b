"""Checkpoints: contents, exact resume, atomic writes, corrupt files, mismatches, averaging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

import companion.checkpoint as ckpt_module
from companion import Transformer, TransformerConfig, __version__
from companion.checkpoint import (
    CheckpointError,
    average_checkpoints,
    check_compatible,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
    tokenizers_from_checkpoint,
    write_checkpoint,
)
from companion.data import WordTokenizer, make_batches, synthetic_pairs
from companion.train import TrainConfig, Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def make_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    settings = dict(
        d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=64, dropout=0.1, max_len=32
    )
    settings.update(overrides)
    return Transformer(TransformerConfig(20, 20, **settings))


def batches(seed: int = 0, n: int = 120):
    return make_batches(synthetic_pairs("reverse", n, max_len=8, vocab_size=20, seed=seed), 150, seed=seed)


def tokenizers():
    return {
        "src": WordTokenizer.build(["a small dog runs", "a cat"], "en"),
        "tgt": WordTokenizer.build(["ein kleiner Hund rennt", "eine Katze"], "de"),
    }


def test_checkpoint_records_everything_and_rebuilds_the_model(tmp_path):
    model = make_model().eval()
    toks = tokenizers()
    path = save_checkpoint(
        tmp_path / "c.pt",
        model=model,
        step=42,
        tokenizers=toks,
        train_config=TrainConfig(max_steps=3).to_dict(),
        metrics={"valid_ppl": 3.5},
        run_info={"task": "multi30k", "src": "en", "tgt": "de"},
    )
    loaded = load_checkpoint(path)
    assert loaded["step"] == 42 and loaded["companion_version"] == __version__
    assert loaded["torch_version"] == str(torch.__version__)
    assert loaded["model_config"] == model.config.to_dict()
    assert loaded["tokenizers"]["src"] == toks["src"].to_dict()
    assert loaded["metrics"] == {"valid_ppl": 3.5} and loaded["train_config"]["max_steps"] == 3
    rebuilt = model_from_checkpoint(loaded)
    src, tgt = torch.randint(4, 20, (3, 7)), torch.randint(4, 20, (3, 5))
    torch.testing.assert_close(rebuilt(src, tgt), model(src, tgt), rtol=0, atol=0)
    src_tok, tgt_tok = tokenizers_from_checkpoint(loaded)
    assert src_tok.encode("a small cat") == toks["src"].encode("a small cat")
    assert tgt_tok.decode(tgt_tok.encode("ein Hund")) == "ein Hund"


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path):
    """2N steps straight == N steps, save, load into fresh objects, N more (dropout on, accumulation, epochs)."""
    data = batches()
    assert len(data) < 2 * 6 * 2  # the runs cross epoch boundaries
    config = dict(warmup=5, accum_steps=2, progress=False, device="cpu", seed=7)

    straight = make_model()
    Trainer(straight, TrainConfig(max_steps=12, **config), data).train()

    first = make_model()
    Trainer(first, TrainConfig(max_steps=6, **config), data, out_dir=tmp_path / "run").train()
    saved = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert saved is not None and saved.name == "step_00000006.pt"
    torch.manual_seed(999)  # the resumed session must not depend on the RNG state it starts with
    resumed_model = make_model(seed=123)  # different initial weights: all must come from the checkpoint
    resumed = Trainer(resumed_model, TrainConfig(max_steps=12, **config), data, out_dir=tmp_path / "run")
    resumed.load_checkpoint(saved)
    assert resumed.state.step == 6
    resumed.train()
    for (name, a), b in zip(straight.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_resume_without_restoring_rng_would_differ(tmp_path):
    """Guards the test above: with dropout, skipping the RNG restore changes the result."""
    data = batches()
    config = dict(warmup=5, progress=False, device="cpu", seed=7)
    straight = make_model()
    Trainer(straight, TrainConfig(max_steps=6, **config), data).train()
    first = make_model()
    trainer = Trainer(first, TrainConfig(max_steps=3, **config), data, out_dir=tmp_path)
    trainer.train()
    checkpoint = load_checkpoint(latest_checkpoint(tmp_path / "checkpoints"))
    checkpoint["trainer_state"]["rng"] = []
    resumed_model = make_model(seed=5)
    resumed = Trainer(resumed_model, TrainConfig(max_steps=6, **config), data)
    resumed.load_checkpoint(checkpoint)
    torch.manual_seed(12345)
    resumed.train()
    assert not torch.equal(straight.generator.weight, resumed_model.generator.weight)


def test_a_crash_mid_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    model = make_model()
    good = save_checkpoint(folder / "step_00000001.pt", model=model, step=1)

    def crash(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a zip file")
        handle.flush()
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(ckpt_module.torch, "save", crash)
    with torch.no_grad():
        model.generator.weight.add_(1.0)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(folder / "step_00000002.pt", model=model, step=2)
    with pytest.raises(KeyboardInterrupt):  # overwriting the same name must not damage it either
        save_checkpoint(good, model=model, step=1)
    monkeypatch.undo()
    assert latest_checkpoint(folder) == good
    assert sorted(p.name for p in folder.iterdir()) == ["step_00000001.pt"]  # no partial file, no temp file
    restored = model_from_checkpoint(load_checkpoint(good))
    assert torch.equal(restored.generator.weight, make_model().generator.weight)


def test_a_killed_writer_leaves_the_latest_checkpoint_intact(tmp_path):
    """A real crash: the writing process is SIGKILLed halfway through a checkpoint."""
    folder = tmp_path / "checkpoints"
    good = save_checkpoint(folder / "step_00000001.pt", model=make_model(), step=1)
    script = f"""
import os, signal, torch
import companion.checkpoint as c
from companion import Transformer, TransformerConfig
def half_then_die(obj, handle, *a, **k):
    handle.write(b"PK" * 5000); handle.flush(); os.kill(os.getpid(), signal.SIGKILL)
c.torch.save = half_then_die
model = Transformer(TransformerConfig(20, 20, d_model=32, num_heads=2, num_encoder_layers=1,
                                      num_decoder_layers=1, d_ff=64, max_len=32))
c.save_checkpoint({str(folder / "step_00000002.pt")!r}, model=model, step=2)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    leftovers = [p.name for p in folder.iterdir() if p.name != good.name]
    assert len(leftovers) == 1 and leftovers[0].endswith(".tmp")  # the torn temp file, under another name
    assert latest_checkpoint(folder) == good
    assert load_checkpoint(good)["step"] == 1
    ckpt_module.prune_checkpoints(folder, keep_last=5)  # cleans the torn temp file
    assert [p.name for p in folder.iterdir()] == [good.name]


def test_truncated_empty_garbage_and_bit_flipped_files_give_clear_errors(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1)
    data = path.read_bytes()
    cases = {
        "truncated.pt": (data[: len(data) // 2], "truncated or corrupt"),
        "empty.pt": (b"", "empty"),
        "garbage.pt": (b"this is not a checkpoint\n" * 20, "truncated or corrupt"),
    }
    flipped = bytearray(data)
    offset = data.index(b"data/0") + 200  # inside the first tensor's bytes
    flipped[offset : offset + 16] = bytes(b ^ 0xFF for b in flipped[offset : offset + 16])
    cases["flipped.pt"] = (bytes(flipped), "corrupt")
    for name, (content, message) in cases.items():
        bad = tmp_path / name
        bad.write_bytes(content)
        with pytest.raises(CheckpointError, match=message) as info:
            load_checkpoint(bad)
        assert name in str(info.value)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")


def test_foreign_files_are_refused_without_unpickling(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="not a companion checkpoint"):
        load_checkpoint(tmp_path / "plain.pt")
    torch.save({"format": "companion-checkpoint", "payload": Exception("arbitrary object")}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="refuses to unpickle"):
        load_checkpoint(tmp_path / "evil.pt")


def test_checkpoints_hold_only_plain_values(tmp_path):
    with pytest.raises(TypeError, match="plain values"):
        save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1, metrics={"when": object()})
    assert not (tmp_path / "c.pt").exists()


def test_mismatched_config_or_vocabulary_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", model=make_model(), step=3, tokenizers=tokenizers())
    checkpoint = load_checkpoint(path)
    other = make_model(d_model=16, d_ff=32)
    trainer = Trainer(other, TrainConfig(max_steps=1, device="cpu", progress=False), batches())
    with pytest.raises(CheckpointError, match=r"another model configuration: d_ff.*d_model: checkpoint 32 vs model 16"):
        trainer.load_checkpoint(path)
    other_vocab = {"src": tokenizers()["src"], "tgt": WordTokenizer.build(["ganz andere Wörter"], "de")}
    with pytest.raises(CheckpointError, match="tgt vocabulary differs"):
        check_compatible(checkpoint, model_config=make_model().config, tokenizers=other_vocab)
    check_compatible(checkpoint, model_config=make_model().config, tokenizers=tokenizers())  # the same: fine


def test_average_checkpoints_is_the_mean_of_the_weights(tmp_path):
    models = [make_model(seed=s) for s in range(3)]
    paths = [
        save_checkpoint(tmp_path / f"step_{i:08d}.pt", model=m, step=i, tokenizers=tokenizers())
        for i, m in enumerate(models)
    ]
    averaged = average_checkpoints(paths)
    assert averaged["trainer_state"] is None and averaged["step"] == 2
    assert averaged["averaged_from"] == [p.name for p in paths]
    for name, value in averaged["model_state"].items():
        expected = sum(m.state_dict()[name] for m in models) / 3
        torch.testing.assert_close(value, expected, msg=name)
    out = write_checkpoint(averaged, tmp_path / "averaged.pt")
    model = model_from_checkpoint(out)
    torch.testing.assert_close(model.generator.weight, averaged["model_state"]["generator.weight"])
    trainer = Trainer(
        make_model(), TrainConfig(max_steps=1, device="cpu", progress=False), batches(), tokenizers=tokenizers()
    )
    with pytest.raises(CheckpointError, match="cannot resume"):
        trainer.load_checkpoint(out)


def test_average_refuses_mixed_runs(tmp_path):
    a = save_checkpoint(tmp_path / "a.pt", model=make_model(), step=1)
    b = save_checkpoint(tmp_path / "b.pt", model=make_model(d_ff=128), step=2)
    with pytest.raises(CheckpointError, match="cannot average"):
        average_checkpoints([a, b])
    with pytest.raises(ValueError, match="paths"):
        average_checkpoints([])


def test_trainer_keeps_the_last_n_checkpoints(tmp_path):
    config = TrainConfig(max_steps=10, save_every=2, keep_last=3, device="cpu", progress=False)
    Trainer(make_model(), config, batches(), out_dir=tmp_path).train()
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == [
        "step_00000006.pt",
        "step_00000008.pt",
        "step_00000010.pt",
    ]
    assert not [p for p in os.listdir(tmp_path / "checkpoints") if p.endswith(".tmp")]
