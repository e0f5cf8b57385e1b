"""The sections of a run config that the run layer declares itself: :class:`DataConfig` (what a run learns
from) and :class:`ModelOptions` (the model settings that do not depend on the data). The third section is
:class:`~companion.train.TrainConfig`; :mod:`companion.runs.config` composes them into a ``RunConfig``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._validation import check_integer
from ..data.multi30k import DATA_DIR_ENV, is_multi30k_folder
from ..errors import ConfigError
from ..model import TransformerConfig
from ..options import check_declared, flag_of, label, option

__all__ = ["DataConfig", "ModelOptions"]


def _check_positive(config: Any, *names: str) -> None:
    """Each named field is a positive integer or None (the check of a count or a size)."""
    for name in names:
        value = getattr(config, name)
        if value is not None:
            check_integer(label(type(config), name), value, minimum=1, error=ConfigError)


def _path_as_str(config: Any, name: str, *, absolute: bool = False) -> None:
    """``config.name`` as a string; ``absolute``: made absolute, so that the run record (and ``--resume`` or
    ``companion evaluate`` from another folder) finds the same place."""
    value = getattr(config, name)
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{label(type(config), name)} must be a path or a string, got {value!r}")
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if absolute and value:
        value = os.path.abspath(value)
    setattr(config, name, value)


def _filled(config: Any, values: Mapping[str, Any]) -> Any:
    """``config`` with its None fields set from ``values`` (the preset): a new, checked instance."""
    missing = {k: v for k, v in values.items() if hasattr(config, k) and getattr(config, k) is None}
    return dataclasses.replace(config, **missing) if missing else config


# --------------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------------
TRANSLATION = "translation"  # the task of every run on a parallel corpus (Multi30k or the user's data)


@dataclass
class DataConfig:
    """What a run learns from and how it is cut into batches (``max_tokens`` None: from the preset)."""

    task: str = option(
        TRANSLATION,
        "what to learn: translation (of Multi30k by default, or of the corpus of --data-dir, --train or "
        "--hf-dataset; 'multi30k' is its older name, still accepted) or a synthetic toy task (default: {default})",
        choices=[TRANSLATION, "multi30k", "copy", "reverse", "sort"],
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
        "bpe",
        "bpe: byte-pair subwords, one vocabulary shared by both languages, as in the paper (any language; the "
        "measured best on Multi30k, see --help's epilog); word: spaCy words, one vocabulary per language "
        "(languages spaCy has rules for; the default until 0.3) (default: {default})",
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
    hold_out: int | None = option(
        None,
        "for data without a validation split (--train files alone, a folder or dataset without one): set N "
        "training pairs, spread evenly through them, aside as the validation split; they are not trained on and "
        "give the validation loss and the alpha choice at the end (the same N pairs on --resume and for "
        "'companion evaluate --split valid')",
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
        if self.task == "multi30k":  # the older name of the translation task (commands, run records before 0.3)
            self.task = TRANSLATION
        _check_positive(
            self, "min_freq", "max_tokens", "limit_train", "hold_out", "num_examples", "synthetic_max_len", "workers"
        )
        for name in ("vocab_size", "synthetic_vocab"):  # more than the 4 special tokens
            check_integer(label(DataConfig, name), getattr(self, name), minimum=5, error=ConfigError)
        for name in ("data_dir", "cache_dir"):
            _path_as_str(self, name, absolute=True)
        # a dataset name, or a save_to_disk folder: absolute when it names a folder here, else a name on the hub
        _path_as_str(self, "hf_dataset", absolute=self.hf_dataset is not None and os.path.isdir(self.hf_dataset))
        for name in ("train_split", "valid_split", "test_split", "hf_config"):
            _check_name(self, name)
        for name in ("train_files", "valid_files", "test_files"):
            _check_files(self, name)
        for name in ("src", "tgt"):
            _check_language_code(self, name)
        if self.task == TRANSLATION:
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
        if self.hold_out and (self.valid_files or self.valid_split):
            named = "--valid files" if self.valid_files else f"--valid-split {self.valid_split}"
            raise ConfigError(f"--hold-out makes a validation split from the training data; {named} name one already")
        splits = [flag_of(DataConfig, n) for n in ("train_split", "valid_split", "test_split") if getattr(self, n)]
        if splits and not (self.data_dir or self.hf_dataset):
            raise ConfigError(f"{', '.join(splits)} name(s) the splits of --data-dir or --hf-dataset; give one")
        if self.hold_out and self._reads_multi30k_with_its_validation():
            raise ConfigError(
                "--hold-out is for data without a validation split; Multi30k (the default data, or a folder of en "
                "and de files with its val.{en,de}) is read with its own; give other files with --train "
                "SRC_FILE TGT_FILE, or a folder without val files"
            )
        if self.is_multi30k() and {self.src, self.tgt} != {"en", "de"}:
            raise ConfigError(
                f"--src {self.src} --tgt {self.tgt}: Multi30k (the default data) has only en and de; for other "
                "languages give your data: --data-dir DIR ({split}.{lang} files), --train SRC_FILE TGT_FILE "
                "or --hf-dataset NAME"
            )

    def _sources(self) -> dict[str, Any]:
        return {"--data-dir": self.data_dir, "--train": self.train_files, "--hf-dataset": self.hf_dataset}

    def is_multi30k(self) -> bool:
        """Whether the run reads Multi30k itself (no source given, or a folder in en and de with Multi30k's
        validation files: ``companion.data.multi30k.is_multi30k_folder``): read into memory as before, so that
        Multi30k runs keep their batches. A folder of one's own en and de files without them is not Multi30k."""
        if self.task != TRANSLATION or self.train_files or self.hf_dataset:
            return False
        if self.train_split or self.valid_split or self.test_split:
            return False
        if self.hold_out:  # a validation split made from the training data: a corpus of one's own, wherever it is
            return False
        folder = self._folder()
        return folder is None or is_multi30k_folder(folder, self.src, self.tgt)

    def _folder(self) -> str | None:
        """The folder the data come from when no other source is given: --data-dir, else (in en and de, the
        languages of Multi30k) $COMPANION_DATA_DIR."""
        if self.data_dir or {self.src, self.tgt} != {"en", "de"}:
            return self.data_dir
        return os.environ.get(DATA_DIR_ENV) or None

    def _reads_multi30k_with_its_validation(self) -> bool:
        """Whether the data are Multi30k with its own validation split: no source given, or an existing en/de folder
        that ``is_multi30k_folder`` takes for Multi30k (a folder gone since a run
        recorded it is not judged here: reading it says so)."""
        if self.task != TRANSLATION or self.train_files or self.hf_dataset:
            return False
        folder = self._folder()
        if folder is None:
            return not self.data_dir
        return os.path.isdir(folder) and is_multi30k_folder(folder, self.src, self.tgt)

    def shares_vocabulary(self) -> bool:
        """Whether one vocabulary serves both languages (a shared BPE), so that the embeddings can be shared."""
        return self.task == TRANSLATION and self.tokenizer == "bpe"


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
    if len(files) == 2 and all(f.endswith(_DATA_FILE_SUFFIXES) for f in files):
        raise ConfigError(
            f"{flag} takes SRC_FILE TGT_FILE (line-aligned text files) or one file that holds both sides "
            f"({', '.join(_DATA_FILE_SUFFIXES)}), got two such files: {value[0]!r}, {value[1]!r}"
        )
    setattr(config, name, files)


