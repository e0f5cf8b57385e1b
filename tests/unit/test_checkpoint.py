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
    """Word vocabularies of 20 entries each, the vocabulary sizes of ``make_model``."""
    return {
        "src": WordTokenizer.build(
            ["a small dog runs", "a cat", "one two three four five six seven eight nine ten eleven"], "en"
        ),
        "tgt": WordTokenizer.build(
            ["ein kleiner Hund rennt", "eine Katze", "eins zwei drei vier fünf sechs sieben acht neun zehn"], "de"
        ),
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

    monkeypatch.setattr(ckpt_module.files.torch, "save", crash)
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
c.files.torch.save = half_then_die
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
        "garbage.pt": (b"\x00\x01 this is not a checkpoint\n" * 20, "not a zip archive"),
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
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(CheckpointError, match=r"run is a folder; pass a checkpoint file \(e\.g\. .*step_\*\.pt\)"):
        load_checkpoint(run)
    (run / "averaged.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"run is a folder; pass a checkpoint file \(e\.g\. .*run/averaged\.pt\)"):
        load_checkpoint(run)  # the run's final weights, when it has them


class ArbitraryObject:
    """A class no unpickler allow-list holds (torch 2.14's weights-only unpickler accepts builtin exceptions)."""


def test_foreign_files_are_refused_without_unpickling(tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="not a companion checkpoint"):
        load_checkpoint(tmp_path / "plain.pt")
    torch.save({"format": "companion-checkpoint", "payload": ArbitraryObject()}, tmp_path / "evil.pt")
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


# --------------------------------------------------------------------------------------------------------
# Issue 21: tampered, impossible and foreign files are refused before anything is built
# --------------------------------------------------------------------------------------------------------
def resealed(path, change):
    """Rewrite the checkpoint at ``path`` as a tamperer would: contents changed, digest recomputed (the digest is
    an integrity check, not a signature), written with plain ``torch.save`` (no checks)."""
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    checkpoint["content_sha256"] = ckpt_module.validate._digest(checkpoint)
    torch.save(checkpoint, path)
    return path


def trained_checkpoint(folder):
    """A one-step checkpoint with trainer state and word vocabularies."""
    config = TrainConfig(max_steps=1, device="cpu", progress=False)
    Trainer(make_model(), config, batches(n=20), out_dir=folder, tokenizers=tokenizers()).train()
    return latest_checkpoint(folder / "checkpoints")


@pytest.mark.parametrize(
    "field, value",
    [("d_model", 2**30), ("max_len", 10**9), ("num_encoder_layers", 10**6), ("src_vocab_size", 10**10)],
)
def test_a_config_that_does_not_fit_the_weights_is_refused_before_building(field, value, tmp_path, monkeypatch):
    """d_model 2^30 would allocate 80 GB; the file is refused from the tensor shapes alone (a model may be
    described on the meta device, which allocates nothing)."""
    path = save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1)
    resealed(path, lambda c: c["model_config"].update({field: value}))
    real_init = Transformer.__init__

    def init_on_meta_only(self, config):
        if torch.empty(0).device.type != "meta":
            raise AssertionError("the loader built a model before comparing its config with the weights")
        real_init(self, config)

    monkeypatch.setattr(Transformer, "__init__", init_on_meta_only)
    with pytest.raises(CheckpointError, match=rf"c\.pt.*{field}"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match=field):
        model_from_checkpoint(path)


def test_compressed_members_are_refused_before_they_are_inflated(tmp_path):
    """torch.save stores every member uncompressed; a deflated one (a zip bomb: 64 MB of zeros in 70 kB) is
    refused from the zip directory, before torch.load inflates it."""
    import zipfile

    path = save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1)
    resealed(path, lambda c: c["metrics"].update(padding=torch.zeros(16 * 2**20)))
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info))
    assert bomb.stat().st_size < 2**20
    with pytest.raises(CheckpointError, match=r"bomb\.pt.*compressed.*not written by torch\.save"):
        load_checkpoint(bomb)


