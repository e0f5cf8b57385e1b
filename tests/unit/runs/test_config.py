"""The run config: one declaration per option (type, default, help, flag, resumability), composed of a data, a
model and a training section, checked once by the class that declares each value, and its flat record."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from _run_helpers import COPY

from companion import TransformerConfig
from companion.checkpoint import list_checkpoints
from companion.cli import build_parser, main
from companion.errors import ConfigError, RunError
from companion.options import option, option_fields, option_spec
from companion.presets import DEFAULT_AVERAGE_LAST, PRESETS
from companion.runs import SECTIONS, DataConfig, ModelOptions, RunConfig, add_options, given_options
from companion.train import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[3]


def parsed_train(*flags: str) -> dict:
    """What ``companion train FLAGS`` hands to the run: the given options by field name."""
    return given_options(build_parser().parse_args(["train", *flags]), SECTIONS)


# -- one declaration per option ---------------------------------------------------------------------------
def test_every_flag_belongs_to_exactly_one_section_field():
    fields_by_section = {section: {f.name for f in option_fields(section)} for section in SECTIONS}
    names = [name for fields in fields_by_section.values() for name in fields]
    assert len(names) == len(set(names))  # no option declared twice
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    add_options(parser, SECTIONS, suppress_defaults=True)
    dests = {action.dest for action in parser._actions if action.option_strings and action.dest != "help"}
    assert dests == set(names)
    assert fields_by_section[TrainConfig] >= {"label_smoothing", "keep_last", "log_every", "warmup", "seed"}


def test_label_smoothing_goes_from_the_flag_to_the_trainer_config_unchanged():
    config = RunConfig.from_options(parsed_train("--label-smoothing", "0.2", "--max-steps", "1"))
    assert isinstance(config.train, TrainConfig) and config.train.label_smoothing == 0.2
    assert [f.name for f in dataclasses.fields(RunConfig) if f.name == "label_smoothing"] == []  # not mirrored


def test_a_value_is_checked_by_the_class_that_declares_it_and_named_by_field_and_flag():
    with pytest.raises(ConfigError, match=re.escape("label_smoothing (--label-smoothing) must be a number in [0, 1)")):
        TrainConfig(max_steps=1, label_smoothing=1.5)
    with pytest.raises(ConfigError, match=re.escape("label_smoothing (--label-smoothing) must be a number in [0, 1)")):
        RunConfig.from_options({"max_steps": 1, "label_smoothing": 1.5})
    with pytest.raises(ConfigError, match=re.escape("vocab_size (--vocab-size) must be an integer >= 5")):
        DataConfig(vocab_size=4)
    message = "invalid model options: d_model (--d-model) must be divisible by num_heads (--heads), got d_model=30"
    with pytest.raises(ConfigError, match=re.escape(message)):  # the model's rule, in the command line's words
        ModelOptions(d_model=30, num_heads=4, num_encoder_layers=1, d_ff=8, dropout=0.0, norm_first=False)


def test_a_new_option_is_declared_once_and_appears_in_the_cli_the_record_and_resume():
    @dataclasses.dataclass
    class WithKnob(DataConfig):
        knob: int = option(3, "a new setting (default: {default})", metavar="N", group="data")

    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    add_options(parser, WithKnob, suppress_defaults=True)
    assert "--knob N" in parser.format_help() and "(default: 3)" in parser.format_help()
    assert vars(parser.parse_args(["--knob", "7", "--task", "copy"])) == {"knob": 7, "task": "copy"}
    assert option_spec(next(f for f in dataclasses.fields(WithKnob) if f.name == "knob")).resumable is False


def test_the_record_is_flat_and_reads_back_to_the_same_config(tmp_path):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "1", "--layers", "1", "--out", str(out)]) == 0
    recorded = json.loads((out / "run.json").read_text())["args"]
    assert recorded["num_encoder_layers"] == recorded["num_decoder_layers"] == 1 and recorded["label_smoothing"] == 0.1
    config = RunConfig.from_record(recorded)
    assert config.to_record() == recorded
    assert config.model_config(20, 20).num_decoder_layers == 1


def test_decoder_layers_may_differ_from_the_encoders_and_default_to_them(tmp_path):
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "1", "--layers", "3", "--decoder-layers", "1", "--out", str(out)]) == 0
    recorded = json.loads((out / "run.json").read_text())["args"]
    assert (recorded["num_encoder_layers"], recorded["num_decoder_layers"]) == (3, 1)
    model = RunConfig.from_record(recorded).model_config(20, 20)
    assert (model.num_encoder_layers, model.num_decoder_layers) == (3, 1)
    checkpoint = torch.load(list_checkpoints(out / "checkpoints")[-1], map_location="cpu", weights_only=True)
    decoder_layers = {key.split(".")[2] for key in checkpoint["model_state"] if key.startswith("decoder.layers.")}
    assert decoder_layers == {"0"}  # the model that was trained has one decoder layer
    small = PRESETS["small"].model["num_encoder_layers"]
    only_decoder = RunConfig.from_options(parsed_train("--decoder-layers", "1", "--max-steps", "1")).model
    assert (only_decoder.num_encoder_layers, only_decoder.num_decoder_layers) == (small, 1)  # encoder: the preset's
    only_layers = RunConfig.from_options(parsed_train("--layers", "3", "--max-steps", "1")).model
    assert only_layers.num_decoder_layers == 3  # the paper's one N for both stacks
    neither = RunConfig.from_options(parsed_train("--max-steps", "1")).model
    assert (neither.num_encoder_layers, neither.num_decoder_layers) == (small, small)  # the small preset: 2 and 2


def test_a_record_written_before_the_sections_still_reads():
    old = json.loads((REPO / "tests/integration/fixtures/copy_run/run.json").read_text())["args"]
    assert "layers" in old and "num_encoder_layers" not in old
    config = RunConfig.from_record(old)
    assert config.model.num_encoder_layers == config.model.num_decoder_layers == old["layers"]
    assert config.train.keep_last == old["keep_last"] and config.data.task == old["task"]


def test_presets_are_one_table_for_the_model_and_the_training():
    assert list(PRESETS) == ["tiny", "small", "base", "big"]
    for name, preset in PRESETS.items():
        config = RunConfig.from_options({"preset": name, "max_steps": 1, "tokenizer": "bpe"})
        assert config.model_config(37000, 37000) == TransformerConfig.from_preset(name, 37000, 37000, max_len=256)
        assert (config.data.max_tokens, config.train.warmup) == (preset.data["max_tokens"], preset.train["warmup"])
    assert TransformerConfig.base(37000, 37000) == TransformerConfig.from_preset("base", 37000, 37000)
    explicit = RunConfig.from_options({"preset": "base", "max_steps": 1, "d_model": 256, "warmup": 10})
    assert (explicit.model.d_model, explicit.model.num_heads, explicit.train.warmup) == (256, 8, 10)


def test_sections_given_directly_take_the_rest_from_the_preset():
    config = RunConfig(train=TrainConfig(max_steps=1), model=ModelOptions(d_model=32), preset="tiny")
    assert (config.model.d_model, config.model.num_heads, config.data.max_tokens) == (32, 4, 2000)
    with pytest.raises(ConfigError, match="train must be a TrainConfig"):
        RunConfig(train={"max_steps": 1})  # type: ignore[arg-type]


def test_unknown_options_are_named():
    with pytest.raises(ConfigError, match=r"unknown RunConfig options: \['colour'\]"):
        RunConfig.from_options({"max_steps": 1, "colour": "red"})


# -- bad values, from the command line and from the API -----------------------------------------------------
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
    with pytest.raises(ConfigError, match=re.escape(f"{field} ({flag})")):
        TrainConfig(max_steps=1, **{field: value})
    with pytest.raises(ConfigError, match=re.escape(f"{field} ({flag})")):
        RunConfig.from_options({"max_steps": 1, field: value})
    assert main([*COPY, "--max-steps", "1", f"{flag}={value}", "--out", str(tmp_path / "run")]) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--lr-factor", "inf", r"\(--lr-factor\) must be a finite number"),
        ("--lr-factor", "nan", r"\(--lr-factor\) must be a finite number"),
        ("--max-minutes", "inf", r"\(--max-minutes\) must be a finite number"),
        ("--save-every-minutes", "nan", r"\(--save-every-minutes\) must be a finite number"),
        ("--clip-grad", "-1", r"\(--clip-grad\) must be a positive number"),
        ("--dropout", "1.0", r"dropout \(--dropout\) must be"),
        ("--label-smoothing", "nan", r"\(--label-smoothing\) must be a finite number"),
        ("--max-steps", "0", r"\(--max-steps\) must be a positive integer"),
        ("--seed", "-1", r"\(--seed\) must be an integer in \[0, 4294967295\]"),
        ("--synthetic-vocab", "4", r"\(--synthetic-vocab\) must be an integer >= 5"),
        ("--heads", "3", r"d_model \(--d-model\) must be divisible by num_heads \(--heads\)"),
        ("--decoder-layers", "0", r"num_decoder_layers \(--decoder-layers\) must be a positive integer"),
        ("--decoder-layers", "-2", r"num_decoder_layers \(--decoder-layers\) must be a positive integer"),
        ("--layers", "0", r"num_encoder_layers \(--layers\) must be a positive integer"),  # it sets the decoder's too
    ],
)
def test_bad_option_values_are_reported_with_their_flag(flag, value, message, tmp_path, capsys):
    out = tmp_path / "x"
    assert main([*COPY, "--max-steps", "1", "--out", str(out), flag, value]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()  # checked before anything is written
    with pytest.raises(ConfigError, match=message):  # the same check for library callers
        RunConfig.from_options(parsed_train(*COPY[1:], "--max-steps", "1", flag, value))


def test_training_needs_a_limit(tmp_path, capsys):
    with pytest.raises(ConfigError, match="set a limit: max_steps"):
        TrainConfig()
    assert main([*COPY, "--out", str(tmp_path / "x")]) == 2
    assert "--max-steps" in capsys.readouterr().err


def test_average_last_beyond_keep_last_is_refused(tmp_path, capsys):
    with pytest.raises(ConfigError, match="--average-last 5 averages more checkpoints than --keep-last 1"):
        RunConfig.from_options({"max_steps": 1, "keep_last": 1, "average_last": 5})
    out = tmp_path / "a"
    assert main([*COPY, "--max-steps", "1", "--keep-last", "1", "--average-last", "5", "--out", str(out)]) == 2
    assert "--average-last 5 averages more checkpoints than --keep-last 1" in capsys.readouterr().err


# -- resume: what may change --------------------------------------------------------------------------------
def test_resume_keeps_the_record_and_takes_only_resumable_changes():
    recorded = RunConfig.from_options({"max_steps": 3, "preset": "tiny", "task": "copy"}).to_record()
    resumed = RunConfig.resumed(recorded, {"max_steps": 5, "log_every": 2, "resume": True})
    assert (resumed.train.max_steps, resumed.train.log_every, resumed.model.d_model) == (5, 2, 64)
    with pytest.raises(RunError, match=r"--heads 2 \(the run used 4\)"):
        RunConfig.resumed(recorded, {"num_heads": 2})
    with pytest.raises(RunError, match=r"--post-ln \(the run used True\)"):
        RunConfig.resumed({**recorded, "norm_first": True}, {"norm_first": False})
    with pytest.raises(RunError, match=r"--label-smoothing 0.0 \(the run used 0.1\)"):
        RunConfig.resumed(recorded, {"label_smoothing": 0.0})


# -- the defaults a user meets ------------------------------------------------------------------------------
MEASURED_SETTINGS = {
    "preset": lambda c: c.preset,
    "tokenizer": lambda c: c.data.tokenizer,
    "vocab_size": lambda c: c.data.vocab_size,
    "average_count": lambda c: c.average_count,
    "model": lambda c: c.model,
    "max_tokens": lambda c: c.data.max_tokens,
    "warmup": lambda c: c.train.warmup,
    "lr_factor": lambda c: c.train.lr_factor,
}


# A selection file per direction whose choice on the validation split is the default setting (BPE 8,000 with the
# preset's 1,200-token batches): de-en on 2026-12-04 (41.47 against 39.38 for the word vocabularies), en-de on
# 2026-12-03_pm (37.67 against 37.35); the README's selection table has every file.
SELECTIONS = {
    "de-en": REPO / "bench" / "results" / "selection_multi30k_cpu_2026-12-04.json",
    "en-de": REPO / "bench" / "results" / "selection_multi30k_cpu_2026-12-03_pm.json",
}


@pytest.mark.parametrize("direction", ["de-en", "en-de"])
def test_the_shortest_command_trains_the_setting_chosen_on_validation(direction):
    """The defaults are a candidate that bench/multi30k_select.py chose on the validation split: its command
    (every flag it passed, batch size and vocabulary included) and the shortest command build the same settings
    (min_freq aside: the word vocabularies' option, which a BPE run does not use; the checkpoint spacing aside:
    the selections ran a checkpoint a minute, and bench/checkpoint_spacing.py chose the default's, test below)."""
    entry = json.loads(SELECTIONS[direction].read_text(encoding="utf-8"))["directions"][direction]
    chosen = entry["chosen_on_valid"]
    assert chosen["setting"].startswith(f"last{DEFAULT_AVERAGE_LAST}_")  # the average the default takes
    command = shlex.split(entry["candidates"][chosen["candidate"]]["command"])
    assert command[:4] == ["python", "-m", "companion", "train"]
    measured_config = RunConfig.from_options(parsed_train(*command[4:]))
    src, tgt = direction.split("-")
    budget = measured_config.train.max_minutes  # the selection's 20 minutes: the checkpoint spacing follows it
    config = RunConfig.from_options(
        parsed_train("--src", src, "--tgt", tgt, "--max-minutes", f"{budget:g}", "--out", "run")
    )
    # (the selection kept 10 checkpoints to compare averages of 5 and 10; how many are kept changes no weights)
    assert {name: read(config) for name, read in MEASURED_SETTINGS.items()} == {
        name: read(measured_config) for name, read in MEASURED_SETTINGS.items()
    }


# The checkpoint spacing is chosen by bench/checkpoint_spacing.py (one run, averages at several spacings, each scored
# on the validation split), not by the selection files (those all ran a checkpoint a minute).
SPACING_RUNS = {
    (12.0, "de-en"): "checkpoint_spacing_12min_xeon.json",
    (12.0, "en-de"): "checkpoint_spacing_12min_xeon.json",
    (20.0, "de-en"): "checkpoint_spacing_20min_xeon.json",
    (20.0, "en-de"): "checkpoint_spacing_20min_en-de_xeon.json",
}


@pytest.mark.parametrize(("minutes", "direction"), sorted(SPACING_RUNS))
def test_the_default_checkpoint_spacing_is_the_one_chosen_on_validation(minutes, direction):
    """companion train's spacing for a --max-minutes budget is one that bench/checkpoint_spacing.py measured: at
    12 minutes the best-scoring one, at 20 minutes (where every spacing scored within half a point) within a
    quarter of a BLEU point of the best."""
    record = json.loads((REPO / "bench" / "results" / SPACING_RUNS[minutes, direction]).read_text(encoding="utf-8"))
    assert record["minutes_per_direction"] == minutes and record["split"] == "valid"
    scores = {float(s): a["valid_bleu"] for s, a in record["results"][direction]["averages"].items()}
    spacing = RunConfig.from_options({"max_minutes": minutes}).train.save_every_minutes
    measured = min(scores, key=lambda s: abs(s - spacing))
    assert measured == pytest.approx(spacing, abs=0.005), (spacing, sorted(scores))  # a spacing the run measured
    tolerance = 0.0 if minutes == 12.0 else 0.25
    assert scores[measured] >= max(scores.values()) - tolerance, (spacing, scores)


def test_explicit_flags_beat_the_defaults():
    def build(**options):
        return RunConfig.from_options(options)

    assert build(max_minutes=3, tokenizer="bpe").data.tokenizer == "bpe"
    timed = build(max_minutes=3, save_every=50)
    assert (timed.train.save_every_minutes, timed.average_count) == (None, 5)
    assert build(max_minutes=3, average_last=1).average_count == 1
    assert build(max_minutes=3, keep_last=2).average_count == 2  # never more than are kept
    assert build(max_minutes=3, save_every_minutes=0.5).train.save_every_minutes == 0.5
    assert build(max_minutes=30).train.save_every_minutes == 1.0  # the budget / 30: a checkpoint a minute
    assert build(max_minutes=12).train.save_every_minutes == pytest.approx(0.4)
    assert build(max_minutes=20).train.save_every_minutes == pytest.approx(20 / 30)
    by_steps = build(max_steps=10)  # no time budget: no periodic checkpoints, nothing to average
    assert (by_steps.train.save_every_minutes, by_steps.average_count) == (None, 1)


def test_train_help_says_what_the_defaults_are_and_why(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Defaults: the best setting measured on Multi30k" in text
    assert "bench/multi30k_select.py" in text and "1,200-token batches" in text
    assert "--tokenizer bpe with --vocab-size 8000" in text and "a checkpoint every M/30 minutes" in text
    assert "--average-last 5" in text


def test_the_default_vocabulary_is_one_shared_bpe_but_an_old_record_keeps_its_word_vocabularies():
    fresh = RunConfig.from_options({"max_steps": 1})
    assert fresh.data.tokenizer == "bpe" and fresh.data.vocab_size == 8000 and fresh.data.shares_vocabulary()
    recorded = fresh.to_record()
    assert recorded["tokenizer"] == "bpe" and RunConfig.from_record(recorded).data.tokenizer == "bpe"
    del recorded["tokenizer"]  # a record written before the option was recorded ran with the old default
    assert RunConfig.from_record(recorded).data.tokenizer == "word"
    assert RunConfig.resumed(recorded, {}).data.tokenizer == "word"
    with pytest.raises(RunError, match="--tokenizer 'bpe' \\(the run used 'word'\\)"):
        RunConfig.resumed(recorded, {"tokenizer": "bpe"})  # a resumed run cannot switch its vocabulary


# -- sizes that cannot fit, seeds and lengths that cannot work, contradicting switches ----------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"max_len": 10**9},
        {"d_model": 10**7, "num_heads": 1},
        {"num_encoder_layers": 10**5},
        {"task": "copy", "synthetic_vocab": 10**9},
        {"task": "copy", "num_examples": 10**9},
    ],
    ids=["max_len", "d_model", "layers", "synthetic_vocab", "num_examples"],
)
def test_a_run_that_cannot_fit_in_memory_is_refused_with_the_limit(options):
    with pytest.raises(
        ConfigError, match=r"needs about [\d,.]+ GiB of memory .*more than the [\d,.]+ GiB of this machine"
    ):
        RunConfig.from_options({"max_steps": 1, **options})


