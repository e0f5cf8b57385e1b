"""``companion translate`` and ``companion evaluate``: their configs, the checkpoint a path names, and the runs."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .._validation import check_integer, check_number
from ..checkpoint import load_checkpoint, model_from_checkpoint, run_weights, tokenizers_from_checkpoint
from ..data import DATA_DIR_ENV, MULTI30K_UNSEEN_TESTS
from ..data.corpus import files_corpus
from ..decode import MAX_ALPHA, MAX_BEAM_SIZE, PAPER_ALPHA, PAPER_BEAM_SIZE, translate
from ..devices import keep_freed_memory, resolve_device
from ..errors import ConfigError, DataError, RunError
from ..evaluate import evaluate_translation, tokenized_bleu
from ..options import check_declared, label, option
from ..pretrained import DIRECTIONS, SHIPPED_ALPHA, SHIPPED_BEAM_SIZE, default_decoding, pretrained_path
from .config import DataConfig, RunConfig
from .identity import evaluation_pairs

__all__ = [
    "MAX_ALPHA",
    "TranslateConfig",
    "EvaluateConfig",
    "resolve_checkpoint",
    "InferenceModel",
    "load_for_inference",
    "describe_weights",
    "translate_run",
    "evaluate_run",
    "scoring_pairs",
]


# The largest batch accepted (the widest beam is the library's, companion.decode.MAX_BEAM_SIZE): beam search holds
# batch x beam hypotheses with their caches and a score per vocabulary entry, so far larger values only exhaust
# memory.
MAX_BATCH_SIZE = 10000
# Characters read per token of the model's max_len before a long line is cut (a word or subword is far shorter).
CHARACTERS_PER_TOKEN = 64


@dataclass
class _InferenceOptions:
    checkpoint: str | None = option(
        None,
        "a checkpoint file, or a run folder (its averaged.pt if present, else its latest checkpoint); or give "
        "--pretrained instead",
        metavar="PATH",
    )
    pretrained: str | None = option(
        None,
        "one of the book's shipped models, by direction, in place of --checkpoint: the repository's pretrained/ "
        "file, else $COMPANION_PRETRAINED_DIR's, else the cached download, else downloaded once (companion."
        "load_pretrained's search; every copy checked against the shipped file's SHA-256)",
        metavar="DIRECTION",
        choices=sorted(DIRECTIONS),
    )
    beam_size: int | None = option(
        None,
        f"beam width; 1 = greedy decoding (default: the checkpoint's recorded setting (companion choose-alpha), else "
        f"{PAPER_BEAM_SIZE}, as in the paper; with --pretrained or a shipped model's file, {SHIPPED_BEAM_SIZE})",
        metavar="K",
    )
    alpha: float | None = option(
        None,
        f"length penalty alpha of beam search (default: the checkpoint's recorded setting, chosen on its validation "
        f"split by companion choose-alpha, else {PAPER_ALPHA}, as in the paper; with --pretrained or a shipped model's "
        f"file, {SHIPPED_ALPHA}, the shipped models' setting chosen on their validation split)",
        metavar="A",
    )
    batch_size: int = option(64, "sentences decoded together (default: {default})", metavar="N")
    device: str = option(
        "auto", "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: {default})", metavar="DEV"
    )

    def __post_init__(self) -> None:
        cls = type(self)
        check_declared(self)
        if (self.checkpoint is None) == (self.pretrained is None):
            raise ConfigError(
                f"give either {label(cls, 'checkpoint')}, a checkpoint file or run folder, or "
                f"{label(cls, 'pretrained')}, a shipped model ({' or '.join(sorted(DIRECTIONS))}): "
                + ("not both" if self.checkpoint is not None else "neither was given")
            )
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise ConfigError(f"{label(cls, 'checkpoint')} must be a path, got {self.checkpoint!r}")
        for name, largest in (("beam_size", MAX_BEAM_SIZE), ("batch_size", MAX_BATCH_SIZE)):
            if getattr(self, name) is not None:
                check_integer(label(cls, name), getattr(self, name), minimum=1, maximum=largest, error=ConfigError)
        self._given = tuple(name for name in ("beam_size", "alpha") if getattr(self, name) is not None)
        if self.pretrained is not None:  # the shipped files are pinned by their SHA-256: their setting lives here
            self.beam_size = SHIPPED_BEAM_SIZE if self.beam_size is None else self.beam_size
            self.alpha = SHIPPED_ALPHA if self.alpha is None else self.alpha
        if self.alpha is not None:
            self.alpha = check_number(label(cls, "alpha"), self.alpha, low=0, high=MAX_ALPHA, error=ConfigError)
        if not isinstance(self.device, str):
            raise ConfigError(f"{label(cls, 'device')} must be a string, got {self.device!r}")

    def weights(self) -> str | os.PathLike:
        """The checkpoint file or run folder to load: ``checkpoint``, or where the shipped model that
        ``pretrained`` names is on this machine (:func:`companion.pretrained.pretrained_path`: it may download it
        once, and raises :class:`~companion.errors.PretrainedUnavailableError` when it cannot)."""
        if self.pretrained is not None:
            return pretrained_path(self.pretrained)
        assert self.checkpoint is not None
        return self.checkpoint

    def search_options(self, checkpoint: dict[str, Any], path: str | os.PathLike | None = None) -> dict[str, Any]:
        """The search's options as ``translate`` and ``evaluate_translation`` take them (beam, alpha, batch), for
        the loaded ``checkpoint`` (read from ``path``): each of ``beam_size`` and ``alpha`` as given, else as
        :func:`companion.pretrained.default_decoding` decides (the setting the file records, else the shipped
        models' for a shipped model's file, else the paper's)."""
        default = default_decoding(checkpoint, path)[0]
        return {
            "beam_size": self.beam_size if self.beam_size is not None else default["beam_size"],
            "alpha": self.alpha if self.alpha is not None else default["alpha"],
            "batch_size": self.batch_size,
        }

    def search_origin(self, checkpoint: dict[str, Any], path: str | os.PathLike | None = None) -> str:
        """Where the search's beam size and alpha come from, in words (for the commands' reports)."""
        if len(self._given) == 2:
            return "given"
        if self.pretrained is not None:
            source = "the shipped models' setting"
        else:
            source = default_decoding(checkpoint, path)[1]
        return f"{self._given[0]} given, the rest {source}" if self._given else source


@dataclass
class TranslateConfig(_InferenceOptions):
    """Options of ``companion translate``: the checkpoint, the beam search, the device and the input file."""

    input: str | None = option(None, "UTF-8 text file, one sentence per line (default: stdin)", metavar="FILE")


@dataclass
class EvaluateConfig(_InferenceOptions):
    """Options of ``companion evaluate``: the checkpoint, the beam search, the device, and what to score: a split
    of the run's corpus, or any two files."""

    split: str = option(
        "test",
        "which split of the corpus the run was trained on (Multi30k: test = test_2016_flickr, and the later test "
        "sets test_2017_flickr, test_2018_flickr, test_2017_mscoco, from --data-dir when it holds them, else the "
        "Flickr ones through sacreBLEU's downloader; a --data-dir corpus: its --test-split; --train files: the "
        "--test files) (default: {default})",
        choices=["test", "valid", "train", *MULTI30K_UNSEEN_TESTS],
    )
    data_dir: str | None = option(
        None,
        "a folder of {split}.{lang} files in place of the run's (default: for Multi30k $COMPANION_DATA_DIR, "
        "else the folder recorded by the run if it still exists, else the Hugging Face hub)",
        metavar="DIR",
    )
    src_file: str | None = option(
        None, "score these source sentences (UTF-8, one per line, plain or .gz) instead of a split", metavar="FILE"
    )
    ref_file: str | None = option(None, "the reference translations of --src-file, line by line", metavar="FILE")
    limit: int | None = option(None, "score only the first N sentences", metavar="N")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_held_out_options(self)


def check_held_out_options(config: ScoringOptions) -> None:
    """The checks of the options that name the sentences to score (``EvaluateConfig``, ``ChooseAlphaConfig``): a
    positive ``limit``; ``src_file`` and ``ref_file`` together, and then no ``data_dir``."""
    if config.limit is not None:
        check_integer(label(type(config), "limit"), config.limit, minimum=1, error=ConfigError)
    if (config.src_file is None) != (config.ref_file is None):
        raise ConfigError("--src-file and --ref-file go together: the sentences and their references")
    if config.src_file is not None and config.data_dir is not None:
        raise ConfigError("--data-dir names a corpus split; with --src-file/--ref-file give neither")


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint file, or for a run folder its ``averaged.pt`` else its latest step checkpoint.

    A folder's ``averaged.pt`` is used only when it is at least as new as the latest step checkpoint (a run
    resumed and interrupted since leaves newer weights); otherwise, and when a run that averages checkpoints
    ended before writing it, the latest step checkpoint is used with a warning that says why.
    """
    path = Path(path)
    if path.is_dir():
        return _weights_of_run_folder(path)
    if not path.exists():
        raise RunError(f"--checkpoint {path} does not exist")
    if not path.is_file():
        raise RunError(
            f"--checkpoint {path} is not a file (a device, a pipe or a socket?); pass a checkpoint file or a run folder"
        )
    return path


def _weights_of_run_folder(folder: Path) -> Path:
    """:func:`companion.checkpoint.run_weights`, with a warning when the run averages checkpoints but ended before
    writing ``averaged.pt``."""
    weights = run_weights(folder, name="--checkpoint")
    if weights.name != "averaged.pt" and not (folder / "averaged.pt").is_file() and _averages_checkpoints(folder):
        warnings.warn(
            f"{folder} has no averaged.pt although its run averages checkpoints (it ended before writing it): using "
            f"{weights.name}; 'companion train --resume --out {folder}' writes averaged.pt",
            stacklevel=3,
        )
    return weights


def _averages_checkpoints(folder: Path) -> bool:
    """Whether the run recorded in ``folder/run.json`` writes an ``averaged.pt`` when it ends."""
    try:
        recorded = json.loads((folder / "run.json").read_text(encoding="utf-8"))["args"]
        return RunConfig.from_record(recorded).average_count > 1
    except (OSError, ValueError, KeyError, TypeError):
        return False


def describe_weights(loaded: InferenceModel) -> str:
    """Which weights a command uses: ``DIR/averaged.pt (the average of 5 checkpoints, up to step 1200)``."""
    averaged_from = loaded.checkpoint.get("averaged_from") or []
    what = f"the average of {len(averaged_from)} checkpoints, up to step" if averaged_from else "step"
    return f"{loaded.path} ({what} {loaded.checkpoint.get('step')})"


class InferenceModel(NamedTuple):
    """What :func:`load_for_inference` returns (a tuple, so it also unpacks in this order)."""

    model: Any
    src_tokenizer: Any
    tgt_tokenizer: Any
    checkpoint: dict[str, Any]
    device: Any
    path: Path  # the checkpoint file the weights come from


def load_for_inference(path: str | os.PathLike, device: str = "auto") -> InferenceModel:
    """The model (in eval mode, on ``device``), its tokenizers and the loaded checkpoint, for translating.

    ``path`` is a checkpoint file or a run folder (see :func:`resolve_checkpoint`). A synthetic-task
    checkpoint, which has no tokenizers, raises :class:`~companion.errors.CheckpointError`.
    """
    target = resolve_device(device)
    file = resolve_checkpoint(path)
    checkpoint = load_checkpoint(file)
    src_tok, tgt_tok = tokenizers_from_checkpoint(checkpoint)
    model = model_from_checkpoint(checkpoint, device=target)
    return InferenceModel(model, src_tok, tgt_tok, checkpoint, target, file)


def translate_run(config: TranslateConfig, lines: Sequence[str], *, loaded: InferenceModel | None = None) -> list[str]:
    """Translate ``lines`` (one sentence each) with the model ``config`` names (``config.weights()``): one output
    line per input line.

    Blank lines give empty outputs in their place; newlines inside a translation become spaces. ``loaded``
    (from :func:`load_for_inference`) saves loading the checkpoint again. (The command line loads the model
    first, then reads ``config.input`` or stdin, and writes the result to stdout.)
    """
    keep_freed_memory()  # companion._allocator: faster decoding steps on CPU
    if loaded is None:
        loaded = load_for_inference(config.weights(), config.device)
    model, src_tok, tgt_tok, checkpoint, device, weights = loaded
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, str):
            raise RunError(f"translate: line {number} must be a str, got {type(line).__name__}")
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as error:
            raise RunError(
                f"translate: line {number} is not valid text (character {line[error.start]!r} at "
                f"position {error.start + 1}: undecodable input bytes?); pass UTF-8 text"
            ) from None
    wanted = [i for i, line in enumerate(lines) if line.strip()]
    outputs = [""] * len(lines)
    if wanted:
        translations = translate(
            model,
            [_usable_part(lines[i].strip(), i + 1, model.config.max_len) for i in wanted],
            src_tok,
            tgt_tok,
            **config.search_options(checkpoint, weights),
            device=device,
            progress=len(wanted) > config.batch_size and _stderr_is_terminal(),  # a long job at a terminal
        )
        for i, text in zip(wanted, translations):
            outputs[i] = text
    return [text.replace("\n", " ") for text in outputs]


def _is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for a file, a pipe, a closed or replaced stream)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _stderr_is_terminal() -> bool:
    return _is_terminal(sys.stderr)


def _usable_part(text: str, number: int, max_len: int) -> str:
    """The start of a sentence that the model can read: at most ``max_len`` tokens are used, and no token is longer
    than ``CHARACTERS_PER_TOKEN`` characters in practice, so tokenizing more would only cost memory."""
    limit = CHARACTERS_PER_TOKEN * max_len
    if len(text) <= limit:
        return text
    warnings.warn(
        f"translate: line {number} has {len(text):,} characters; only its first {limit:,} are read (the model reads "
        f"at most {max_len} tokens)",
        stacklevel=3,
    )
    return text[:limit]


def checkpoint_languages(checkpoint: dict[str, Any]) -> tuple[str, str]:
    """``(src, tgt)`` as the checkpoint records them: its run's languages, else its word tokenizers'.

    A :class:`~companion.errors.RunError` when it records none (a checkpoint of the Python Trainer written
    without ``languages=`` and with a shared BPE): evaluation never assumes a direction."""
    run_info = checkpoint.get("run_info") or {}
    tokenizers = checkpoint.get("tokenizers") or {}
    found = []
    for side in ("src", "tgt"):
        language = run_info.get(side) or (tokenizers.get(side) or {}).get("language")
        found.append(language if isinstance(language, str) and language else None)
    if None in found:
        missing = " and ".join(side for side, language in zip(("source", "target"), found) if language is None)
        raise RunError(
            f"the checkpoint does not record its {missing} language (trained with companion.Trainer without "
            "languages=(src, tgt), and with a shared BPE tokenizer); evaluate needs the translation direction. "
            "Save it again with the languages: Trainer(..., languages=('fr', 'en'))"
        )
    return str(found[0]), str(found[1])


class ScoringOptions(Protocol):
    """What :func:`scoring_pairs` reads of a command's options (``EvaluateConfig``, ``ChooseAlphaConfig``)."""

    split: str
    data_dir: str | None
    src_file: str | None
    ref_file: str | None
    limit: int | None


