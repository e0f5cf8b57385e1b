"""Command line: help texts, the console entry point, device and data errors, and a Multi30k round trip (the run
layer's own behaviour is tested in tests/unit/runs/)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _run_helpers import COPY

from companion import runs
from companion.checkpoint import list_checkpoints, load_checkpoint
from companion.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]


def multi30k_dir() -> Path | None:
    """``$COMPANION_DATA_DIR`` or ``<repo>/../shared/data/multi30k``, if it holds the data."""
    for candidate in (os.environ.get("COMPANION_DATA_DIR"), REPO.parent / "shared" / "data" / "multi30k"):
        if candidate and (Path(candidate) / "train.de.gz").is_file():
            return Path(candidate)
    return None


DATA = multi30k_dir()


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def subcommand_parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


@pytest.mark.parametrize("command", ["train", "translate", "evaluate", "choose-alpha"])
def test_help_documents_every_flag(command, capsys):
    parser = subcommand_parsers()[command]
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    flags = [opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")]
    assert len(flags) >= (30 if command == "train" else 5)
    for action in parser._actions:
        if action.option_strings:
            assert action.help and len(action.help) > 10, action.option_strings
    for flag in flags:
        assert flag in text, flag
    if command == "train":
        for flag in (
            "--preset",
            "--src",
            "--tgt",
            "--data-dir",
            "--tokenizer",
            "--max-tokens",
            "--max-steps",
            "--max-minutes",
            "--device",
            "--out",
            "--seed",
            "--accum-steps",
            "--label-smoothing",
            "--warmup",
            "--lr-factor",
            "--compile",
            "--clip-grad",
            "--average-last",
            "--resume",
            "--overwrite",
        ):
            assert flag in flags


@pytest.mark.slow
def test_console_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "companion", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "translate" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_fails_clearly(tmp_path, capsys):
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "x"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--device cpu" in err


@pytest.mark.skipif(DATA is None, reason="Multi30k not found: set COMPANION_DATA_DIR or place it in ../shared/data")
@pytest.mark.slow
def test_multi30k_round_trip_train_translate_evaluate(tmp_path, capsys, monkeypatch):
    out = tmp_path / "de-en"
    code = main(
        [
            "train",
            "--preset",
            "tiny",
            "--src",
            "de",
            "--tgt",
            "en",
            "--data-dir",
            str(DATA),
            "--limit-train",
            "2000",
            "--tokenizer",
            "bpe",
            "--vocab-size",
            "1000",
            "--max-steps",
            "4",
            "--out",
            str(out),
            "--no-progress",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--average-last",
            "2",
            "--save-every",
            "2",
            "--no-choose-alpha",  # 4 steps: a choice on 1,014 sentences would measure nothing (test_choose.py)
        ]
    )
    assert code == 0
    assert "de -> en" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    assert run["args"]["src"] == "de" and run["args"]["tokenizer"] == "bpe"

    lines = ["Ein Mann fährt Fahrrad.", "", "Zwei Hunde spielen im Schnee.", "   "]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["translate", "--checkpoint", str(out), "--beam-size", "2", "--device", "cpu"]) == 0
    translated = capsys.readouterr().out.split("\n")
    assert len(translated) == len(lines) + 1 and translated[-1] == ""
    assert translated[1] == "" and translated[3] == ""  # empty lines stay empty, in place

    source_file = tmp_path / "in.de"
    source_file.write_text("Ein Mann fährt Fahrrad.\n", encoding="utf-8")
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(out / "averaged.pt"),
                "--input",
                str(source_file),
                "--beam-size",
                "1",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1

    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(out),
                "--split",
                "test",
                "--limit",
                "8",
                "--beam-size",
                "2",
                "--data-dir",
                str(DATA),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    report = capsys.readouterr().out
    assert "de->en test_2016_flickr (8 sentences" in report
    assert re.search(r"BLEU = \d+\.\d\d .*nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:", report)
    assert re.search(r"chrF = \d+\.\d\d .*nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no", report)

    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(out),
                "--limit",
                "4",
                "--beam-size",
                "1",
                "--json",
                "--data-dir",
                str(DATA),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["sentences"] == 4 and result["direction"] == "de->en" and 0 <= result["bleu"] <= 100


@pytest.mark.skipif(DATA is None, reason="Multi30k not found: set COMPANION_DATA_DIR or place it in ../shared/data")
@pytest.mark.slow
def test_word_tokenizer_run_translates(tmp_path, capsys, monkeypatch):
    out = tmp_path / "en-de"
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny",
                "--tokenizer",
                "word",
                "--data-dir",
                str(DATA),
                "--limit-train",
                "1000",
                "--max-steps",
                "2",
                "--out",
                str(out),
                "--no-progress",
                "--device",
                "cpu",
                "--threads",
                "1",
                "--no-choose-alpha",
            ]
        )
        == 0
    )
    checkpoint = load_checkpoint(list_checkpoints(out / "checkpoints")[-1])
    assert checkpoint["tokenizers"]["src"]["type"] == "word" and checkpoint["tokenizers"]["src"]["language"] == "en"
    assert checkpoint["tokenizers"]["tgt"]["language"] == "de"
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("A dog runs.\nA zzyzx qwerty.\n"))
    assert main(["translate", "--checkpoint", str(out), "--beam-size", "1", "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


# --------------------------------------------------------------------------------------------------------
# Errors: without a traceback only on purpose
# --------------------------------------------------------------------------------------------------------
def test_missing_data_folder_is_a_clear_error(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny",
                "--data-dir",
                str(tmp_path / "absent"),
                "--max-steps",
                "1",
                "--out",
                str(tmp_path / "x"),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    assert "is not a folder" in capsys.readouterr().err


def test_a_programming_error_keeps_its_traceback(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ValueError("a bug, not a user error")

    monkeypatch.setattr(runs.train, "build_run_data", broken)
    with pytest.raises(ValueError, match="a bug"):
        main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "x")])
    assert "error:" not in capsys.readouterr().err


def _read_until(fd: int, wanted: str, limit_s: float = 120.0) -> str:
    """What a pseudo-terminal shows until ``wanted`` appears (or the process ends, or ``limit_s`` passes: a safety
    net against a hung test, not a speed check)."""
    import select
    import time

    shown = b""
    give_up = time.monotonic() + limit_s
    while wanted.encode() not in shown and time.monotonic() < give_up:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the process ended (Linux reports EIO)
                break
            if not chunk:
                break
            shown += chunk
    return shown.decode("utf-8", errors="replace")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal as Linux has it")
def test_translate_at_a_real_terminal_answers_each_line_as_it_is_typed():
    import pty

    import companion

    shipped = companion.load_pretrained("de-en", download=False)
    pid, fd = pty.fork()
    if pid == 0:  # the child: companion translate with the terminal as stdin, stdout and stderr
        os.execv(sys.executable, [sys.executable, "-m", "companion", "translate", "--pretrained", "de-en"])
    try:
        assert "type a sentence and press Enter" in _read_until(fd, "Ctrl-D")
        for sentence in ("Ein Hund läuft durch den Schnee.", "Zwei Männer spielen Fußball."):
            expected = shipped.translate(sentence)
            os.write(fd, f"{sentence}\n".encode())
            assert expected in _read_until(fd, expected)  # answered while the terminal is still open
        os.write(fd, b"\x04")  # Ctrl-D: end of input
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
        if pid:  # a failed check leaves no process behind
            os.kill(pid, 9)
            os.waitpid(pid, 0)


def test_ctrl_c_during_training_exits_130_and_says_how_to_go_on(tmp_path, monkeypatch, capsys):
    """An interrupted `train` ends without a traceback, with the shell's exit code for Ctrl-C, and names the
    checkpoint that --resume goes on from (or says there is none yet)."""
    import companion.cli as cli

    out = tmp_path / "run"

    def interrupted(options, command):
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        for step in (50, 100):
            (out / "checkpoints" / f"step_{step:08d}.pt").write_bytes(b"")
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "train_run", interrupted)
    assert cli.main(["train", "--max-steps", "1000", "--out", str(out)]) == cli.EXIT_INTERRUPTED
    error = capsys.readouterr().err
    latest = out / "checkpoints" / "step_00000100.pt"
    assert f"interrupted. The latest checkpoint is {latest} (step 100)" in error
    assert f"companion train --resume --out {out}" in error and "Traceback" not in error

    def interrupted_early(options, command):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "train_run", interrupted_early)
    assert cli.main(["train", "--max-steps", "1000", "--out", str(tmp_path / "new")]) == cli.EXIT_INTERRUPTED
    assert "holds no checkpoint yet: run the same command again" in capsys.readouterr().err
