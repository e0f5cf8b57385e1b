"""Command line: help texts, output-folder safety, resume, device errors and a Multi30k round trip."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from companion import runs
from companion.checkpoint import list_checkpoints, load_checkpoint
from companion.cli import build_parser, main
from companion.errors import ConfigError, RunError
from companion.runs import RunConfig, add_options, option
from companion.train import TrainConfig

REPO = Path(__file__).resolve().parents[2]


def multi30k_dir() -> Path | None:
    """``$COMPANION_DATA_DIR`` or ``<repo>/../shared/data/multi30k``, if it holds the data."""
    for candidate in (os.environ.get("COMPANION_DATA_DIR"), REPO.parent / "shared" / "data" / "multi30k"):
        if candidate and (Path(candidate) / "train.de.gz").is_file():
            return Path(candidate)
    return None


DATA = multi30k_dir()
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


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def subcommand_parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


@pytest.mark.parametrize("command", ["train", "translate", "evaluate"])
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


@pytest.mark.slow
def test_out_folder_with_a_run_is_refused_then_overwritten_or_resumed(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "3", "--save-every", "1", "--out", str(out)]) == 0
    assert [p.name for p in list_checkpoints(out / "checkpoints")][-1] == "step_00000003.pt"
    (out / "notes.txt").write_text("mine")
    first_log = (out / "metrics.jsonl").read_bytes()

    assert main([*COPY, "--max-steps", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--resume" in err and "--overwrite" in err
    assert (out / "metrics.jsonl").read_bytes() == first_log  # nothing touched

    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume", "--preset", "small"]) == 2
    assert "--preset 'small' (the run used 'tiny')" in capsys.readouterr().err
    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume", "--heads", "2"]) == 2
    assert "--heads 2 (the run used 4)" in capsys.readouterr().err  # the flag's name, not the field's
    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume", "--norm-first"]) == 2
    assert "--norm-first (the run used False)" in capsys.readouterr().err

    assert main([*COPY, "--max-steps", "5", "--out", str(out), "--resume"]) == 0
    assert "resumed at step 3" in capsys.readouterr().out
    assert load_checkpoint(list_checkpoints(out / "checkpoints")[-1])["step"] == 5
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps)

    assert main([*COPY, "--max-steps", "2", "--out", str(out), "--overwrite"]) == 0
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step_00000002.pt"]
    assert (out / "notes.txt").read_text() == "mine"  # only the run's own files were replaced

    assert main([*COPY, "--max-steps", "2", "--out", str(tmp_path / "fresh"), "--resume"]) == 2
    assert "no run to resume" in capsys.readouterr().err


def test_training_needs_a_limit_and_an_out_folder(tmp_path, capsys):
    assert main([*COPY, "--out", str(tmp_path / "x")]) == 2
    assert "--max-steps" in capsys.readouterr().err
    assert main([*COPY, "--max-steps", "1"]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_fails_clearly(tmp_path, capsys):
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "x"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--device cpu" in err


def test_averaging_the_last_checkpoints(tmp_path, capsys):
    out = tmp_path / "avg"
    assert main([*COPY, "--max-steps", "6", "--save-every", "2", "--average-last", "3", "--out", str(out)]) == 0
    averaged = load_checkpoint(out / "averaged.pt")
    assert averaged["averaged_from"] == ["step_00000002.pt", "step_00000004.pt", "step_00000006.pt"]
    assert "averaged 3" in capsys.readouterr().out


def test_translate_and_evaluate_refuse_bad_checkpoints(tmp_path, capsys):
    out = tmp_path / "copy"
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0
    assert main(["translate", "--checkpoint", str(out), "--device", "cpu"]) == 2
    assert "synthetic task" in capsys.readouterr().err
    broken = tmp_path / "broken.pt"
    broken.write_bytes(list_checkpoints(out / "checkpoints")[0].read_bytes()[:1000])
    assert main(["evaluate", "--checkpoint", str(broken), "--device", "cpu"]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(tmp_path / "nothing.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err


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
        ]
    )
    assert code == 0
    assert "de->en" in capsys.readouterr().out
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
# The run configuration: one declaration per option, checked once, errors without traceback only on purpose
# --------------------------------------------------------------------------------------------------------
def train_flags_by_dest() -> dict[str, list[str]]:
    parser = subcommand_parsers()["train"]
    flags: dict[str, list[str]] = {}
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            flags.setdefault(action.dest, []).extend(action.option_strings)
    return flags


def test_every_run_option_has_a_flag_is_recorded_and_reaches_the_trainer(tmp_path):
    names = [f.name for f in dataclasses.fields(RunConfig)]
    assert set(train_flags_by_dest()) == set(names)  # one flag (or switch pair) per field, nothing else
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "1", "--out", str(out)]) == 0
    recorded = json.loads((out / "run.json").read_text())["args"]
    assert list(recorded) == names
    assert RunConfig.from_record(recorded) == RunConfig(**{**recorded})
    trainer_fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"betas", "eps"}
    assert trainer_fields <= set(names)  # so RunConfig.train_config() sets every Trainer option
    config = RunConfig.from_record(recorded).train_config()
    assert all(getattr(config, name) == recorded[name] for name in trainer_fields)


def test_a_new_option_is_declared_once_and_appears_in_the_cli_the_record_and_resume():
    @dataclasses.dataclass
    class WithKnob(RunConfig):
        knob: int = option(3, "a new setting (default: {default})", metavar="N", group="optimisation")
        knob_log: int = option(
            5, "a new logging setting (default: {default})", metavar="N", group="run", resumable=True
        )

    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    add_options(parser, WithKnob, suppress_defaults=True)
    assert "--knob N" in parser.format_help() and "(default: 3)" in parser.format_help()
    given = vars(parser.parse_args(["--knob", "7", "--max-steps", "1", "--task", "copy"]))
    assert given == {"knob": 7, "max_steps": 1, "task": "copy"}
    recorded = WithKnob(**given).to_dict()
    assert recorded["knob"] == 7 and recorded["knob_log"] == 5
    assert WithKnob.resumed(recorded, {"knob_log": 9, "max_steps": 2}).knob_log == 9
    with pytest.raises(RunError, match=r"--knob 8 \(the run used 7\)"):
        WithKnob.resumed(recorded, {"knob": 8})
    older = {k: v for k, v in recorded.items() if not k.startswith("knob")}  # a run recorded before the knob
    assert WithKnob.from_record(older).knob == 3


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--lr-factor", "inf", "--lr-factor must be a finite number"),
        ("--lr-factor", "nan", "--lr-factor must be a finite number"),
        ("--max-minutes", "inf", "--max-minutes must be a finite number"),
        ("--save-every-minutes", "nan", "--save-every-minutes must be a finite number"),
        ("--clip-grad", "-1", "--clip-grad must be a positive number"),
        ("--dropout", "1.0", r"--dropout must be a number in \[0, 1\)"),
        ("--label-smoothing", "nan", "--label-smoothing must be a finite number"),
        ("--max-steps", "0", "--max-steps must be a positive integer"),
        ("--seed", "-1", "--seed must be an integer >= 0"),
        ("--synthetic-vocab", "4", "--synthetic-vocab must be an integer >= 5"),
        ("--heads", "3", "d_model must be divisible by num_heads"),
    ],
)
def test_bad_option_values_are_reported_with_their_flag(flag, value, message, tmp_path, capsys):
    out = tmp_path / "x"
    assert main([*COPY, "--max-steps", "1", "--out", str(out), flag, value]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()  # checked before anything is written
    given = {
        k: v
        for k, v in vars(build_parser().parse_args([*COPY, "--max-steps", "1", flag, value])).items()
        if k != "command"
    }
    with pytest.raises(ConfigError, match=message):  # the same check for library callers
        RunConfig(**given)


@pytest.mark.parametrize("flag, value", [("--alpha", "nan"), ("--alpha", "-0.5"), ("--beam-size", "0")])
def test_bad_decoding_options_are_reported_with_their_flag(flag, value, capsys):
    assert main(["translate", "--checkpoint", "nothing.pt", flag, value]) == 2
    assert f"{flag} must be" in capsys.readouterr().err


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


def test_an_out_folder_that_cannot_be_made_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "a_file").write_text("not a folder")
    assert main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "a_file" / "run")]) == 2
    assert "cannot create the folder" in capsys.readouterr().err


def test_a_programming_error_keeps_its_traceback(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ValueError("a bug, not a user error")

    monkeypatch.setattr(runs.train, "build_run_data", broken)
    with pytest.raises(ValueError, match="a bug"):
        main([*COPY, "--max-steps", "1", "--out", str(tmp_path / "x")])
    assert "error:" not in capsys.readouterr().err


def test_presets_are_one_table_shared_by_the_cli_and_the_model():
    from companion.model import MODEL_PRESETS, TransformerConfig
    from companion.runs import TRAINING_PRESETS

    assert list(MODEL_PRESETS) == list(TRAINING_PRESETS) == ["tiny", "small", "base", "big"]
    for name in MODEL_PRESETS:
        config = RunConfig(preset=name, max_steps=1, tokenizer="bpe").model_config(37000, 37000)
        assert config == TransformerConfig.from_preset(name, 37000, 37000, max_len=256)
        assert RunConfig(preset=name, max_steps=1).max_tokens == TRAINING_PRESETS[name]["max_tokens"]
    assert TransformerConfig.base(37000, 37000) == TransformerConfig.from_preset("base", 37000, 37000)
    explicit = RunConfig(preset="base", max_steps=1, d_model=256, warmup=10)
    assert (explicit.d_model, explicit.num_heads, explicit.warmup) == (256, 8, 10)  # flag > preset > default