def test_threads_and_beam_size_have_upper_bounds(capsys):
    with pytest.raises(ConfigError, match=r"threads \(--threads\) must be an integer in \[1, \d+\], got 100000"):
        RunConfig.from_options({"max_steps": 1, "threads": 100000})
    from companion.runs import TranslateConfig

    with pytest.raises(ConfigError, match=r"beam_size \(--beam-size\) must be an integer in \[1, 1000\], got 20000"):
        TranslateConfig(checkpoint="x.pt", beam_size=20000)
    assert main(["translate", "--checkpoint", "x.pt", "--beam-size", "20000"]) == 2
    assert "[1, 1000]" in capsys.readouterr().err


def test_a_seed_beyond_what_the_batch_order_can_take_is_refused():
    with pytest.raises(ConfigError, match=r"seed \(--seed\) must be an integer in \[0, 4294967295\]"):
        TrainConfig(max_steps=1, seed=18_500_000_000_000)


def test_synthetic_sequences_longer_than_the_model_accepts_are_refused(tmp_path, capsys):
    with pytest.raises(ConfigError, match="--synthetic-max-len 10000 needs --max-len of at least 10001"):
        RunConfig.from_options({"max_steps": 1, "task": "copy", "synthetic_max_len": 10000})
    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "1", "--synthetic-max-len", "300", "--out", str(out)]) == 2
    assert "--synthetic-max-len 300 needs --max-len of at least 301" in capsys.readouterr().err
    assert not out.exists()


def test_norm_first_and_post_ln_together_are_refused(capsys):
    with pytest.raises(SystemExit) as caught:
        main([*COPY, "--max-steps", "1", "--norm-first", "--post-ln", "--out", "x"])
    assert caught.value.code == 2
    assert "--post-ln: not allowed with argument --norm-first" in capsys.readouterr().err
