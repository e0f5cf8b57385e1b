"""Reliability (issue 12): a diverged run never leaves a "good" checkpoint, and every bad input gets a clear error.

Grouped by the issue's headings: High (divergence and non-finite numbers), Medium (line alignment, run-folder
lock, corrupt data, resume with other data), Low (small failures and silent surprises) and the defaults a user
meets. No test depends on wall-clock time: limits are step counts, clocks are faked or monkeypatched.
"""

from __future__ import annotations

import json
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


def one_step_run(data_dir, out) -> list[str]:
    """The command line of a one-step tiny Multi30k run on ``data_dir`` into ``out``."""
    return [
        "train",
        "--preset",
        "tiny",
        "--data-dir",
        str(data_dir),
        "--max-steps",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]


COPY = [
    "train",
    "--task",
    "copy",
    "--preset",
    "tiny",
    "--num-examples",
    "300",
    "--max-tokens",
    "200",
    "--no-progress",
    "--device",
    "cpu",
    "--threads",
    "1",
]


def small_model(vocab: int = 20) -> Transformer:
    return Transformer(
        TransformerConfig(
            vocab,
            vocab,
            d_model=32,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=64,
            dropout=0.0,
            max_len=32,
        )
    )


def copy_batches(n: int = 200, max_tokens: int = 200, vocab: int = 20):
    return make_batches(synthetic_pairs("copy", n, max_len=8, vocab_size=vocab, seed=0), max_tokens, seed=0)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


