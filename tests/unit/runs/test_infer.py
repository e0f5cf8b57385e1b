"""``companion translate`` and ``companion evaluate``: their options, one output line per input line, clear
errors for text that is not UTF-8 and for checkpoints that cannot translate."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest
from _run_helpers import COPY, train_words, word_checkpoint, write_corpus

import companion
from companion.checkpoint import list_checkpoints, load_checkpoint, tokenizers_from_checkpoint
from companion.cli import main, split_lines
from companion.errors import ConfigError, RunError
from companion.evaluate import corpus_bleu, corpus_chrf, tokenized_bleu
from companion.pretrained import SHIPPED_ALPHA, SHIPPED_BEAM_SIZE, pretrained_path
from companion.runs import EvaluateConfig, TranslateConfig, evaluate_run, load_for_inference, translate_run
from companion.runs.infer import PAPER_ALPHA, PAPER_BEAM_SIZE

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


@pytest.mark.parametrize("config_class", [TranslateConfig, EvaluateConfig])
def test_the_search_is_the_given_else_the_checkpoints_recorded_else_the_papers(config_class):
    recorded = {"decoding": {"beam_size": 6, "alpha": 1.5, "chosen_on": "valid"}}
    plain = config_class(checkpoint="x.pt")
    assert plain.search_options({}) == {"beam_size": PAPER_BEAM_SIZE, "alpha": PAPER_ALPHA, "batch_size": 64}
    assert (PAPER_BEAM_SIZE, PAPER_ALPHA) == (4, 0.6) and plain.search_origin({}) == "the paper's"
    assert plain.search_options(recorded) == {"beam_size": 6, "alpha": 1.5, "batch_size": 64}
    assert plain.search_origin(recorded) == "chosen on valid, recorded in the checkpoint"
    given = config_class(checkpoint="x.pt", alpha=0)
    assert given.search_options(recorded)["alpha"] == 0 and given.search_options(recorded)["beam_size"] == 6
    assert given.search_origin(recorded) == "alpha given, the rest chosen on valid, recorded in the checkpoint"
    both = config_class(checkpoint="x.pt", alpha=1.0, beam_size=2)
    assert both.search_options(recorded)["alpha"] == 1.0 and both.search_origin(recorded) == "given"
    shipped = config_class(pretrained="de-en")
    assert shipped.search_options({})["alpha"] == SHIPPED_ALPHA != PAPER_ALPHA
    assert shipped.search_options({})["beam_size"] == SHIPPED_BEAM_SIZE
    assert shipped.search_origin({}) == "the shipped models' setting"
    assert config_class(pretrained="en-de", alpha=1.0).search_options({})["alpha"] == 1.0  # a value given is kept


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


# -- which weights, where the output goes, what cannot be read -----------------------------------------------------
def test_translate_says_which_weights_it_uses(tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    code, out, err = run_translate(monkeypatch, capsys, checkpoint, b"a man\n")
    assert code == 0 and len(out.splitlines()) == 1
    assert f"companion translate: using {checkpoint} (step 1)" in err


def test_a_stale_averaged_model_is_passed_over_with_a_warning(tmp_path):
    import os

    from companion.runs import resolve_checkpoint

    out = tmp_path / "run"
    assert main([*COPY, "--max-steps", "2", "--save-every", "1", "--average-last", "2", "--out", str(out)]) == 0
    assert resolve_checkpoint(out) == out / "averaged.pt"
    latest = out / "checkpoints" / "step_00000002.pt"
    stat = latest.stat()
    os.utime(out / "averaged.pt", ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))  # older than the latest step
    with pytest.warns(UserWarning, match=r"averaged\.pt is older than .*step_00000002\.pt"):
        assert resolve_checkpoint(out) == latest


def test_a_checkpoint_that_is_not_a_file_is_named_for_what_it_is(capsys):
    assert main(["translate", "--checkpoint", "/dev/zero", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero is not a file" in err and "does not exist" not in err


class _ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


class _FullDisk(io.StringIO):
    def write(self, text):
        raise OSError(28, "No space left on device")


def test_a_reader_that_stops_early_ends_translate_quietly(tmp_path, monkeypatch, capsys):
    from companion.cli import EXIT_BROKEN_PIPE

    checkpoint = word_checkpoint(tmp_path / "m.pt")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a man\ntwo dogs\n"), encoding="utf-8"))
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert (
        main(["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", "--device", "cpu"]) == EXIT_BROKEN_PIPE
    )
    assert "Traceback" not in capsys.readouterr().err


def test_a_full_disk_on_stdout_is_a_clear_error(tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a man\n"), encoding="utf-8"))
    monkeypatch.setattr(sys, "stdout", _FullDisk())
    assert main(["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", "--device", "cpu"]) == 2
    assert "writing the translations to stdout failed (No space left on device)" in capsys.readouterr().err


def test_a_closed_stdin_is_a_clear_error(tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    monkeypatch.setattr(sys, "stdin", None)  # what Python gives a process started with <&-
    assert main(["translate", "--checkpoint", str(checkpoint), "--device", "cpu"]) == 2
    assert "stdin is closed: pipe the sentences in, or pass --input FILE" in capsys.readouterr().err


def test_sentences_given_as_arguments_are_translated_one_line_each(tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    code, piped, _ = run_translate(monkeypatch, capsys, checkpoint, b"a man\n\ntwo dogs\ntwo dogs\n")
    assert code == 0 and len(piped.split("\n")) == 5
    monkeypatch.setattr(sys, "stdin", None)  # arguments never read stdin
    command = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", "--device", "cpu"]
    assert main([*command, "a man", "", "two dogs\ntwo dogs"]) == 0  # an argument's line ends give lines
    assert capsys.readouterr().out == piped


def test_sentence_arguments_and_an_input_file_are_not_mixed(tmp_path, monkeypatch, capsys):
    checkpoint = tmp_path / "never-read.pt"  # the clash is reported before any model is loaded
    source = tmp_path / "in.txt"
    source.write_text("a man\n", encoding="utf-8")
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(source), "a man"]) == 2
    assert "give the sentences as SENTENCE arguments or in --input FILE, not both" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(word_checkpoint(checkpoint)), "a man", "caf\udcff"]) == 2
    assert "SENTENCE argument 2 is not UTF-8 text (character '\\udcff' at position 3)" in capsys.readouterr().err


class _Terminal(io.StringIO):
    """A terminal's stdin: lines as typed; ``interrupt_after`` lines, then Ctrl-C."""

    def __init__(self, text: str, interrupt_after: int | None = None) -> None:
        super().__init__(text)
        self.interrupt_after = interrupt_after
        self.reads = 0

    def isatty(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:
        if self.interrupt_after is not None and self.reads == self.interrupt_after:
            raise KeyboardInterrupt
        self.reads += 1
        return super().readline(size)


def test_a_terminal_gets_each_translation_as_soon_as_its_line_is_typed(tmp_path, monkeypatch, capsys):
    checkpoint = word_checkpoint(tmp_path / "m.pt")
    command = ["translate", "--checkpoint", str(checkpoint), "--beam-size", "1", "--device", "cpu"]
    code, piped, _ = run_translate(monkeypatch, capsys, checkpoint, b"a man\n\ntwo dogs\n")
    assert code == 0
    seen = []
    terminal = _Terminal("a man\n\ncaf\udcff\ntwo dogs\n")
    real_readline = terminal.readline

    def readline(size=-1):  # what had been written when the next line was asked for
        seen.append(capsys.readouterr())
        return real_readline(size)

    terminal.readline = readline  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stdin", terminal)
    assert main(command) == 0  # Ctrl-D (end of input) ends it
    lines = piped.split("\n")
    answers = [s.out for s in seen[1:]]
    assert answers == [lines[0] + "\n", "\n", "", lines[2] + "\n"]  # each answer before the next line is read
    assert "type a sentence and press Enter; Ctrl-D" in seen[0].err
    assert "line 1 is not valid text" in seen[3].err  # the bad line is reported, and the next one translated
    monkeypatch.setattr(sys, "stdin", _Terminal("a man\n", interrupt_after=1))
    assert main(command) == 130  # Ctrl-C: the shell's code for SIGINT, no traceback
    assert "Traceback" not in capsys.readouterr().err


def test_translate_shows_a_progress_bar_for_a_long_job_at_a_terminal(tmp_path, monkeypatch, capsys):
    from companion.runs import infer

    checkpoint = word_checkpoint(tmp_path / "m.pt")
    loaded = load_for_inference(checkpoint, "cpu")
    config = TranslateConfig(checkpoint=str(checkpoint), beam_size=1, batch_size=2)
    lines = ["a man", "two dogs", "a man"]
    monkeypatch.setattr(infer, "_stderr_is_terminal", lambda: True)
    translate_run(config, lines, loaded=loaded)
    assert "3/3" in capsys.readouterr().err  # more sentences than one batch: a bar
    translate_run(config, lines[:2], loaded=loaded)
    assert capsys.readouterr().err == ""  # one batch: none
    monkeypatch.setattr(infer, "_stderr_is_terminal", lambda: False)
    translate_run(config, lines, loaded=loaded)
    assert capsys.readouterr().err == ""  # stderr to a file or a pipe: none


def _translate_process(checkpoint, lines: int, stdout) -> subprocess.Popen:
    """``companion translate`` in a process of its own, ``lines`` sentences on its stdin."""
    command = [sys.executable, "-m", "companion", "translate", "--checkpoint", str(checkpoint), "--beam-size", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*command, "--device", "cpu"], stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE, env=env
    )
    assert process.stdin is not None
    process.stdin.write(b"a man rides a bike .\n" * lines)
    process.stdin.close()
    return process


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_real_full_disk_and_a_real_closed_pipe_end_translate_without_a_traceback(tmp_path):
    """What the fakes above stand for, through the operating system: stdout on /dev/full (every write fails with
    ENOSPC, the last one at the interpreter's exit flush), and a reader that takes one line and closes the pipe
    (``| head -1``: EPIPE, then SIGPIPE's exit status)."""
    from companion.cli import EXIT_BROKEN_PIPE

    checkpoint = word_checkpoint(tmp_path / "m.pt")
    with open("/dev/full", "wb") as full:
        process = _translate_process(checkpoint, 3, full)
        err = process.stderr.read().decode()  # type: ignore[union-attr]
        assert process.wait(timeout=120) == 2
    assert "writing the translations to stdout failed (No space left on device)" in err
    assert "Traceback" not in err and "Exception ignored" not in err
    process = _translate_process(checkpoint, 4000, subprocess.PIPE)  # more than a pipe's buffer of output
    assert process.stdout is not None and process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read().decode()  # type: ignore[union-attr]
    assert process.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "Exception ignored" not in err and "error" not in err