@pytest.mark.parametrize(
    "content, what",
    [
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 10485760\n", "Git LFS pointer"),
        (b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>\n", "HTML page"),
        (b"\n\n  <html><body>Rate limit exceeded</body></html>", "HTML page"),
        (b"\x1f\x8b\x08\x00 compressed bytes", "gzip"),
        (b"just some notes I saved under the wrong name\n", "text file"),
        (b"\x80\x02}q\x00.", "pickle"),
    ],
)
def test_files_that_are_not_checkpoints_are_named_for_what_they_are(content, what, tmp_path):
    path = tmp_path / "step_00000001.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=rf"step_00000001\.pt is (a|an) .*{what}") as caught:
        load_checkpoint(path)
    assert "Unsupported operand" not in str(caught.value) and "tampered" not in str(caught.value)


def _deeply_nested(depth):
    nested: dict = {}
    for _ in range(depth):
        nested = {"x": nested}
    return nested


TAMPERED_ENTRIES = {
    "run_info a string": (lambda c: c.update(run_info="a string"), "run_info"),
    "step a string": (lambda c: c.update(step="1"), "step"),
    "negative step": (lambda c: c.update(step=-1), "step"),
    "an extra key in trainer_state": (lambda c: c["trainer_state"].update(surprise=1), "trainer_state.*surprise"),
    "a counter of the wrong type": (lambda c: c["trainer_state"]["state"].update(epoch="0"), "trainer_state.*epoch"),
    "a bad RNG state": (lambda c: c["trainer_state"]["rng"][0].update(torch=torch.zeros(3)), "trainer_state.*rng"),
    "RNG states for another world size": (lambda c: c["trainer_state"].update(world_size=2), "world_size"),
    "model_state a list": (lambda c: c.update(model_state=list(c["model_state"].values())), "model_state"),
    "a weight that is no tensor": (lambda c: c["model_state"].update({"generator.weight": 1.0}), "generator.weight"),
    "a missing embedding": (lambda c: c["model_state"].pop("tgt_embed.weight"), "lacks .*tgt_embed.weight"),
    "an embedding of another width": (
        lambda c: c["model_state"].update({"tgt_embed.weight": torch.zeros(20, 16)}),
        r"d_model is 32, but model_state\['tgt_embed.weight'\] has shape \(20, 16\)",
    ),
    "a layer more than the config says": (
        lambda c: c["model_state"].update({"decoder.layers.1.ffn.linear1.bias": torch.zeros(64)}),
        "num_decoder_layers is 1, but model_state holds 2 decoder layers",
    ),
    "a tokenizer larger than the model's vocabulary": (
        lambda c: c["tokenizers"]["tgt"]["itos"].append("extra"),
        "tgt tokenizer has 21 entries.*tgt_vocab_size 20",
    ),
    "tokenizers a list": (lambda c: c.update(tokenizers=["src", "tgt"]), "tokenizers"),
    "deeply nested metrics": (lambda c: c.update(metrics=_deeply_nested(5000)), "metrics.*nest"),
    "metrics a list": (lambda c: c.update(metrics=[1, 2]), "metrics"),
    "averaged_from not names": (lambda c: c.update(averaged_from=[1, 2]), "averaged_from"),
    "an unknown entry": (lambda c: c.update(payload=b"x" * 4), "payload"),
    "a version that is no string": (lambda c: c.update(companion_version=2), "companion_version"),
}


@pytest.mark.parametrize("case", list(TAMPERED_ENTRIES))
def test_every_entry_of_a_resealed_checkpoint_is_validated(case, tmp_path):
    change, message = TAMPERED_ENTRIES[case]
    path = trained_checkpoint(tmp_path / "run")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # only to write the deeply nested case
    try:
        resealed(path, change)
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(CheckpointError, match=message) as caught:
        load_checkpoint(path)
    assert path.name in str(caught.value)


def test_the_untampered_trained_checkpoint_passes_the_same_checks(tmp_path):
    """Guards the test above: the file it tampers with is valid as written."""
    path = resealed(trained_checkpoint(tmp_path / "run"), lambda c: None)
    checkpoint = load_checkpoint(path)
    src, tgt = tokenizers_from_checkpoint(checkpoint)
    assert (src.vocab_size, tgt.vocab_size) == (20, 20)
    trainer = Trainer(make_model(seed=3), TrainConfig(max_steps=2, device="cpu", progress=False), batches(n=20))
    trainer.load_checkpoint(path)
    assert trainer.state.step == 1


def test_a_subword_tokenizer_of_another_size_is_refused(tmp_path):
    from companion.data import SubwordTokenizer

    tok = SubwordTokenizer.train(["a man rides a bike .", "ein mann fährt rad ."] * 5, vocab_size=60)
    assert tok.vocab_size != 20  # make_model's vocabularies
    with pytest.raises(CheckpointError, match=rf"src tokenizer has {tok.vocab_size} entries"):
        save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1, tokenizers={"src": tok, "tgt": tok})
    assert not (tmp_path / "c.pt").exists()