# ========================================================================================================
# High: divergence writes non-finite checkpoints and calls them good
# ========================================================================================================
FLOAT_OPTIONS = [
    ("lr_factor", "--lr-factor", 1e6),
    ("max_minutes", "--max-minutes", 1e30),
    ("clip_grad", "--clip-grad", 1e30),
    ("save_every_minutes", "--save-every-minutes", 1e30),
]


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
    trainer = Trainer(
        small_model(),
        TrainConfig(max_steps=10, warmup=4, progress=False, device="cpu", **config),
        copy_batches(),
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
        copy_batches(),
        out_dir=tmp_path,
    )
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
    trainer = Trainer(
        small_model(),
        TrainConfig(max_steps=2, warmup=4, progress=False, device="cpu"),
        copy_batches(),
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


# ========================================================================================================
# Medium
# ========================================================================================================
def word_checkpoint(path):
    """A tiny untrained word-level model with its tokenizers: enough to exercise ``translate``."""
    from companion.data import WordTokenizer

    tok = WordTokenizer.build(["a man rides a bike .", "two dogs play in the snow ."], "en")
    model = Transformer(
        TransformerConfig(
            tok.vocab_size,
            tok.vocab_size,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=32,
            dropout=0.0,
            max_len=16,
        )
    )
    save_checkpoint(path, model=model, step=1, tokenizers={"src": tok, "tgt": tok})
    return path


def run_translate(monkeypatch, capsys, checkpoint, stdin_bytes: bytes) -> tuple[int, str, str]:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin_bytes), encoding="utf-8"))
    code = main(["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", "--device", "cpu"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SEPARATORS = ["\u2028", "\u2029", "\u0085", "\f", "\x1c", "\x1d", "\x1e", "\r", "\v"]


@pytest.mark.parametrize("separator", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_translate_splits_lines_on_newline_only(separator, tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    lines = ["a man", f"a{separator}dog", "", "two dogs\r", f"{separator}snow"]
    code, out, _ = run_translate(monkeypatch, capsys, checkpoint, "\n".join(lines).encode() + b"\n")
    assert code == 0
    assert out.endswith("\n") and len(out.split("\n")) == len(lines) + 1  # one output line per input line
    assert out.split("\n")[2] == ""  # the empty line stays empty, in its place


def test_split_lines_keeps_alignment_and_drops_a_bom():
    from companion.cli import split_lines

    assert split_lines("\ufeffa\r\nb\u2028c\nd\re\n") == ["a", "b\u2028c", "d\re"]
    assert split_lines("a\n\nb") == ["a", "", "b"]
    assert split_lines("") == []


def test_bytes_that_are_not_utf8_on_stdin_give_a_clear_error(tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    code, out, err = run_translate(monkeypatch, capsys, checkpoint, b"a man\nein M\xe4nner\n")
    assert code == 2 and out == ""
    assert "stdin: line 2 is not UTF-8" in err and "\\xe4" in err
    source = tmp_path / "in.txt"
    source.write_bytes(b"\xff\xfe")
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--device", "cpu"]) == 2
    assert f"--input {source}: line 1 is not UTF-8" in capsys.readouterr().err


def test_text_with_lone_surrogates_is_refused_by_the_api_and_the_tokenizers(tmp_path):
    from companion.checkpoint import tokenizers_from_checkpoint
    from companion.errors import RunError
    from companion.runs import load_for_inference, translate_run

    checkpoint = word_checkpoint(tmp_path / "m.pt")
    bad = b"ein M\xe4nner".decode("utf-8", "surrogateescape")  # how a C-locale stdin hands such bytes over
    with pytest.raises(RunError, match="line 2 is not valid text"):
        translate_run(
            TranslateConfig(checkpoint=str(checkpoint), device="cpu"),
            ["a man", bad],
            loaded=load_for_inference(checkpoint, "cpu"),
        )
    src_tok, _ = tokenizers_from_checkpoint(load_checkpoint(checkpoint))
    with pytest.raises(ValueError, match="lone surrogate"):
        src_tok.encode(bad)


LOCK_HOLDER = """
import sys
from companion.runs import RunFolderLock
with RunFolderLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.slow  # a second Python process
def test_a_second_run_into_a_locked_folder_is_refused_and_a_stale_lock_is_taken_over(tmp_path, capsys):
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout.readline().strip() == "locked"  # waits for the other process, not for a clock
        assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another run (pid {holder.pid}" in err
        assert not (out / "checkpoints").exists() and not (out / "run.json").exists()
    finally:
        holder.stdin.close()
        holder.wait()
    assert not (out / ".lock").exists()  # released on exit
    # a lock file whose holder was killed (kill -9 leaves the file): recognised as stale and taken over
    (out / ".lock").write_text(json.dumps({"pid": holder.pid, "host": "h", "since": "then"}))
    with pytest.warns(UserWarning, match=f"stale lock .*pid {holder.pid}"):
        assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0
    assert not (out / ".lock").exists() and (out / "checkpoints").is_dir()


def test_the_lock_is_held_for_the_whole_run_and_released_after_a_failure(tmp_path, monkeypatch):
    from companion import runs
    from companion.errors import RunLockedError

    out = tmp_path / "run"
    seen = []

    def build_and_try_a_second_lock(*args, **kwargs):
        with pytest.raises(RunLockedError, match="in use by another run"):
            runs.RunFolderLock(out).acquire()  # even from the same process: one run per folder
        seen.append(1)
        raise TrainingDivergedError("stop here")

    monkeypatch.setattr(runs.train, "build_run_data", build_and_try_a_second_lock)
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    assert seen and not (out / ".lock").exists()


def write_corpus(folder, pairs_by_split=None, gz=True):
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    default = [(f"a man number {i} .", f"ein mann nummer {i} .") for i in range(40)]
    pairs_by_split = pairs_by_split or {}
    for stem in ("train", "val", "test_2016_flickr"):
        pairs = pairs_by_split.get(stem, default)
        for side, lang in ((0, "en"), (1, "de")):
            text = "".join(pair[side] + "\n" for pair in pairs).encode()
            if gz:
                (folder / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text, mtime=0))
            else:
                (folder / f"{stem}.{lang}").write_bytes(text)
    return folder


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _bad_crc(data: bytes) -> bytes:
    return data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]


def _not_gzip(data: bytes) -> bytes:
    return b"a man rides a bike .\n" * 40


CORRUPTIONS = {
    "truncated": (_truncate, r"train\.de\.gz is truncated"),
    "bad CRC": (_bad_crc, r"train\.de\.gz is a corrupt gzip file \(CRC check failed"),
    "not gzip": (_not_gzip, r"train\.de\.gz is not gzip-compressed"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_gzip_files_name_the_file_and_the_problem(case, tmp_path, capsys):
    from companion.data import load_multi30k
    from companion.errors import DataError

    corrupt, message = CORRUPTIONS[case]
    folder = write_corpus(tmp_path / "data")
    target = folder / "train.de.gz"
    target.write_bytes(corrupt(target.read_bytes()))
    with pytest.raises(DataError, match=message):
        load_multi30k("en", "de", folder)
    assert main(one_step_run(folder, tmp_path / "run")) == 2
    assert str(target) in capsys.readouterr().err


def test_bytes_that_are_not_utf8_in_data_name_the_file_and_line(tmp_path):
    import gzip

    from companion.data import load_multi30k
    from companion.errors import DataError

    folder = write_corpus(tmp_path / "data")
    lines = [f"ein mann {i} .".encode() for i in range(40)]
    lines[2] = b"ein M\xe4nner ."
    (folder / "val.de.gz").write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    with pytest.raises(DataError, match=r"val\.de\.gz, line 3: not UTF-8 text \(byte\(s\) b'\\xe4"):
        load_multi30k("en", "de", folder)


def _train_word(folder, out, steps, *extra):
    return main(
        [
            "train",
            "--preset",
            "tiny",
            "--tokenizer",
            "word",
            "--data-dir",
            str(folder),
            "--max-steps",
            str(steps),
            "--max-tokens",
            "200",
            "--device",
            "cpu",
            "--no-progress",
            "--threads",
            "1",
            "--out",
            str(out),
            *extra,
        ]
    )


def test_resume_with_other_data_is_refused_and_with_the_same_data_elsewhere_allowed(tmp_path, capsys):
    import json
    import shutil

    first = write_corpus(tmp_path / "first")
    out = tmp_path / "run"
    assert _train_word(first, out, 1) == 0
    recorded = json.loads((out / "run.json").read_text())["data"]
    assert recorded["train"]["pairs"] == 40 and len(recorded["train"]["sha256"]) == 64
    other = write_corpus(tmp_path / "other", {"train": [(f"a dog {i} .", f"ein hund {i} .") for i in range(40)]})
    capsys.readouterr()
    assert _train_word(other, out, 2, "--resume") == 2
    err = capsys.readouterr().err
    assert "not the data this run was trained on" in err and "train:" in err
    same = shutil.copytree(first, tmp_path / "copy")  # the same sentences in another folder: exact resume works
    assert _train_word(same, out, 2, "--resume") == 0


# ========================================================================================================
# Low
# ========================================================================================================
def test_out_under_a_file_or_being_a_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "a_file" / "run")]) == 2
    assert "cannot create the folder (Not a directory)" in capsys.readouterr().err
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "a_file")]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err


def test_an_unwritable_out_folder_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import errno
    import os

    out = tmp_path / "run"
    out.mkdir()
    real_open = os.open

    def refuse(path, *args, **kwargs):  # what a folder without write permission does (tests may run as root)
        if str(path).startswith(str(out)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 2
    assert f"--out {out}: cannot write into the folder (Permission denied)" in capsys.readouterr().err


def test_a_full_disk_while_saving_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import errno
    import os

    from companion import checkpoint as ckpt_module

    model = small_model()
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

    monkeypatch.setattr(ckpt_module.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(CheckpointError, match="the disk is full") as caught:
        save_checkpoint(good, model=model, step=2)
    assert "previous checkpoint is intact" in str(caught.value) and "unexpected pos" not in str(caught.value)
    monkeypatch.undo()
    assert load_checkpoint(good)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001.pt"]  # no temp file left


def _resealed(path, change):
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    checkpoint["content_sha256"] = _digest(checkpoint)
    atomic_save(checkpoint, path)
    return path


TAMPERING = {
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
    "nan dropout": (lambda c: c["model_config"].update(dropout=math.nan), "dropout must be a finite number"),
    "string bool": (lambda c: c["model_config"].update(norm_first="yes"), "norm_first must be True or False"),
    "unknown field": (lambda c: c["model_config"].update(colour="red"), "unknown field 'colour'"),
}


@pytest.mark.parametrize("case", list(TAMPERING))
def test_tampered_checkpoint_contents_are_validated_on_load(case, tmp_path, capsys):
    from companion.data import SubwordTokenizer

    change, message = TAMPERING[case]
    tok = SubwordTokenizer.train(["a man rides a bike .", "ein mann fährt rad ."] * 5, vocab_size=60)
    model = Transformer(
        TransformerConfig(
            tok.vocab_size,
            tok.vocab_size,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=32,
            dropout=0.0,
        )
    )
    path = save_checkpoint(tmp_path / "m.pt", model=model, step=1, tokenizers={"src": tok, "tgt": tok})
    _resealed(path, change)
    assert main(["translate", "--checkpoint", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_decode_checks_the_source_mask_shape_exactly(tiny_model, tokens):
    model = tiny_model()
    src = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8], [5, 6, 0, 0]])  # batch 3 == target length 3
    memory, mask = model.encode(src)
    tgt = tokens(3, 3, 19)
    with pytest.raises(ValueError, match=r"src_mask must be .*\[3, 1, 1, 4\].* shape \[3, 4\]"):
        model.decode(tgt, memory, src != 0)  # 2-D: used to broadcast silently over the target positions
    with pytest.raises(ValueError, match="src_mask must be"):
        model.decode(tgt, memory, mask.float())
    assert torch.equal(model.decode(tgt, memory, mask), model(src, tgt))


def test_api_errors_are_named_value_and_type_errors(tiny_model, tokens):
    from companion.attention import MultiHeadAttention
    from companion.decode import translate_ids
    from companion.train import label_smoothed_loss

    model = tiny_model()
    with pytest.raises(TypeError, match=r"src must hold integer token ids \(torch.long\), got dtype torch.uint8"):
        model(tokens(2, 3, 23).to(torch.uint8), tokens(2, 3, 19))
    mha = MultiHeadAttention(16, 2)
    x = torch.zeros(1, 2, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="dtype torch.float32"):
        mha(x, x, x)
    with pytest.raises(ValueError, match=r"target holds token id 7, outside the vocabulary \[0, 5\)"):
        label_smoothed_loss(torch.zeros(1, 2, 5), torch.tensor([[1, 7]]))
    with pytest.raises(ValueError, match="device must be .*'gpu0'"):
        translate_ids(model, [[5, 3]], device="gpu0")
    memory, mask = model.encode(tokens(2, 3, 23))
    cache = model.new_cache()
    model.decode(tokens(2, 1, 19), memory, mask, cache=cache)
    with pytest.raises(ValueError, match="cache holds 2 rows but query has batch size 1"):
        model.decode(tokens(1, 1, 19), memory[:1], mask[:1], cache=cache)


def test_bpe_vocabulary_larger_than_asked_warns(tmp_path):
    folder = write_corpus(tmp_path / "data")
    with pytest.warns(UserWarning, match=r"--vocab-size 5: the BPE vocabulary has \d+ entries"):
        assert (
            main(
                [
                    "train",
                    "--preset",
                    "tiny",
                    "--tokenizer",
                    "bpe",
                    "--vocab-size",
                    "5",
                    "--data-dir",
                    str(folder),
                    "--max-steps",
                    "1",
                    "--device",
                    "cpu",
                    "--no-progress",
                    "--threads",
                    "1",
                    "--out",
                    str(tmp_path / "run"),
                ]
            )
            == 0
        )


def test_average_last_beyond_keep_last_is_refused_and_too_few_checkpoints_warn(tmp_path, capsys):
    assert (
        main([*COPY, "--max-steps", "1", "--keep-last", "1", "--average-last", "5", "--out", str(tmp_path / "a")]) == 2
    )
    assert "--average-last 5 averages more checkpoints than --keep-last 1" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="--average-last 3: the run wrote only 2 checkpoint"):
        assert (
            main(
                [
                    *COPY,
                    "--max-steps",
                    "2",
                    "--save-every",
                    "1",
                    "--average-last",
                    "3",
                    "--save-every",
                    "1",
                    "--out",
                    str(tmp_path / "b"),
                ]
            )
            == 0
        )


def test_accum_steps_beyond_the_batches_of_an_epoch_is_refused(tmp_path, capsys):
    assert main([*COPY, "--max-steps", "1", "--accum-steps", "1000", "--out", str(tmp_path / "run")]) == 2
    assert "--accum-steps 1000 is more than the" in capsys.readouterr().err


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    import gzip

    from companion.data import load_multi30k

    folder = write_corpus(tmp_path / "data")
    (folder / "train.en.gz").write_bytes(
        gzip.compress("\ufeff".encode() + gzip.decompress((folder / "train.en.gz").read_bytes()))
    )
    assert load_multi30k("en", "de", folder)["train"][0][0] == "a man number 0 ."


def test_resuming_below_the_current_step_is_refused_without_touching_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "3", "--out", str(out)]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}
    for steps in ("2", "3"):
        assert main([*COPY, "--max-steps", steps, "--out", str(out), "--resume"]) == 2
        assert f"is at step 3, and --max-steps {steps} is not beyond it" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()} == before


def test_all_empty_data_names_the_files(tmp_path, capsys):
    folder = write_corpus(tmp_path / "data", {"train": [("", "ein mann ."), ("   ", "")]})
    with pytest.warns(UserWarning, match="dropped 2 pair"):
        assert main(one_step_run(folder, tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'train.en.gz'} and {folder / 'train.de.gz'} hold no sentence pair" in err


def test_main_reports_only_the_packages_own_errors(tmp_path, monkeypatch, capsys):
    from companion import runs

    def bug(*args, **kwargs):
        raise ValueError("a bug, not a user error")

    monkeypatch.setattr(runs.train, "build_run_data", bug)
    with pytest.raises(ValueError, match="a bug"):  # a traceback, not "error:" with exit 2
        main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "x")])
    assert "error:" not in capsys.readouterr().err


# ========================================================================================================
# Defaults a user meets
# ========================================================================================================
MEASURED_SETTINGS = (
    "preset",
    "tokenizer",
    "min_freq",
    "average_last",
    "keep_last",
    "save_every_minutes",
    "d_model",
    "num_heads",
    "layers",
    "d_ff",
    "norm_first",
    "max_tokens",
    "warmup",
    "lr_factor",
)


def test_the_shortest_command_trains_the_measured_setting():
    from pathlib import Path

    from companion.cli import build_parser
    from companion.runs import option_fields

    bench = json.loads(
        (Path(__file__).resolve().parents[2] / "bench" / "results" / "multi30k_cpu_de-en.json").read_text(
            encoding="utf-8"
        )
    )
    measured = bench["results"]["de-en"]["config"]
    args = build_parser().parse_args(["train", "--src", "de", "--tgt", "en", "--max-minutes", "12", "--out", "run"])
    names = {f.name for f in option_fields(RunConfig)}
    config = RunConfig(**{k: v for k, v in vars(args).items() if k in names})
    # the results file records the flags the benchmark passed; the preset fills in the rest, for both alike
    measured_config = RunConfig(**{k: v for k, v in measured.items() if k in names})
    assert {name: getattr(config, name) for name in MEASURED_SETTINGS} == {
        name: getattr(measured_config, name) for name in MEASURED_SETTINGS
    }


def test_explicit_flags_beat_the_defaults():
    assert RunConfig(max_minutes=3, tokenizer="bpe").tokenizer == "bpe"
    timed = RunConfig(max_minutes=3, save_every=50)
    assert (timed.save_every_minutes, timed.average_last) == (None, 5)
    assert RunConfig(max_minutes=3, average_last=1).average_last == 1
    assert RunConfig(max_minutes=3, keep_last=2).average_last == 2  # never more than are kept
    assert RunConfig(max_minutes=3, save_every_minutes=0.5).save_every_minutes == 0.5
    by_steps = RunConfig(max_steps=10)  # no time budget: no periodic checkpoints, nothing to average
    assert (by_steps.save_every_minutes, by_steps.average_last) == (None, 1)


def test_train_help_says_what_the_defaults_are_and_why(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Defaults: the best setting measured on Multi30k" in text
    assert "bench/results/multi30k_cpu_de-en.json" in text
    assert "--tokenizer word" in text and "--save-every-minutes 1" in text and "--average-last 5" in text
