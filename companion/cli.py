"""Command line: ``python -m companion train | translate | evaluate | choose-alpha`` (also installed as ``companion``).

Examples::

    python -m companion train --preset small --src de --tgt en --data-dir ../shared/data/multi30k \\
        --max-minutes 20 --average-last 5 --out runs/de-en
    python -m companion translate --checkpoint runs/de-en < sentences.de > sentences.en
    python -m companion translate --pretrained de-en "Zwei Hunde spielen im Schnee."
    python -m companion choose-alpha --checkpoint runs/de-en        # again: train ends by choosing it on validation
    python -m companion evaluate --checkpoint runs/de-en --split test
    torchrun --nproc_per_node 2 -m companion train --preset base --out runs/base   # several processes

Run ``python -m companion COMMAND --help`` for every flag.

This module is argparse only: the flags are built from the option fields of a training run's sections
(``companion.runs.SECTIONS``: data, model, training and the run's own settings),
:class:`~companion.runs.TranslateConfig`, :class:`~companion.runs.EvaluateConfig` and
:class:`~companion.runs.ChooseAlphaConfig`, and each command calls the
matching run of :mod:`companion.runs`. Errors that ``companion`` raises on purpose
(:class:`~companion.errors.CompanionError`) are printed as ``companion COMMAND: error: ...`` with exit code 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ._version import __version__
from .checkpoint import latest_checkpoint
from .errors import CompanionError, RunError
from .runs import (
    DEFAULTS_NOTE,
    SECTIONS,
    ChooseAlphaConfig,
    EvaluateConfig,
    TranslateConfig,
    add_options,
    choose_alpha_run,
    describe_weights,
    evaluate_run,
    given_options,
    load_for_inference,
    train_run,
    translate_run,
)
from .runs.infer import _is_terminal  # the one terminal test, shared with translate_run's progress bar

__all__ = ["main", "build_parser", "EXIT_BROKEN_PIPE"]

# The exit code when the reader of stdout goes away (``companion translate ... | head -1``): that of a program
# ended by SIGPIPE, as shells report it.
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's layout, except that a line never breaks inside a hyphenated word: ``--save-every-minutes``
    stays whole in the help texts and the epilog (argparse's default breaks it at a hyphen)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )


def build_parser() -> argparse.ArgumentParser:
    """The ``companion`` argument parser with its four sub-commands (flags from the run configs' fields)."""
    parser = argparse.ArgumentParser(
        formatter_class=_HelpFormatter,
        prog="companion",
        description="Train, run and evaluate the Transformer of 'Attention Is All You Need'.",
        epilog="Run 'companion COMMAND --help' for the flags of each command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser(
        "train",
        formatter_class=_HelpFormatter,
        argument_default=argparse.SUPPRESS,
        help="train a model (on Multi30k, on your own parallel corpus or dataset, or on a synthetic task)",
        description="Train a Transformer with the paper's recipe (Adam 0.9/0.98/1e-9, warmup + inverse-square-root "
        "learning rate, label smoothing, dropout). Writes DIR/run.json, DIR/metrics.jsonl (JSON lines) "
        "and DIR/checkpoints/step_*.pt. Several processes: torchrun --nproc_per_node N -m companion "
        "train ...",
        epilog=DEFAULTS_NOTE,
    )
    add_options(train, SECTIONS, suppress_defaults=True)

    translate = sub.add_parser(
        "translate",
        formatter_class=_HelpFormatter,
        help="translate sentences: arguments, or one per line (stdin -> stdout)",
        description="Translate the SENTENCE arguments, or one sentence per line from --input (or stdin), to "
        "stdout, one line each, in the same order. An empty sentence gives an empty output line. Sentences "
        "longer than the model's max_len are truncated with a warning. At a terminal (stdin not piped), each "
        "line is translated as soon as Enter is pressed, until Ctrl-D.",
    )
    translate.add_argument(
        "sentences",
        nargs="*",
        metavar="SENTENCE",
        help="sentences to translate, one argument each (quote them), in place of --input or stdin",
    )
    add_options(translate, TranslateConfig)

    evaluate = sub.add_parser(
        "evaluate",
        formatter_class=_HelpFormatter,
        help="BLEU and chrF (sacreBLEU) on a split of the run's corpus or on any two files",
        description="Translate a split of the corpus the run was trained on (--split), or any source file with "
        "its references (--src-file F --ref-file R), with the checkpoint, in the direction the checkpoint "
        "records, and score it: sacreBLEU's BLEU and chrF on detokenized text (with their signatures), and "
        "tokenized BLEU as 2017 papers reported it (spaCy words of the target language, sacreBLEU "
        "tokenize=none, case-sensitive: multi-bleu.perl's computation), and the same lowercased, as the Multi30k "
        "literature usually reports it.",
    )
    add_options(evaluate, EvaluateConfig)
    evaluate.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    choose = sub.add_parser(
        "choose-alpha",
        formatter_class=_HelpFormatter,
        help="choose beam search's length penalty on the validation split and record it in the checkpoint",
        description="Translate the validation split of the run's corpus (or --src-file/--ref-file) once with beam "
        "search, score the translations that each length penalty alpha of the grid picks (sacreBLEU BLEU; the "
        "smaller alpha where two tie), and write the best into the checkpoint file, which translate and evaluate "
        "then decode with unless --alpha is given. Never choose on a test set.",
    )
    add_options(choose, ChooseAlphaConfig)
    choose.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def split_lines(text: str) -> list[str]:
    """One sentence per line: split on ``\n`` only and drop a trailing ``\r`` (Windows line ends).

    Unlike :meth:`str.splitlines`, characters such as U+2028, U+2029, U+0085, form feed, ``\x1c``-``\x1e`` or a
    lone ``\r`` stay inside their line, so the output has exactly one line per input line. A final line end
    does not start another line; a UTF-8 byte-order mark at the very start is dropped.
    """
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8, or a :class:`~companion.errors.RunError` naming ``where``, the line and the
    bad bytes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise RunError(
            f"{where}: line {line} is not UTF-8 text (byte(s) {data[error.start : error.end]!r} at "
            f"offset {error.start}); translate reads UTF-8, one sentence per line"
        ) from None


def _argument_lines(sentences: Sequence[str], path: str | None) -> list[str] | None:
    """The lines to translate given as ``SENTENCE`` arguments (None when there are none): one line each, an
    argument that holds line ends gives one line per line (as ``"$(cat file)"`` would expect)."""
    if not sentences:
        return None
    if path:
        raise RunError("give the sentences as SENTENCE arguments or in --input FILE, not both")
    for number, sentence in enumerate(sentences, start=1):
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError as error:  # bytes the terminal's encoding could not decode (surrogate escapes)
            raise RunError(
                f"SENTENCE argument {number} is not UTF-8 text (character {sentence[error.start]!r} at position "
                f"{error.start}); translate reads UTF-8"
            ) from None
    return [line for sentence in sentences for line in (split_lines(sentence) or [""])]


def _read_lines(path: str | None, stdin: TextIO | None) -> list[str]:
    if not path:
        if stdin is None:  # the shell closed it (``<&-``)
            raise RunError("stdin is closed: pipe the sentences in, or pass --input FILE or SENTENCE arguments")
        binary = getattr(stdin, "buffer", None)
        try:
            text = decode_utf8(binary.read(), "stdin") if binary is not None else stdin.read()
        except (OSError, ValueError) as error:  # a closed or unreadable stream
            raise RunError(
                f"cannot read stdin ({getattr(error, 'strerror', None) or error}); pass --input FILE"
            ) from None
        return split_lines(text)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise RunError(f"--input {path}: {error.strerror}") from None
    return split_lines(decode_utf8(data, f"--input {path}"))


def _translate_as_typed(config: TranslateConfig, loaded, stdin: TextIO, stdout: TextIO) -> int:
    """Someone typing at a terminal: translate each line as soon as Enter is pressed, until Ctrl-D (end of input)
    or Ctrl-C. A line that cannot be translated (text that is not UTF-8) is reported and the next one is read."""
    print(
        "companion translate: type a sentence and press Enter; Ctrl-D (Ctrl-Z then Enter on Windows) ends",
        file=sys.stderr,
        flush=True,
    )
    try:
        while True:
            try:
                line = stdin.readline()
                if not line:
                    return 0
                translations = translate_run(config, split_lines(line) or [""], loaded=loaded)
            except (RunError, UnicodeDecodeError) as error:
                reason = "the line is not UTF-8 text" if isinstance(error, UnicodeDecodeError) else error
                print(f"companion translate: error: {reason}", file=sys.stderr, flush=True)
                continue
            code = _write_lines(translations, stdout)
            if code:
                return code
    except KeyboardInterrupt:
        print(file=sys.stderr)  # end the line ^C was echoed on
        return EXIT_INTERRUPTED


def _print_evaluation(result: dict, as_json: bool, stdout: TextIO) -> None:
    if as_json:
        stdout.write(json.dumps({k: v for k, v in result.items() if k != "hypotheses"}, indent=2) + "\n")
    else:
        stdout.write(
            f"{result['direction']} {result['split']} ({result['sentences']} sentences, beam "
            f"{result['beam_size']}, alpha {result['alpha']:g}: {result['decoding_from']}; {result['weights']})\n"
        )
        stdout.write(f"BLEU = {result['bleu']:.2f}  {result['bleu_signature']}\n")
        if result.get("tokenized_bleu") is not None:
            stdout.write(f"tokenized BLEU = {result['tokenized_bleu']:.2f}  {result['tokenized_bleu_signature']}\n")
        if result.get("tokenized_lowercased_bleu") is not None:
            stdout.write(
                f"tokenized lowercased BLEU = {result['tokenized_lowercased_bleu']:.2f}  "
                f"{result['tokenized_lowercased_bleu_signature']}\n"
            )
        stdout.write(f"chrF = {result['chrf']:.2f}  {result['chrf_signature']}\n")
    stdout.flush()


def _print_choice(result: dict, as_json: bool, stdout: TextIO) -> None:
    if as_json:
        stdout.write(json.dumps(result, indent=2) + "\n")
        stdout.flush()
        return
    stdout.write(
        f"{result['direction']} {result['chosen_on']} ({result['sentences']} sentences, beam {result['beam_size']}, "
        f"{result['checkpoint']})\n"
    )
    stdout.write("alpha   BLEU   length/reference\n")
    for alpha, bleu in result["bleu"].items():
        mark = "  <- chosen" if float(alpha) == result["alpha"] else ""
        stdout.write(f"{alpha:>5}  {bleu:6.2f}  {result['length_ratio'][alpha]:.3f}{mark}\n")
    if result["recorded"]:
        stdout.write(
            f"recorded in {result['checkpoint']}: translate and evaluate decode it with beam {result['beam_size']}, "
            f"alpha {result['alpha']:g} unless told otherwise\n"
        )
    else:
        stdout.write("not recorded (--dry-run)\n")
    stdout.flush()


def _write_lines(lines: Sequence[str], stdout: TextIO) -> int:
    """Write one line per translation; a reader that stops early (``| head``) ends the command quietly."""
    try:
        for text in lines:
            stdout.write(text + "\n")
        stdout.flush()
    except BrokenPipeError:
        _silence(stdout)
        return EXIT_BROKEN_PIPE
    except OSError as error:
        raise RunError(f"writing the translations to stdout failed ({error.strerror or error})") from None
    return 0


def _silence(stdout: TextIO) -> None:
    """Point stdout at /dev/null, so that Python's final flush does not hit the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def run_command(args: argparse.Namespace, argv: Sequence[str], stdin: TextIO, stdout: TextIO) -> int:
    """Run the parsed command ``args`` (``argv``: the words it was parsed from); returns the exit code."""
    if args.command == "train":
        try:
            train_run(given_options(args, SECTIONS), command=list(argv[1:]))
        except KeyboardInterrupt as interrupt:  # Ctrl-C: no traceback, but what is left and how to go on
            detail = f" ({interrupt})" if str(interrupt) else ""  # e.g. the checkpoint writer's word on its file
            print(f"\ncompanion train: interrupted{detail}. {_resume_hint(args.out)}", file=sys.stderr)
            return EXIT_INTERRUPTED
        return 0
    if args.command == "translate":
        config = TranslateConfig(**given_options(args, TranslateConfig))
        given = _argument_lines(args.sentences, config.input)  # checked before the model is loaded
        loaded = load_for_inference(config.weights(), config.device)
        search = config.search_options(loaded.checkpoint, loaded.path)
        print(
            f"companion translate: using {describe_weights(loaded)}, beam {search['beam_size']}, alpha "
            f"{search['alpha']:g} ({config.search_origin(loaded.checkpoint, loaded.path)})",
            file=sys.stderr,
        )
        if given is None and not config.input and stdin is not None and _is_terminal(stdin):
            return _translate_as_typed(config, loaded, stdin, stdout)
        lines = given if given is not None else _read_lines(config.input, stdin)
        return _write_lines(translate_run(config, lines, loaded=loaded), stdout)
    if args.command == "choose-alpha":
        _print_choice(choose_alpha_run(ChooseAlphaConfig(**given_options(args, ChooseAlphaConfig))), args.json, stdout)
        return 0
    _print_evaluation(evaluate_run(EvaluateConfig(**given_options(args, EvaluateConfig))), args.json, stdout)
    return 0


def _resume_hint(out: str | None) -> str:
    """What an interrupted ``train`` left in ``out`` and how to go on from it."""
    if not out:
        return "Nothing was written."
    latest = latest_checkpoint(Path(out) / "checkpoints")
    if latest is None:
        return f"{out} holds no checkpoint yet: run the same command again to start over."
    step = int(latest.stem.split("_")[1])
    return (
        f"The latest checkpoint is {latest} (step {step:,}). Go on from it with companion train --resume --out "
        f"{out}: it trains again any steps made after it, or completes a run that had finished training (its "
        "averaged model, its alpha)."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m companion`` and of the ``companion`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    default_format = warnings.formatwarning
    warnings.formatwarning = _warning_format(args.command)
    try:
        return run_command(args, argv, sys.stdin, sys.stdout)
    except CompanionError as error:
        if not getattr(error, "reported", False):  # (under torchrun, rank 0 may have said it for every rank)
            print(f"companion {args.command}: error: {error}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = default_format


def _warning_format(command: str):
    """Warnings as ``companion COMMAND: warning: ...`` (not the file, line and source of the code that warned)."""

    def format_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ARG001 (warnings' signature)
        return f"companion {command}: warning: {message}\n"

    return format_warning


if __name__ == "__main__":
    sys.exit(main())