def scoring_pairs(config: ScoringOptions, checkpoint: dict[str, Any], command: str) -> tuple[str, str, str, list]:
    """``(src, tgt, what, pairs)``: the checkpoint's direction and the ``(source, reference)`` pairs that
    ``config`` names (a split of the run's corpus, or ``--src-file``/``--ref-file``; the first ``limit``), for
    ``command`` to score. A RunError for a checkpoint of a synthetic task or one that records no direction."""
    run_info = checkpoint.get("run_info") or {}
    if run_info.get("task", "translation") not in ("translation", "multi30k"):  # multi30k: before 0.3
        raise RunError(
            f"the checkpoint was trained on the synthetic task {run_info['task']!r}; {command} scores translations"
        )
    src, tgt = checkpoint_languages(checkpoint)
    what, pairs = _pairs_to_score(config, run_info, src, tgt)
    return src, tgt, what, pairs if config.limit is None else pairs[: config.limit]


def _pairs_to_score(config: ScoringOptions, run_info: dict[str, Any], src: str, tgt: str) -> tuple[str, list]:
    """``(what, pairs)``: the files or the split of the run's corpus that ``config`` names."""
    if config.src_file is not None:
        assert config.ref_file is not None
        try:
            corpus = files_corpus(src, tgt, test=(config.src_file, config.ref_file))
            return f"{config.src_file}", list(corpus.pairs("test"))
        except (FileNotFoundError, DataError, ValueError) as error:
            raise RunError(str(error).replace("test[0]", "--src-file").replace("test[1]", "--ref-file")) from None
    args = dict(run_info.get("args") or {})
    data = DataConfig(**{k: v for k, v in args.items() if k in _DATA_FIELDS} | {"src": src, "tgt": tgt})
    data_dir = config.data_dir
    if data.is_multi30k() and data_dir is None:
        gone = data.data_dir and not Path(data.data_dir).is_dir()
        if gone and "valid" not in (run_info.get("data") or {"valid": None}):
            # Multi30k has a validation split, and every run on it records one: this run read a folder of its own
            # en/de files (no val files), which is gone; never score Multi30k in its place
            raise RunError(
                f"the run's data folder {data.data_dir} is gone; pass --data-dir DIR where its files are now, or "
                "score files with --src-file F --ref-file R"
            )
        if os.environ.get(DATA_DIR_ENV):
            data_dir = os.environ[DATA_DIR_ENV]
        elif gone:
            data = dataclasses.replace(data, data_dir=None)  # the recorded folder is gone: the hub
    pairs = evaluation_pairs(data, config.split, data_dir)
    name = "test_2016_flickr" if config.split == "test" and data.is_multi30k() else config.split
    return name, pairs


