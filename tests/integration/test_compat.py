"""Runs written by an earlier version of ``companion`` (tests/fixtures, see its README) keep working today:
checkpoints load, the model rebuilds, translate/evaluate reproduce that version's outputs, and --resume
continues the recorded run to the same numbers."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from companion._dropout import Dropout
from companion.checkpoint import list_checkpoints, load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint
from companion.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
DATA = Path(
    os.environ.get("COMPANION_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"
)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def old_checkpoint(run: str) -> Path:
    return FIXTURES / run / "checkpoints" / "step_00000003.pt"


@pytest.mark.parametrize("run", ["copy_run", "m30k_run"])
def test_old_checkpoints_load_and_rebuild_their_model(run):
    checkpoint = load_checkpoint(old_checkpoint(run))
    assert checkpoint["step"] == 3
    model = model_from_checkpoint(checkpoint, device="cpu")
    recorded = json.loads((FIXTURES / run / "run.json").read_text(encoding="utf-8"))
    assert model.num_parameters() == recorded["model_parameters"]
    assert model.config.d_model == 16 and model.config.num_encoder_layers == 1
    src = torch.tensor([[5, 6, 7, 2]])
    logits = model(src, torch.tensor([[1, 5, 6]]))
    assert logits.shape == (1, 3, model.config.tgt_vocab_size) and torch.isfinite(logits).all()


def test_old_word_tokenizers_come_back():
    src_tok, tgt_tok = tokenizers_from_checkpoint(load_checkpoint(old_checkpoint("m30k_run")))
    assert (src_tok.vocab_size, tgt_tok.vocab_size) == (84, 85)


@pytest.mark.skipif(not (DATA / "train.de.gz").is_file(), reason="Multi30k not found")
def test_old_multi30k_run_translates_and_evaluates_as_before(capsys):
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                str(FIXTURES / "m30k_run"),
                "--input",
                str(FIXTURES / "translate_input.txt"),
                "--beam-size",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == EXPECTED["m30k_translate_beam2"]
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(FIXTURES / "m30k_run"),
                "--limit",
                "10",
                "--beam-size",
                "1",
                "--device",
                "cpu",
                "--json",
                "--data-dir",
                str(DATA),
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    expected = EXPECTED["m30k_evaluate_limit10_beam1"]
    assert result["sentences"] == expected["sentences"] and result["step"] == expected["step"]
    assert math.isclose(result["bleu"], expected["bleu"], abs_tol=1e-6)
    assert math.isclose(result["chrf"], expected["chrf"], abs_tol=1e-6)


def test_old_copy_run_resumes_to_the_same_numbers(tmp_path, capsys, monkeypatch):
    """Resuming continues the recorded run exactly: weights, optimizer, schedule and random state all come back.

    0.3.0 draws CPU dropout masks as random integers instead of with ``bernoulli_`` (``companion._dropout``: the
    same distribution, other draws from the same seed), so steps 4 and 5 would use other masks than the version
    that wrote the run did (the step-5 validation NLL then differs by ~1e-4 relative). The old draws are put back
    for this test, so that what it compares is the resumed state, not the mask sampler."""
    monkeypatch.setattr(Dropout, "forward", nn.Dropout.forward)
    run = tmp_path / "copy_run"
    shutil.copytree(FIXTURES / "copy_run", run)
    assert main(["train", "--resume", "--out", str(run), "--max-steps", "5", "--threads", "1", "--no-progress"]) == 0
    assert "resumed at step 3" in capsys.readouterr().out
    assert [p.name for p in list_checkpoints(run / "checkpoints")][-1] == "step_00000005.pt"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    expected = EXPECTED["copy_run_resumed_to_step_5"]
    assert lines[-1]["kind"] == "valid" and lines[-1]["step"] == 5
    assert math.isclose(lines[-1]["valid_nll"], expected["valid"]["valid_nll"], rel_tol=1e-5)
    assert math.isclose(lines[-2]["loss"], expected["train_loss_step_5"], rel_tol=1e-5)
    recorded = json.loads((run / "run.json").read_text(encoding="utf-8"))
    assert recorded["args"]["d_model"] == 16 and recorded["args"]["max_steps"] == 5