def test_a_huge_line_is_cut_before_it_is_tokenized(tmp_path, monkeypatch):
    from companion.runs import infer

    checkpoint = word_checkpoint(tmp_path / "m.pt")
    seen = []
    real_translate = infer.translate

    def spy(model, sentences, *args, **kwargs):
        seen.extend(len(s) for s in sentences)
        return real_translate(model, sentences, *args, **kwargs)

    monkeypatch.setattr(infer, "translate", spy)
    loaded = load_for_inference(checkpoint, "cpu")
    huge = "a man " * 200_000  # 1.2 million characters for a model that reads 16 tokens
    with pytest.warns(UserWarning) as caught:  # the cut, then decode's own note on the tokens beyond max_len
        out = translate_run(TranslateConfig(checkpoint=str(checkpoint), beam_size=1), ["a man", huge], loaded=loaded)
    assert "line 2 has 1,199,999 characters; only its first 1,024 are read" in str(caught[0].message)
    assert len(out) == 2 and max(seen) <= 64 * loaded.model.config.max_len


def test_warnings_are_printed_as_the_commands_own_lines(monkeypatch):
    import warnings

    import companion.cli as cli

    printed = []

    def run(args, argv, stdin, stdout):
        printed.append(warnings.formatwarning("few checkpoints", UserWarning, "cli.py", 148, "warnings.warn(...)"))
        return 0

    monkeypatch.setattr(cli, "run_command", run)
    assert main(["translate", "--checkpoint", "x.pt"]) == 0
    assert printed == ["companion translate: warning: few checkpoints\n"]