_DATA_FIELDS = {f.name for f in dataclasses.fields(DataConfig)} - {"max_tokens"}


def evaluate_run(config: EvaluateConfig) -> dict[str, Any]:
    """Translate a split of the run's corpus, or ``--src-file``, with the model ``config`` names
    (``config.weights()``: ``--checkpoint`` or ``--pretrained``) and score it.

    The direction comes from the checkpoint (``checkpoint_languages``; a RunError when it records none).
    A split is read from the corpus the run recorded: Multi30k from ``config.data_dir``, else
    ``$COMPANION_DATA_DIR``, else the folder the run recorded (if it still exists), else the hub; a run's own
    ``--data-dir``/``--train``/``--hf-dataset`` corpus from where it was. Returns ``bleu``, ``bleu_signature``
    (sacreBLEU on detokenized text), ``tokenized_bleu``, ``tokenized_bleu_signature``,
    ``tokenized_lowercased_bleu`` and its signature (see :func:`companion.evaluate.tokenized_bleu`), ``chrf``,
    ``chrf_signature``, ``hypotheses``, ``direction``,
    ``split``, ``sentences``, ``beam_size``, ``alpha``, ``decoding_from`` (where those two come from),
    ``checkpoint``, ``step`` and ``decode_seconds``.
    """
    keep_freed_memory()  # companion._allocator: faster decoding steps on CPU
    loaded = load_for_inference(config.weights(), config.device)
    model, src_tok, tgt_tok, checkpoint, target, weights = loaded
    src, tgt, split, pairs = scoring_pairs(config, checkpoint, "evaluate")
    started = time.time()
    search = config.search_options(checkpoint, weights)
    result = evaluate_translation(model, pairs, src_tok, tgt_tok, **search, device=target, language=tgt)
    references = [t for _, t in pairs]
    tok_bleu, tok_signature = _tokenized_bleu(result["hypotheses"], references, tgt)
    lc_bleu, lc_signature = _tokenized_bleu(result["hypotheses"], references, tgt, lowercase=True)
    return {
        "bleu": result["bleu"],
        "bleu_signature": result["bleu_signature"],
        "tokenized_bleu": tok_bleu,
        "tokenized_bleu_signature": tok_signature,
        "tokenized_lowercased_bleu": lc_bleu,
        "tokenized_lowercased_bleu_signature": lc_signature,
        "chrf": result["chrf"],
        "chrf_signature": result["chrf_signature"],
        "hypotheses": result["hypotheses"],
        "direction": f"{src}->{tgt}",
        "split": split,
        "sentences": len(pairs),
        "beam_size": search["beam_size"],
        "alpha": search["alpha"],
        "decoding_from": config.search_origin(checkpoint, weights),
        "checkpoint": str(weights),
        "weights": describe_weights(loaded),
        "step": checkpoint.get("step"),
        "decode_seconds": time.time() - started,
    }


def _tokenized_bleu(
    hypotheses: list[str], references: list[str], language: str, *, lowercase: bool = False
) -> tuple[float | None, str]:
    """Tokenized BLEU, or ``(None, why)`` where spaCy has no rules for the target language."""
    try:
        return tokenized_bleu(hypotheses, references, language, lowercase=lowercase)
    except (ValueError, ImportError) as error:
        return None, f"not computed: {error}"
