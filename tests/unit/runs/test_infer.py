"""``companion translate`` and ``companion evaluate``: their options, one output line per input line, clear
errors for text that is not UTF-8 and for checkpoints that cannot translate."""

from __future__ import annotations

import io
import math
import sys

import pytest
from _run_helpers import COPY, word_checkpoint

from companion.checkpoint import list_checkpoints, load_checkpoint, tokenizers_from_checkpoint
from companion.cli import main, split_lines
from companion.errors import ConfigError, RunError
from companion.runs import TranslateConfig, load_for_inference, translate_run

pytestmark = pytest.mark.usefixtures("one_thread")


def run_translate(monkeypatch, capsys, checkpoint, stdin_bytes: bytes) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin_bytes), encoding="utf-8"))
    code = main(["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", "--device", "cpu"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e30])
def test_alpha_must_be_finite_and_sensible(value):
    with pytest.raises(ConfigError, match=r"alpha \(--alpha\)"):
        TranslateConfig(checkpoint="x.pt", alpha=value)
    assert not math.isfinite(value) or value > 10


@pytest.mark.parametrize("flag, value", [("--alpha", "nan"), ("--alpha", "-0.5"), ("--beam-size", "0")])
def test_bad_decoding_options_are_reported_with_their_flag(flag, value, capsys):
    assert main(["translate", "--checkpoint", "nothing.pt", flag, value]) == 2
    assert f"({flag}) must be" in capsys.readouterr().err


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