def test_evaluate_needs_only_the_files_of_its_split(tmp_path, capsys):
    data = write_corpus(tmp_path / "data")
    out = tmp_path / "run"
    assert train_words(data, out, 1) == 0
    test_only = tmp_path / "test_only"
    test_only.mkdir()
    for name in ("test_2016_flickr.en.gz", "test_2016_flickr.de.gz"):
        (test_only / name).write_bytes((data / name).read_bytes())
    capsys.readouterr()
    command = ["evaluate", "--checkpoint", str(out), "--split", "test", "--limit", "2", "--beam-size", "1"]
    assert main([*command, "--data-dir", str(test_only), "--device", "cpu", "--json"]) == 0
    assert '"sentences": 2' in capsys.readouterr().out


def test_evaluate_scores_a_later_multi30k_test_set_by_name(tmp_path, monkeypatch, capsys):
    """--split test_2017_flickr reads the set from --data-dir; where it cannot be had, exit 2 and what to do."""
    import gzip

    folder = tmp_path / "unseen"
    folder.mkdir()
    for lang, lines in (("en", ["A dog runs.", "Two men talk."]), ("de", ["Ein Hund rennt.", "Zwei Männer reden."])):
        with gzip.open(folder / f"test_2017_flickr.{lang}.gz", "wt", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    command = ["evaluate", "--pretrained", "de-en", "--beam-size", "1", "--device", "cpu", "--json"]
    assert main([*command, "--split", "test_2017_flickr", "--data-dir", str(folder)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "test_2017_flickr" and result["sentences"] == 2 and result["direction"] == "de->en"
    monkeypatch.setattr("companion.data.multi30k._reachable", lambda host, port: False)
    assert main([*command, "--split", "test_2018_flickr", "--data-dir", str(folder)]) == 2
    error = capsys.readouterr().err
    assert "lacks test_2018_flickr" in error and "cannot be reached" in error and "data/task1/raw" in error


# -- the shipped models by name: --pretrained DIRECTION ----------------------------------------------------------------
def test_a_model_is_named_by_checkpoint_or_by_pretrained_direction_never_both():
    with pytest.raises(ConfigError, match=r"checkpoint \(--checkpoint\).*pretrained \(--pretrained\).*neither"):
        TranslateConfig()
    with pytest.raises(ConfigError, match="not both"):
        EvaluateConfig(checkpoint="x.pt", pretrained="de-en")
    with pytest.raises(ConfigError, match=r"pretrained \(--pretrained\) must be one of \['de-en', 'en-de'\]"):
        TranslateConfig(pretrained="fr-en")
    assert TranslateConfig(checkpoint="x.pt").weights() == "x.pt"


@pytest.mark.parametrize("direction, sentence", [("de-en", "Ein Hund läuft im Schnee."), ("en-de", "A dog runs.")])
def test_translate_with_a_shipped_model(direction, sentence, monkeypatch, capsys):
    shipped = companion.load_pretrained(direction)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"{sentence}\n".encode()), encoding="utf-8"))
    assert main(["translate", "--pretrained", direction, "--beam-size", "2", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert captured.out == shipped.translate(sentence, beam_size=2) + "\n"
    assert f"using {pretrained_path(direction)} (the average of" in captured.err


def test_a_shipped_models_file_under_another_name_decodes_as_the_shipped_model(tmp_path, capsys):
    """``--checkpoint COPY`` of a shipped file (same SHA-256) gets the shipped setting, as ``--pretrained`` and
    ``load_pretrained(path=COPY)`` do; a file of the user's without a record gets the paper's."""
    copy = tmp_path / "mine.pt"
    copy.write_bytes(pretrained_path("de-en").read_bytes())
    assert main(["translate", "--checkpoint", str(copy), "--device", "cpu", "Ein Hund läuft."]) == 0
    captured = capsys.readouterr()
    assert f"beam {SHIPPED_BEAM_SIZE}, alpha {SHIPPED_ALPHA:g} (the shipped models' setting)" in captured.err
    assert captured.out == companion.load_pretrained("de-en").translate("Ein Hund läuft.") + "\n"
    assert companion.load_pretrained(path=copy).decoding == {"beam_size": SHIPPED_BEAM_SIZE, "alpha": SHIPPED_ALPHA}
    config = TranslateConfig(checkpoint=str(copy))
    assert config.search_options({}, copy)["alpha"] == SHIPPED_ALPHA
    assert config.search_options({})["alpha"] == PAPER_ALPHA  # no file named: nothing says it is a shipped one


def test_evaluate_with_a_shipped_model_scores_its_direction(tmp_path, capsys):
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("A man rides a bike.\nTwo dogs play in the snow.\n", encoding="utf-8")
    ref.write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    command = ["evaluate", "--pretrained", "en-de", "--src-file", str(src), "--ref-file", str(ref), "--json"]
    assert main([*command, "--beam-size", "1", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["direction"] == "en->de" and result["sentences"] == 2
    assert result["checkpoint"] == str(pretrained_path("en-de"))
    # The command prints evaluate_run's result without its hypotheses. These are the model's own translations,
    # and every score is computed from them and the references by the package's scoring functions (into German:
    # BLEU's tokenizer and spaCy's rules for "de").
    full = evaluate_run(
        EvaluateConfig(pretrained="en-de", src_file=str(src), ref_file=str(ref), beam_size=1, device="cpu")
    )
    assert {k: v for k, v in full.items() if k not in ("hypotheses", "decode_seconds")} == {
        k: v for k, v in result.items() if k != "decode_seconds"
    }
    sources, references = src.read_text().splitlines(), ref.read_text().splitlines()
    hypotheses = full["hypotheses"]
    assert hypotheses == companion.load_pretrained("en-de").translate(sources, beam_size=1)
    assert hypotheses != references  # (then no score is trivially 100)
    assert (full["bleu"], full["bleu_signature"]) == corpus_bleu(hypotheses, references, language="de")
    assert (full["chrf"], full["chrf_signature"]) == corpus_chrf(hypotheses, references)
    tokenized = tokenized_bleu(hypotheses, references, "de")
    assert (full["tokenized_bleu"], full["tokenized_bleu_signature"]) == tokenized
    lowercased = tokenized_bleu(hypotheses, references, "de", lowercase=True)
    assert (full["tokenized_lowercased_bleu"], full["tokenized_lowercased_bleu_signature"]) == lowercased


def test_a_shipped_model_that_is_not_byte_for_byte_the_shipped_file_is_refused(monkeypatch, capsys):
    name = companion.pretrained.DIRECTIONS["de-en"]
    entry = dict(companion.pretrained.PRETRAINED_MODELS[name], sha256="0" * 64)
    monkeypatch.setitem(companion.pretrained.PRETRAINED_MODELS, name, entry)
    assert main(["translate", "--pretrained", "de-en", "--device", "cpu"]) == 2
    assert "is not the shipped de-en-small.pt" in capsys.readouterr().err
