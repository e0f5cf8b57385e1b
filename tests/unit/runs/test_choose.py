"""``companion choose-alpha``: its options, the choice written into the checkpoint, and translate and evaluate
decoding with it afterwards."""

from __future__ import annotations

import json

import pytest
from _run_helpers import COPY, train_words, write_corpus

from companion.checkpoint import load_checkpoint
from companion.cli import main
from companion.errors import ConfigError
from companion.evaluate import ALPHA_GRID
from companion.pretrained import pretrained_path, shipped_direction
from companion.runs import ChooseAlphaConfig, resolve_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"beam_size": 1}, r"beam_size \(--beam-size\)"),
        ({"alphas": ["1", "x"]}, r"alphas \(--alphas\) must be numbers, got 'x'"),
        ({"alphas": ["1", "1.0"]}, r"alphas \(--alphas\).*distinct"),
        ({"alphas": [0.6, 11]}, r"alphas \(--alphas\).*alphas\[1\]"),
        ({"alphas": []}, r"alphas \(--alphas\).*non-empty"),
        ({"split": "test"}, r"split \(--split\)"),
        ({"src_file": "a.de"}, "--src-file and --ref-file go together"),
        ({"limit": 0}, r"limit \(--limit\)"),
    ],
)
def test_bad_options_are_refused_by_name(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ChooseAlphaConfig(**{"checkpoint": "x.pt", **overrides})


def test_the_grid_defaults_to_the_libraries_and_words_become_numbers():
    assert ChooseAlphaConfig(checkpoint="x.pt").alphas == list(ALPHA_GRID)
    assert ChooseAlphaConfig(checkpoint="x.pt", alphas=["0.5", "2"]).alphas == [0.5, 2.0]


def test_choose_alpha_records_the_choice_and_evaluate_uses_it(tmp_path, capsys):
    data, out = write_corpus(tmp_path / "data"), tmp_path / "run"
    assert train_words(data, out, 30, "--src", "en", "--tgt", "de", "--no-choose-alpha") == 0
    said = capsys.readouterr().out
    assert "not chosen (--no-choose-alpha)" in said and f"companion choose-alpha --checkpoint {out}" in said
    weights = resolve_checkpoint(out)
    assert "decoding" not in load_checkpoint(weights)

    before = weights.read_bytes()
    here = ["--data-dir", str(data)]  # not $COMPANION_DATA_DIR's Multi30k, which evaluate would prefer
    assert (
        main(["choose-alpha", "--checkpoint", str(out), *here, "--alphas", "0", "1", "3", "--dry-run", "--json"]) == 0
    )
    dry = json.loads(capsys.readouterr().out)
    assert dry["recorded"] is False and weights.read_bytes() == before

    assert main(["choose-alpha", "--checkpoint", str(out), *here, "--alphas", "0", "1", "3"]) == 0
    text = capsys.readouterr().out
    recorded = load_checkpoint(weights)["decoding"]
    assert recorded["alpha"] == dry["alpha"] in (0, 1, 3) and recorded["beam_size"] == 4
    assert recorded["chosen_on"] == "valid" and recorded["sentences"] == 40 and set(recorded["bleu"]) == {"0", "1", "3"}
    best = max(recorded["bleu"].values())
    assert recorded["alpha"] == min(float(a) for a, b in recorded["bleu"].items() if b == best)
    assert f"recorded in {weights}" in text and "<- chosen" in text

    assert main(["evaluate", "--checkpoint", str(out), *here, "--split", "valid", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["alpha"] == recorded["alpha"] and evaluated["beam_size"] == 4
    assert evaluated["decoding_from"] == "chosen on valid, recorded in the checkpoint"
    assert evaluated["bleu"] == pytest.approx(recorded["bleu"][f"{recorded['alpha']:g}"], abs=0.005)
    other = 3 if recorded["alpha"] != 3 else 0
    assert main(["evaluate", "--checkpoint", str(out), *here, "--split", "valid", "--alpha", str(other), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["alpha"] == other  # a given alpha wins over the record


def test_a_synthetic_task_checkpoint_is_refused(tmp_path, capsys):
    out = tmp_path / "copy"
    assert main([*COPY, "--max-steps", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["choose-alpha", "--checkpoint", str(out)]) == 2
    assert "synthetic task" in capsys.readouterr().err


def test_a_shipped_model_file_is_never_rewritten(tmp_path, capsys):
    shipped = pretrained_path("en-de")
    original = shipped.read_bytes()
    data = write_corpus(tmp_path / "data")  # en -> de pairs, Multi30k's layout
    args = ["choose-alpha", "--checkpoint", str(shipped), "--data-dir", str(data), "--alphas", "0.6", "2"]
    assert main(args) == 2
    assert "shipped en-de model" in capsys.readouterr().err and shipped.read_bytes() == original
    assert main([*args, "--dry-run", "--json"]) == 0  # looking is allowed
    assert json.loads(capsys.readouterr().out)["recorded"] is False and shipped.read_bytes() == original
    assert shipped_direction(shipped) == "en-de"
    copy = tmp_path / "copy.pt"  # a copy elsewhere is the user's to record into
    copy.write_bytes(original)
    assert shipped_direction(copy) is None
    assert main(["choose-alpha", "--checkpoint", str(copy), "--data-dir", str(data), "--alphas", "0.6", "2"]) == 0
    assert "alpha" in load_checkpoint(copy)["decoding"] and shipped.read_bytes() == original
    assert ChooseAlphaConfig(checkpoint=copy).checkpoint == str(copy)  # a path object is accepted


def test_train_chooses_alpha_on_its_own_validation_split_at_the_end(tmp_path, capsys, monkeypatch):
    pairs = [(f"a dog number {i} .", f"ein hund nummer {i} .") for i in range(25)]
    data = write_corpus(tmp_path / "data", {"val": pairs})
    out = tmp_path / "run"
    # a Multi30k-shaped folder would yield to $COMPANION_DATA_DIR in evaluate: the choice must use the run's own
    monkeypatch.setenv("COMPANION_DATA_DIR", str(write_corpus(tmp_path / "elsewhere")))
    assert train_words(data, out, 30, "--src", "en", "--tgt", "de") == 0
    said = capsys.readouterr().out.splitlines()
    weights = resolve_checkpoint(out)
    recorded = load_checkpoint(weights)["decoding"]
    assert recorded["chosen_on"] == "valid" and recorded["sentences"] == 25 and recorded["beam_size"] == 4
    assert set(recorded["bleu"]) == {f"{a:g}" for a in ALPHA_GRID}
    assert said[-1].startswith(f"companion train: alpha {recorded['alpha']:g} chosen on the validation split (25 ")
    assert f"recorded in {weights}" in said[-1]

    monkeypatch.delenv("COMPANION_DATA_DIR")
    assert main(["evaluate", "--checkpoint", str(out), "--split", "valid", "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["alpha"] == recorded["alpha"] and evaluated["decoding_from"].startswith("chosen on valid")
    assert evaluated["bleu"] == pytest.approx(recorded["bleu"][f"{recorded['alpha']:g}"], abs=0.005)


def test_resume_of_a_run_killed_before_its_averaged_model_also_chooses_alpha(tmp_path, capsys):
    data, out = write_corpus(tmp_path / "data"), tmp_path / "run"
    extra = ["--src", "en", "--tgt", "de", "--save-every", "2", "--average-last", "2"]
    assert train_words(data, out, 6, *extra) == 0
    (out / "averaged.pt").unlink()  # as a kill -9 between the last checkpoint and averaged.pt (and its choice)
    capsys.readouterr()
    assert train_words(data, out, 6, *extra, "--resume") == 0
    said = capsys.readouterr().out
    assert "the run had finished training; averaged 2" in said and "chosen on the validation split (40 " in said
    assert load_checkpoint(out / "averaged.pt")["decoding"]["sentences"] == 40


def test_train_without_a_validation_split_says_how_to_choose_alpha(tmp_path, capsys):
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("".join(f"a man number {i} .\n" for i in range(30)))
    tgt.write_text("".join(f"ein mann nummer {i} .\n" for i in range(30)))
    out = tmp_path / "run"
    only_train = ["--src", "en", "--tgt", "de", "--train", str(src), str(tgt), "--tokenizer", "word"]
    options = ["--preset", "tiny", "--max-steps", "4", "--max-tokens", "200", "--device", "cpu", "--no-progress"]
    assert main(["train", *only_train, *options, "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 0
    said = capsys.readouterr().out.splitlines()[-1]
    assert "not chosen (the run has no validation split: --hold-out N would make one)" in said
    assert f"companion choose-alpha --checkpoint {out} --src-file" in said
    assert "decoding" not in load_checkpoint(resolve_checkpoint(out))


def test_a_failed_choice_warns_and_leaves_the_trained_run_complete(tmp_path, capsys, monkeypatch):
    import companion.runs.train as train_module
    from companion.errors import RunError

    def fail(config):
        raise RunError("the validation files are gone")

    monkeypatch.setattr(train_module, "choose_alpha_run", fail)
    data, out = write_corpus(tmp_path / "data"), tmp_path / "run"
    with pytest.warns(UserWarning, match="the run is trained, but choosing .* the validation files are gone"):
        assert train_words(data, out, 6, "--src", "en", "--tgt", "de") == 0
    assert "decoding" not in load_checkpoint(resolve_checkpoint(out))
    assert "stopped (max_steps) at step 6" in capsys.readouterr().out


def test_resume_chooses_alpha_for_a_run_killed_while_choosing_it(tmp_path, capsys):
    """A run killed after its averaged model but before alpha was recorded in it: --resume makes the choice its
    end would have made (before: "--max-steps is not beyond it", and the choice was silently missing)."""
    from companion.checkpoint import write_checkpoint

    data, out = write_corpus(tmp_path / "data"), tmp_path / "run"
    assert train_words(data, out, 6, "--src", "en", "--tgt", "de", "--save-every", "3", "--average-last", "2") == 0
    capsys.readouterr()
    averaged = out / "averaged.pt"
    checkpoint = load_checkpoint(averaged)
    del checkpoint["decoding"]  # as a kill during the closing choice leaves it
    write_checkpoint(checkpoint, averaged)
    assert train_words(data, out, 6, "--src", "en", "--tgt", "de", "--save-every", "3", "--resume") == 0
    said = capsys.readouterr().out
    assert "had finished training and averaging; choosing beam search's length penalty" in said
    assert load_checkpoint(averaged)["decoding"]["chosen_on"] == "valid"
    assert train_words(data, out, 6, "--src", "en", "--tgt", "de", "--resume") == 2  # now nothing is left to do
    assert "is not beyond it" in capsys.readouterr().err