# --------------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------------
@dataclass
class ModelOptions:
    """The model settings a run chooses, by :class:`~companion.model.TransformerConfig` field name (None: from
    the preset). ``--layers N`` sets ``num_encoder_layers``; ``num_decoder_layers`` follows it unless
    ``--decoder-layers`` is given (the paper's N is one number for both stacks; a deep encoder with a shallow
    decoder, Kasai et al. 2021, decodes faster). The values are checked by TransformerConfig itself, and a run's
    decoder has at least one layer (without one, nothing attends to the source)."""

    d_model: int | None = option(None, "model width (default: from the preset)", metavar="N", group="model")
    num_heads: int | None = option(
        None, "attention heads (default: from the preset)", flag="--heads", metavar="N", group="model"
    )
    num_encoder_layers: int | None = option(
        None,
        "encoder layers, and decoder layers unless --decoder-layers is given (default: from the preset)",
        flag="--layers",
        metavar="N",
        group="model",
    )
    num_decoder_layers: int | None = option(
        None,
        "decoder layers, when they differ from the encoder's (default: --layers, or the preset's)",
        flag="--decoder-layers",
        metavar="N",
        group="model",
    )
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
        decoder_layers_from = "num_decoder_layers"
        if self.num_decoder_layers is None:  # --layers sets both stacks
            self.num_decoder_layers = self.num_encoder_layers
            decoder_layers_from = "num_encoder_layers"
        check_declared(self)
        if self.num_decoder_layers is not None:  # the decoder's cross-attention is what reads the source
            flag = label(ModelOptions, decoder_layers_from)
            check_integer(flag, self.num_decoder_layers, minimum=1, error=ConfigError)
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
            # the model's message names its fields; say them as the command line does: d_model (--d-model)
            message = re.sub(
                r"\b(" + "|".join(f.name for f in dataclasses.fields(ModelOptions)) + r")\b(?![=(])",
                lambda m: label(ModelOptions, m[1]),
                str(error),
            )
            raise ConfigError(f"invalid model options: {message}") from None

    def _settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