def _interrupt_inside_torch_save(monkeypatch):
    """Ctrl-C while torch's zip writer calls the file's ``write``: it turns the KeyboardInterrupt into
    ``RuntimeError: [enforce fail at inline_container.cc] unexpected pos ...``."""
    real_save = torch.save

    class InterruptedFile:
        def __init__(self, handle):
            self.handle, self.calls = handle, 0

        def write(self, data):
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt
            return self.handle.write(data)

        def __getattr__(self, name):
            return getattr(self.handle, name)

    monkeypatch.setattr(ckpt_module.files.torch, "save", lambda obj, handle: real_save(obj, InterruptedFile(handle)))


def test_ctrl_c_during_a_write_says_what_happened_and_what_is_intact(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    model = make_model()
    _interrupt_inside_torch_save(monkeypatch)
    with pytest.raises(KeyboardInterrupt, match="interrupted while writing .*step_00000001.pt") as first:
        save_checkpoint(folder / "step_00000001.pt", model=model, step=1)
    assert "intact" not in str(first.value) and "no earlier checkpoint" in str(first.value)
    assert list(folder.iterdir()) == []  # no temp file
    monkeypatch.undo()
    good = save_checkpoint(folder / "step_00000001.pt", model=model, step=1)
    _interrupt_inside_torch_save(monkeypatch)
    with pytest.raises(KeyboardInterrupt, match=r"the previous checkpoint is intact \(step_00000001\.pt\)") as second:
        save_checkpoint(folder / "step_00000002.pt", model=model, step=2)
    assert "enforce fail" not in str(second.value) and "unexpected pos" not in str(second.value)
    monkeypatch.undo()
    assert [p.name for p in folder.iterdir()] == [good.name]
    assert load_checkpoint(good)["step"] == 1


def test_a_failed_first_write_does_not_claim_a_previous_checkpoint(tmp_path, monkeypatch):
    import errno

    def no_space(obj, handle):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ckpt_module.files.torch, "save", no_space)
    with pytest.raises(CheckpointError, match="Input/output error") as caught:
        save_checkpoint(tmp_path / "step_00000001.pt", model=make_model(), step=1)
    assert "intact" not in str(caught.value)


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_checkpoint_files_follow_the_umask(umask, mode, tmp_path):
    before = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1)
    finally:
        os.umask(before)
    assert path.stat().st_mode & 0o777 == mode


def test_model_from_checkpoint_checks_a_dict_as_it_checks_a_file(tmp_path):
    checkpoint = load_checkpoint(save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1))
    with pytest.raises(CheckpointError, match="lacks the entry 'model_config'"):
        model_from_checkpoint({})
    broken = dict(checkpoint, model_state=dict(checkpoint["model_state"]))
    broken["model_state"]["generator.weight"] = torch.full((20, 32), float("nan"))
    with pytest.raises(CheckpointError, match="inf or nan.*generator.weight"):
        model_from_checkpoint(broken)
    meta = dict(checkpoint, model_state={k: v.to("meta") for k, v in checkpoint["model_state"].items()})
    with pytest.raises(CheckpointError, match="model_state.*meta device"):
        model_from_checkpoint(meta)
    with pytest.raises(CheckpointError, match="'model_state' must be a dict"):
        model_from_checkpoint(dict(checkpoint, model_state=[1, 2]))
    other_shape = dict(checkpoint, model_state=dict(checkpoint["model_state"], **{"generator.bias": torch.zeros(3)}))
    with pytest.raises(CheckpointError, match="weights do not fit the model.*generator.bias"):
        model_from_checkpoint(other_shape)
    assert not model_from_checkpoint(checkpoint).training  # the untouched dict still builds


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_model_from_checkpoint_resolves_the_device_first(tmp_path):
    from companion.errors import ConfigError, DeviceUnavailableError

    path = save_checkpoint(tmp_path / "c.pt", model=make_model(), step=1)
    with pytest.raises(DeviceUnavailableError, match="CUDA is not available"):
        model_from_checkpoint(path, device="cuda")
    with pytest.raises(ConfigError, match="device must be .*'bogus'"):
        model_from_checkpoint(path, device="bogus")
    assert next(model_from_checkpoint(path, device="auto").parameters()).device.type == "cpu"


