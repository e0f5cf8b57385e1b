"""The configuration of a training run: :class:`RunConfig`, composed of a data, a model and a training config.

A run config holds three sections and the few settings of the run itself:

* ``data`` -- :class:`DataConfig`: the task, the languages, the tokenizer, the batching;
* ``model`` -- :class:`ModelOptions`: the model settings that do not depend on the data (the vocabulary sizes
  are known once the tokenizers are built, :meth:`RunConfig.model_config`);
* ``train`` -- :class:`~companion.train.TrainConfig` itself: the Trainer's settings, declared and checked there;
* ``preset``, ``out``, ``resume``, ``overwrite``, ``threads``, ``average_last``: the run's own.

Every option is a field of exactly one of these, declared once with :func:`companion.options.option` (type,
default, help, flag, resumability) and checked once, by the class that declares it. The command line's flags
(:func:`companion.runs.add_options` over ``SECTIONS``), the flat run record (``run.json``'s and every
checkpoint's ``args``: each field by its name) and ``--resume`` all read these declarations. A preset
(``companion.presets.PRESETS``) fills what the user did not give: an explicit value beats the preset, which
beats the default.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validation import check_integer
from ..errors import ConfigError, RunError
from ..model import TransformerConfig
from ..options import check_declared, flag_of, label, option, option_fields, option_spec
from ..presets import DEFAULT_AVERAGE_LAST, DEFAULT_SAVE_EVERY_MINUTES, PRESETS
from ..train import TrainConfig

__all__ = ["DataConfig", "ModelOptions", "RunConfig", "SECTIONS", "DEFAULTS_NOTE"]

DEFAULTS_NOTE = (
    "Defaults: the best setting measured on Multi30k with 2 CPU cores (bench/results/multi30k_cpu_de-en.json, "
    "the result the README reports, from a 20-minute run): --preset small, --tokenizer word, and with "
    "--max-minutes a checkpoint every minute (--save-every-minutes 1) of which the last 5 are averaged into "
    "DIR/averaged.pt (--average-last 5, the paper's checkpoint averaging). So 'companion train --src de --tgt en "
    "--max-minutes 20 --out DIR' runs that setting; every flag given explicitly overrides its default."
)


def _check_positive(config: Any, *names: str) -> None:
    """Each named field is a positive integer or None (the check of a count or a size)."""
    for name in names:
        value = getattr(config, name)
        if value is not None:
            check_integer(label(type(config), name), value, minimum=1, error=ConfigError)


def _path_as_str(config: Any, name: str) -> None:
    value = getattr(config, name)
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{label(type(config), name)} must be a path or a string, got {value!r}")
    if isinstance(value, os.PathLike):
        setattr(config, name, os.fspath(value))


def _filled(config: Any, values: Mapping[str, Any]) -> Any:
    """``config`` with its None fields set from ``values`` (the preset): a new, checked instance."""
    missing = {k: v for k, v in values.items() if hasattr(config, k) and getattr(config, k) is None}
    return dataclasses.replace(config, **missing) if missing else config


# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------
@dataclass
class DataConfig:
    """What a run learns from and how it is cut into batches (``max_tokens`` None: from the preset)."""

    task: str = option(
        "multi30k",
        "what to learn: translation (multi30k: Multi30k by default, or the corpus of --data-dir, --train or "
        "--hf-dataset) or a synthetic toy task (default: {default})",
        choices=["multi30k", "copy", "reverse", "sort"],
        group="data",
    )
    src: str = option(
        "en",
        "source language: any code (en, fr, ru, zh, ...; with --tokenizer word one spaCy knows); Multi30k has "
        "en and de (default: {default})",
        metavar="LANG",
        group="data",
    )
    tgt: str = option("de", "target language, like --src (default: {default})", metavar="LANG", group="data")
    data_dir: str | None = option(
        None,
        "folder of {split}.{lang} files, plain or .gz, for --src/--tgt (split names: --train-split, --valid-split, "
        "--test-split; Multi30k's by default; only the training split is needed) (default: $COMPANION_DATA_DIR, "
        "else the Hugging Face hub bentrevett/multi30k)",
        metavar="DIR",
        group="data",
        resumable=True,
    )
    train_split: str | None = option(
        None,
        "name of the training split: the file stem in --data-dir (default: train) or the split of --hf-dataset "
        "(default: train)",
        metavar="NAME",
        group="data",
    )
    valid_split: str | None = option(
        None,
        "name of the validation split (default: val in --data-dir, validation in --hf-dataset; a missing one "
        "means no validation)",
        metavar="NAME",
        group="data",
    )
    test_split: str | None = option(
        None,
        "name of the test split, read by 'companion evaluate --split test' (default: test_2016_flickr in "
        "--data-dir, test in --hf-dataset)",
        metavar="NAME",
        group="data",
    )
    train_files: list[str] | None = option(
        None,
        "training data as files: SRC_FILE TGT_FILE (line-aligned, plain or .gz), or one FILE.tsv (source TAB "
        "target) or FILE.json/.jsonl (a 'translation' column or one column per language)",
        flag="--train",
        metavar="FILE",
        group="data",
        resumable=True,
        nargs="+",
    )
    valid_files: list[str] | None = option(
        None, "validation files, like --train (optional: no validation without)", flag="--valid", metavar="FILE",
        group="data",
        resumable=True, nargs="+",
    )  # fmt: skip
    test_files: list[str] | None = option(
        None, "test files, like --train (for 'companion evaluate --split test')", flag="--test", metavar="FILE",
        group="data",
        resumable=True, nargs="+",
    )  # fmt: skip
    hf_dataset: str | None = option(
        None,
        "a Hugging Face dataset: a hub name (wmt14, iwslt2017, opus_books: the 'translation' column) or a folder "
        "saved with save_to_disk",
        metavar="NAME",
        group="data",
    )
    hf_config: str | None = option(
        None, "the configuration of --hf-dataset (wmt14: de-en)", metavar="CFG", group="data"
    )
    cache_dir: str | None = option(
        None,
        "where token ids of --data-dir/--train/--hf-dataset corpora are stored, keyed by the data and the "
        "tokenizer (default: $COMPANION_CACHE_DIR/token-stores, else ~/.cache/companion/token-stores)",
        metavar="DIR",
        group="data",
        resumable=True,
    )
    workers: int | None = option(
        None,
        "processes that tokenize a corpus into the cache (default: the CPU count)",
        metavar="N",
        group="data",
        resumable=True,
    )
    tokenizer: str = option(
        "word",
        "word: spaCy words, one vocabulary per language (the measured best on Multi30k, "
        "see --help's epilog); bpe: byte-pair subwords shared by both languages, as in the "
        "paper (default: {default})",
        choices=["word", "bpe"],
        group="data",
    )
    vocab_size: int = option(8000, "size of the shared BPE vocabulary (default: {default})", metavar="N", group="data")
    min_freq: int = option(
        2, "word tokenizer: words seen fewer times become <unk> (default: {default})", metavar="N", group="data"
    )
    max_tokens: int | None = option(
        None,
        "tokens per batch (batch size x longest sentence, per side; the paper: 25000 over all GPUs). Under "
        "torchrun this is the global batch, split between processes (default: from the preset)",
        metavar="N",
        group="data",
    )
    limit_train: int | None = option(
        None,
        "use only the first N training pairs (quick experiments; vocabularies come from them too)",
        metavar="N",
        group="data",
    )
    num_examples: int = option(
        20000, "synthetic tasks: training examples (default: {default})", metavar="N", group="data"
    )
    synthetic_vocab: int = option(
        20, "synthetic tasks: vocabulary size incl. 4 specials (default: {default})", metavar="N", group="data"
    )
    synthetic_max_len: int = option(
        10, "synthetic tasks: longest sequence (default: {default})", metavar="N", group="data"
    )

    def __post_init__(self) -> None:
        check_declared(self)
        _check_positive(self, "min_freq", "max_tokens", "limit_train", "num_examples", "synthetic_max_len", "workers")
        for name in ("vocab_size", "synthetic_vocab"):  # more than the 4 special tokens
            check_integer(label(DataConfig, name), getattr(self, name), minimum=5, error=ConfigError)
        for name in ("data_dir", "cache_dir", "hf_dataset"):
            _path_as_str(self, name)
        for name in ("train_split", "valid_split", "test_split", "hf_config"):
            _check_name(self, name)
        for name in ("train_files", "valid_files", "test_files"):
            _check_files(self, name)
        for name in ("src", "tgt"):
            _check_language_code(self, name)
        if self.task == "multi30k":
            if self.src == self.tgt:
                raise ConfigError(f"--src and --tgt must differ, got {self.src!r} for both")
            self._check_source()
            if self.tokenizer == "word":
                for name in ("src", "tgt"):
                    _check_spacy_language(self, name)

    def _check_source(self) -> None:
        """At most one data source; split names with a folder or a dataset; Multi30k only in en and de."""
        given = [flag for flag, value in self._sources().items() if value]
        if len(given) > 1:
            raise ConfigError(f"give one data source, got {' and '.join(given)}")
        if (self.valid_files or self.test_files) and not self.train_files:
            raise ConfigError("--valid and --test files need --train files (the data to learn from)")
        if self.hf_config and not self.hf_dataset:
            raise ConfigError("--hf-config needs --hf-dataset (the dataset it configures)")
        splits = [flag_of(DataConfig, n) for n in ("train_split", "valid_split", "test_split") if getattr(self, n)]
        if splits and not (self.data_dir or self.hf_dataset):
            raise ConfigError(f"{', '.join(splits)} name(s) the splits of --data-dir or --hf-dataset; give one")
        if self.is_multi30k() and {self.src, self.tgt} != {"en", "de"}:
            raise ConfigError(
                f"--src {self.src} --tgt {self.tgt}: Multi30k (the default data) has only en and de; for other "
                "languages give your data: --data-dir DIR ({split}.{lang} files), --train SRC_FILE TGT_FILE "
                "or --hf-dataset NAME"
            )

    def _sources(self) -> dict[str, Any]:
        return {"--data-dir": self.data_dir, "--train": self.train_files, "--hf-dataset": self.hf_dataset}

    def is_multi30k(self) -> bool:
        """Whether the run reads Multi30k itself (no source given other than a folder with Multi30k's names,
        in en and de): read into memory as before, so that Multi30k runs keep their batches."""
        if self.task != "multi30k" or self.train_files or self.hf_dataset:
            return False
        if self.train_split or self.valid_split or self.test_split:
            return False
        return self.data_dir is None or {self.src, self.tgt} == {"en", "de"}

    def shares_vocabulary(self) -> bool:
        """Whether one vocabulary serves both languages (a shared BPE), so that the embeddings can be shared."""
        return self.task == "multi30k" and self.tokenizer == "bpe"


# A language code as corpora take it (ISO 639 codes such as en, fr, zh; BCP-47 style en-US, zh_Hant).
_LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{1,8})*")
_DATA_FILE_SUFFIXES = (".tsv", ".tsv.gz", ".json", ".jsonl")


def _check_language_code(config: DataConfig, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, str) or not _LANGUAGE_CODE.fullmatch(value):
        raise ConfigError(
            f"{label(DataConfig, name)} must be a language code such as en, fr, ru, zh (2-3 letters, optionally "
            f"-REGION), got {value!r}"
        )


def _check_spacy_language(config: DataConfig, name: str) -> None:
    """ConfigError unless spaCy's rule-based tokenizer exists for the language (the word tokenizer's)."""
    value = getattr(config, name)
    if value in ("en", "de"):
        return  # Multi30k's: always there (and no spaCy import just to check a default)
    from ..data.tokenizers import spacy_tokenizer

    try:
        spacy_tokenizer(value)
    except (ValueError, ImportError) as error:
        raise ConfigError(
            f"{label(DataConfig, name)} {value} with --tokenizer word: {error}. --tokenizer bpe works for any language"
        ) from None


def _check_name(config: Any, name: str) -> None:
    value = getattr(config, name)
    if value is not None and (not isinstance(value, str) or not value or "/" in value):
        raise ConfigError(f"{label(type(config), name)} must be a name (no '/'), got {value!r}")


def _check_files(config: DataConfig, name: str) -> None:
    """``--train SRC_FILE TGT_FILE`` or ``--train FILE.tsv`` (or .json/.jsonl): absolute paths, as strings."""
    value = getattr(config, name)
    if value is None:
        return
    if isinstance(value, (str, os.PathLike)) or not isinstance(value, (list, tuple)):
        value = [value]
    files = [os.path.abspath(os.fspath(v)) if isinstance(v, (str, os.PathLike)) else v for v in value]
    flag = label(DataConfig, name)
    if not all(isinstance(f, str) for f in files):
        raise ConfigError(f"{flag} must be file paths, got {value!r}")
    if len(files) == 1 and not files[0].endswith(_DATA_FILE_SUFFIXES):
        raise ConfigError(
            f"{flag} takes SRC_FILE TGT_FILE, or one file ending in {', '.join(_DATA_FILE_SUFFIXES)}; got only "
            f"{value[0]!r}"
        )
    if len(files) > 2:
        raise ConfigError(f"{flag} takes SRC_FILE TGT_FILE (two files), got {len(files)}")
    setattr(config, name, files)


# --------------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------------
@dataclass
class ModelOptions:
    """The model settings a run chooses, by :class:`~companion.model.TransformerConfig` field name (None: from
    the preset). ``--layers N`` sets ``num_encoder_layers``; ``num_decoder_layers`` follows it unless given (the
    paper's N is one number for both stacks). The values are checked by TransformerConfig itself."""

    d_model: int | None = option(None, "model width (default: from the preset)", metavar="N", group="model")
    num_heads: int | None = option(
        None, "attention heads (default: from the preset)", flag="--heads", metavar="N", group="model"
    )
    num_encoder_layers: int | None = option(
        None, "encoder layers = decoder layers (default: from the preset)", flag="--layers", metavar="N", group="model"
    )
    num_decoder_layers: int | None = None
    d_ff: int | None = option(None, "feed-forward inner width (default: from the preset)", metavar="N", group="model")
    dropout: float | None = option(None, "dropout P_drop (default: from the preset)", metavar="P", group="model")
    norm_first: bool | None = option(
        None,
        "",
        group="model",
        switches={
            "--norm-first": (True, "pre-LN: LayerNorm before each sub-layer (trains faster at high learning rates)"),
            "--post-ln": (False, "post-LN, the paper's x = LayerNorm(x + Sublayer(x)) (default: from the preset)"),
        },
    )
    max_len: int = option(
        256,
        "longest sequence the model accepts; longer training sentences are truncated with "
        "a warning (default: {default})",
        metavar="N",
        group="model",
    )

    def __post_init__(self) -> None:
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_encoder_layers
        check_declared(self)
        check_integer(label(ModelOptions, "max_len"), self.max_len, minimum=2, error=ConfigError)  # a token + <eos>
        if all(value is not None for value in dataclasses.asdict(self).values()):
            self.transformer_config(8, 8)  # the model's own rules (heads divide d_model, ...), before any data

    def transformer_config(
        self, src_vocab_size: int, tgt_vocab_size: int, *, share_embeddings: bool = False
    ) -> TransformerConfig:
        """The model's config for these vocabulary sizes (the output projection is tied to the target embedding)."""
        try:
            return TransformerConfig(
                src_vocab_size, tgt_vocab_size, share_embeddings=share_embeddings, tie_output=True, **self._settings()
            )
        except (ValueError, TypeError) as error:
            raise ConfigError(
                f"invalid model options (--d-model, --heads, --layers, --d-ff, --dropout): {error}"
            ) from None

    def _settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------
def _preset_help() -> str:
    return "; ".join(f"{name}: {preset.describe()}" for name, preset in PRESETS.items())


@dataclass
class RunConfig:
    """A training run (``companion train``): its data, model and training sections and the run's own settings.

    Build it from flat options (what the command line parsed, by field name) with :meth:`from_options`, which
    applies the preset to every section; or from sections, where the model and data values left at None come from
    the preset. :meth:`to_record` / :meth:`from_record` are the flat form recorded in ``run.json``.
    """

    train: TrainConfig
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelOptions = field(default_factory=ModelOptions)
    preset: str = option(
        "small",
        "model size and matching settings: " + _preset_help() + " (default: {default})",
        choices=list(PRESETS),
        group="model",
    )
    out: str | None = option(
        None,
        "output folder for checkpoints, metrics.jsonl and run.json (required)",
        metavar="DIR",
        group="run",
        resumable=True,
    )
    resume: bool = option(
        False,
        "continue the run in --out from its latest checkpoint (limits, device and logging "
        "flags may change; the rest must match)",
        group="run",
        resumable=True,
    )
    overwrite: bool = option(
        False,
        "delete the run already in --out (its run.json, metrics.jsonl, averaged.pt and "
        "checkpoints/step_*.pt only: other files stay) and start afresh",
        group="run",
        resumable=True,
    )
    threads: int | None = option(
        None,
        "CPU threads for PyTorch (default: PyTorch's choice; torchrun sets 1 per process)",
        metavar="N",
        group="run",
        resumable=True,
    )
    average_last: int | None = option(
        None,
        f"at the end, average the last N checkpoints into DIR/averaged.pt (paper: 5; default: "
        f"{DEFAULT_AVERAGE_LAST}, at most --keep-last, when the run writes periodic checkpoints, else 1 = no "
        "averaging)",
        metavar="N",
        group="run",
        resumable=True,
    )

    def __post_init__(self) -> None:
        check_declared(self)
        for name, section in (("train", TrainConfig), ("data", DataConfig), ("model", ModelOptions)):
            if not isinstance(getattr(self, name), section):
                raise ConfigError(f"{name} must be a {section.__name__}, got {type(getattr(self, name)).__name__}")
        self.data = _filled(self.data, PRESETS[self.preset].data)
        self.model = _filled(self.model, PRESETS[self.preset].model)
        _check_positive(self, "average_last")
        if self.threads is not None:
            check_integer(label(RunConfig, "threads"), self.threads, minimum=1, maximum=_MAX_THREADS, error=ConfigError)
        _path_as_str(self, "out")
        self._check_lengths()
        self._check_memory()
        keep_last = self.train.keep_last
        if keep_last is not None and self.average_count > keep_last:
            raise ConfigError(
                f"--average-last {self.average_count} averages more checkpoints than --keep-last "
                f"{keep_last} keeps; raise --keep-last to at least {self.average_count}"
            )

    def _check_lengths(self) -> None:
        longest = self.data.synthetic_max_len
        if self.data.task != "multi30k" and longest >= self.model.max_len:
            raise ConfigError(
                f"--synthetic-max-len {longest} needs --max-len of at least {longest + 1} (a sequence plus its "
                f"<eos>), got --max-len {self.model.max_len}"
            )

    def training_memory(self) -> int:
        """An estimate, in bytes, of the memory that training this run takes before any activation: fp32 weights,
        gradients and Adam's two moments (16 bytes per parameter), the positional table, and for a synthetic task
        its examples. The vocabulary of a word tokenizer is not known before the data are read (not counted)."""
        m, data = self.model, self.data
        assert None not in (m.d_model, m.d_ff, m.num_encoder_layers, m.num_decoder_layers)
        d, d_ff = int(m.d_model or 0), int(m.d_ff or 0)
        vocab = data.synthetic_vocab if data.task != "multi30k" else data.vocab_size if data.tokenizer == "bpe" else 0
        per_layer = 4 * d * d + 2 * d * d_ff
        parameters = 2 * vocab * d + int(m.num_encoder_layers or 0) * per_layer
        parameters += int(m.num_decoder_layers or 0) * (per_layer + 4 * d * d)
        examples = data.num_examples * data.synthetic_max_len if data.task != "multi30k" else 0
        return 16 * parameters + 4 * m.max_len * d + _BYTES_PER_SYNTHETIC_TOKEN * examples

    def _check_memory(self) -> None:
        available = _physical_memory()
        needed = self.training_memory()
        if available is not None and needed > available:
            raise ConfigError(
                f"this run needs about {needed / 2**30:,.1f} GiB of memory before any activation (weights, "
                f"gradients, Adam's moments, the positional table of --max-len {self.model.max_len}"
                + (", the synthetic examples" if self.data.task != "multi30k" else "")
                + f"), more than the {available / 2**30:,.1f} GiB of this machine: lower --d-model, --d-ff, "
                "--layers, --max-len, --synthetic-vocab, --vocab-size or --num-examples"
            )

    @property
    def average_count(self) -> int:
        """How many of the last checkpoints are averaged into ``averaged.pt`` (1 = none), ``average_last`` if given,
        else ``companion.presets.DEFAULT_AVERAGE_LAST`` (at most ``keep_last``) when the run writes periodic
        checkpoints, else 1."""
        if self.average_last is not None:
            return self.average_last
        if self.train.save_every is None and self.train.save_every_minutes is None:
            return 1
        return max(1, min(DEFAULT_AVERAGE_LAST, self.train.keep_last or DEFAULT_AVERAGE_LAST))

    def model_config(self, src_vocab_size: int, tgt_vocab_size: int) -> TransformerConfig:
        """The :class:`~companion.model.TransformerConfig` of this run for the given vocabulary sizes (embeddings
        shared when one BPE vocabulary serves both languages; the output projection tied)."""
        shared = self.data.shares_vocabulary() and src_vocab_size == tgt_vocab_size
        return self.model.transformer_config(src_vocab_size, tgt_vocab_size, share_embeddings=shared)

    # -- the flat form: flags and records ----------------------------------------------------------------
    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RunConfig:
        """The run that flat options describe (field names of any section: what ``companion train`` parsed).

        The preset fills what is not given; with a ``max_minutes`` budget and no ``save_every``/
        ``save_every_minutes``, a checkpoint is written every ``companion.presets.DEFAULT_SAVE_EVERY_MINUTES``.
        Raises :class:`~companion.errors.ConfigError` for an unknown name or a bad value (naming the option).
        """
        given = dict(options)
        _check_known(given)
        preset_name = given.get("preset", cls.preset)
        _check_preset(preset_name)
        train = {**PRESETS[preset_name].train, **_pick(given, TrainConfig)}
        if train.get("save_every") is None and train.get("save_every_minutes") is None:
            if isinstance(train.get("max_minutes"), (int, float)):
                train["save_every_minutes"] = DEFAULT_SAVE_EVERY_MINUTES
        return cls(
            train=TrainConfig(**train),
            data=DataConfig(**_pick(given, DataConfig)),
            model=ModelOptions(**_pick(given, ModelOptions)),
            **_pick(given, RunConfig),
        )

    def to_record(self) -> dict[str, Any]:
        """Every field of every section by its name, flat: the ``args`` of ``run.json`` and of each checkpoint."""
        own = {f.name: getattr(self, f.name) for f in option_fields(RunConfig)}
        return {**dataclasses.asdict(self.data), **dataclasses.asdict(self.model), **self.train.to_dict(), **own}

    @classmethod
    def from_record(cls, values: Mapping[str, Any]) -> RunConfig:
        """The config a run recorded (``run.json``'s or a checkpoint's ``args``, by this or an older version).

        Keys of options that no longer exist are ignored; options added since take their defaults (and, for
        preset options, the recorded preset's value); ``layers`` (before 0.3) is ``num_encoder_layers``.
        """
        return cls.from_options(_known(_upgraded(values)))

    @classmethod
    def resumed(cls, recorded: Mapping[str, Any], given: Mapping[str, Any]) -> RunConfig:
        """The config of a resumed run: the recorded values, with the ``given`` ones that may change.

        Raises :class:`~companion.errors.RunError` listing every given option that may not change on
        ``--resume`` (see ``resumable`` in :func:`~companion.options.option`) and differs from the recorded value.
        """
        _check_known(given)
        recorded = _upgraded(recorded)
        conflicts = [
            f"{_as_typed(name, value)} (the run used {recorded.get(name)!r})"
            for name, value in given.items()
            if name in _OPTIONS and not option_spec(_OPTIONS[name][1]).resumable and value != recorded.get(name)
        ]
        if conflicts:
            raise RunError(
                "--resume continues the recorded run; these flags differ from it: "
                + "; ".join(conflicts)
                + ". Start a new run (another --out, or --overwrite) to change them."
            )
        return cls.from_options({**_known(recorded), **given, "resume": True})


# The most threads --threads may ask for: more than a few per core only slows PyTorch down, and a very large
# number makes its OpenMP runtime abort.
_MAX_THREADS = max(64, 4 * (os.cpu_count() or 1))
# A synthetic example's memory per token: the Python lists of ids and the batch tensors built from them.
_BYTES_PER_SYNTHETIC_TOKEN = 64


def _physical_memory() -> int | None:
    """The machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


# The config classes whose option fields are the flags of ``companion train``, in the order of its --help.
SECTIONS: tuple[type, ...] = (DataConfig, ModelOptions, TrainConfig, RunConfig)


def _flat_fields() -> dict[str, tuple[type, dataclasses.Field]]:
    """Every field a flat record may hold, by name, with the class that declares it (names are unique)."""
    found: dict[str, tuple[type, dataclasses.Field]] = {}
    for section in SECTIONS:
        for f in dataclasses.fields(section):
            if f.name in ("train", "data", "model"):
                continue
            if f.name in found:
                raise TypeError(f"{f.name} is declared by both {found[f.name][0].__name__} and {section.__name__}")
            found[f.name] = (section, f)
    return found


_FIELDS = _flat_fields()
_OPTIONS = {name: entry for name, entry in _FIELDS.items() if "option" in entry[1].metadata}
_RENAMED_RECORD_KEYS = {"layers": "num_encoder_layers"}  # records written before 0.3


def _check_preset(name: Any) -> None:
    """ConfigError unless ``name`` is a preset (checked first: the preset fills the other options)."""
    if name not in PRESETS:
        raise ConfigError(f"{label(RunConfig, 'preset')} must be one of {list(PRESETS)}, got {name!r}")


def _pick(values: Mapping[str, Any], section: type) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k in _FIELDS and _FIELDS[k][0] is section}


def _check_known(given: Mapping[str, Any]) -> None:
    unknown = sorted(set(given) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"unknown RunConfig options: {unknown}")


def _known(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k in _FIELDS}


def _upgraded(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record in today's field names (older records name some fields differently)."""
    return {_RENAMED_RECORD_KEYS.get(k, k): v for k, v in values.items()}


def _as_typed(name: str, value: Any) -> str:
    """How a user gives ``value`` to the option ``name``: ``--heads 2``, or the switch alone (``--post-ln``)."""
    section, f = _OPTIONS[name]
    for flag, (switch_value, _) in (option_spec(f).switches or {}).items():
        if switch_value == value:
            return flag
    return f"{flag_of(section, name)} {value!r}"