# -- moved from test_reliability.py: non-finite weights, a full disk, tampered contents ----------------------
def test_a_checkpoint_with_nonfinite_weights_is_never_written_and_refused_on_load(tmp_path):
    import math

    model = make_model()
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="inf or nan"):
        save_checkpoint(tmp_path / "bad.pt", model=model, step=1)
    assert not (tmp_path / "bad.pt").exists()
    # a file written by an older version (or by hand), sealed with a valid digest: refused on load
    old = save_checkpoint(tmp_path / "old.pt", model=make_model(), step=1)
    resealed(old, lambda c: c.update(model_state=model.state_dict()))
    with pytest.raises(CheckpointError, match=r"old\.pt:? is unusable: 1 tensor\(s\) hold inf or nan"):
        load_checkpoint(old)
    checkpoint = torch.load(old, weights_only=True)
    checkpoint["model_state"] = make_model().state_dict()
    checkpoint["trainer_state"] = {"optimizer": {"state": {0: {"exp_avg": torch.tensor([math.inf])}}}}
    with pytest.raises(CheckpointError, match="trainer_state/optimizer/state/0/exp_avg"):
        write_checkpoint(checkpoint, tmp_path / "x.pt")


def test_a_full_disk_while_saving_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import errno

    model = make_model()
    good = save_checkpoint(tmp_path / "step_00000001.pt", model=model, step=1)
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, handle):
            self.handle, self.written = handle, 0

        def write(self, data):
            self.written += len(data)
            if self.written > 4096:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.handle.write(data)

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(ckpt_module.files.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(CheckpointError, match="the disk is full") as caught:
        save_checkpoint(good, model=model, step=2)
    assert "previous checkpoint is intact" in str(caught.value) and "unexpected pos" not in str(caught.value)
    monkeypatch.undo()
    assert load_checkpoint(good)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001.pt"]  # no temp file left


TAMPERED_CONTENTS = {
    "garbage tokenizer JSON": (
        lambda c: c["tokenizers"]["src"].update(tokenizer="{not json"),
        "src tokenizer is damaged",
    ),
    "garbage word vocabulary": (
        lambda c: c["tokenizers"]["tgt"].update(type="word", language="en", itos=7),
        "tgt tokenizer is damaged",
    ),
    "missing tokenizer entry": (lambda c: c["tokenizers"].pop("tgt"), "lack the 'tgt' entry"),
    "non-numeric layer_norm_eps": (
        lambda c: c["model_config"].update(layer_norm_eps="small"),
        "layer_norm_eps must be a finite number",
    ),
    "negative layer_norm_eps": (
        lambda c: c["model_config"].update(layer_norm_eps=-1e-5),
        "layer_norm_eps must be positive",
    ),
    "nan dropout": (lambda c: c["model_config"].update(dropout=float("nan")), "dropout must be a finite number"),
    "string bool": (lambda c: c["model_config"].update(norm_first="yes"), "norm_first must be True or False"),
    "unknown field": (lambda c: c["model_config"].update(colour="red"), "unknown field 'colour'"),
}


@pytest.mark.parametrize("case", list(TAMPERED_CONTENTS))
def test_tampered_checkpoint_contents_are_refused_by_translate_without_a_traceback(case, tmp_path, capsys):
    from companion.cli import main
    from companion.data import SubwordTokenizer

    change, message = TAMPERED_CONTENTS[case]
    tok = SubwordTokenizer.train(["a man rides a bike .", "ein mann fährt rad ."] * 5, vocab_size=60)
    config = TransformerConfig(
        tok.vocab_size, tok.vocab_size, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32
    )
    path = save_checkpoint(tmp_path / "m.pt", model=Transformer(config), step=1, tokenizers={"src": tok, "tgt": tok})
    resealed(path, change)
    assert main(["translate", "--checkpoint", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
