"""Runs: train a model into a folder, translate with it, score it. Used by the CLI, ``bench/`` and the training chapter.

A training run is described by one typed :class:`RunConfig`. Each of its fields declares, once, everything
about a training option: its type and default (the dataclass field), and in ``metadata`` its help text, its
command-line flag and whether it may change when a run is resumed (see :func:`option`). From these
declarations

* ``companion train``'s argument parser is built (:func:`add_options`, used by :mod:`companion.cli`),
* the run record ``run.json`` (and the ``run_info`` of every checkpoint) is written (:meth:`RunConfig.to_dict`)
  and read back (:meth:`RunConfig.from_record`),
* ``--resume`` merges the recorded and the newly given values (:meth:`RunConfig.resumed`),
* the :class:`~companion.train.TrainConfig` of the :class:`~companion.train.Trainer` is derived
  (:meth:`RunConfig.train_config`: every field the two share by name).

A new option is therefore one new field here (plus, if the Trainer needs it, the same name in TrainConfig).
Values are checked once, in ``__post_init__``; errors are :class:`~companion.errors.ConfigError` (a
``ValueError``) naming the flag. Translation and evaluation runs have their own small configs,
:class:`TranslateConfig` and :class:`EvaluateConfig`, declared the same way.

The runs:

* :func:`train_run` -- ``companion train``: a fresh run or ``--resume``, one process or several under
  ``torchrun``; writes ``run.json``, ``metrics.jsonl``, ``checkpoints/`` and optionally ``averaged.pt``.
* :func:`translate_run` -- ``companion translate``: lines of text in, translations out.
* :func:`evaluate_run` -- ``companion evaluate``: BLEU and chrF on a Multi30k split.
* :func:`load_for_inference` / :func:`resolve_checkpoint` -- a model and its tokenizers from a checkpoint or a
  run folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from ._validation import check_bool, check_choice, check_integer, check_number
from .errors import ConfigError, RunError, RunLockedError
from .model import MODEL_PRESETS, TransformerConfig
from .train import OPTION_LIMITS, TrainConfig

__all__ = [
    "TRAINING_PRESETS",
    "RUN_ARTIFACTS",
    "option",
    "option_fields",
    "add_options",
    "RunConfig",
    "TranslateConfig",
    "EvaluateConfig",
    "prepare_out_dir",
    "RunFolderLock",
    "data_identity",
    "build_tokenizers",
    "build_run_data",
    "RunData",
    "train_run",
    "resolve_checkpoint",
    "load_for_inference",
    "InferenceModel",
    "translate_run",
    "evaluate_run",
]

# The training settings that go with each model preset (the model shapes: companion.model.MODEL_PRESETS).
TRAINING_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(max_tokens=2000, warmup=200, lr_factor=1.0),
    "small": dict(max_tokens=600, warmup=400, lr_factor=1.0),
    "base": dict(max_tokens=25000, warmup=4000, lr_factor=1.0),
    "big": dict(max_tokens=25000, warmup=4000, lr_factor=1.0),
}
# RunConfig's model fields and the TransformerConfig fields of MODEL_PRESETS they are read from.
_PRESET_MODEL_FIELDS = {
    "d_model": "d_model",
    "num_heads": "num_heads",
    "layers": "num_encoder_layers",
    "d_ff": "d_ff",
    "dropout": "dropout",
    "norm_first": "norm_first",
}
# What a run writes into its folder (all that --overwrite deletes).
RUN_ARTIFACTS = ("run.json", "metrics.jsonl", "checkpoints", "averaged.pt")

# The defaults of `companion train` are the best setting measured on Multi30k with 2 CPU cores
# (bench/results/multi30k_cpu_de-en.json, written by bench/multi30k.py): preset small, word tokenizer, a
# checkpoint every minute of a --max-minutes budget, the last 5 averaged.
DEFAULT_SAVE_EVERY_MINUTES = 1.0
DEFAULT_AVERAGE_LAST = 5
DEFAULTS_NOTE = (
    "Defaults: the best setting measured on Multi30k with 2 CPU cores (bench/results/multi30k_cpu_de-en.json, "
    "the result the README reports, from a 20-minute run): --preset small, --tokenizer word, and with "
    "--max-minutes a checkpoint every minute (--save-every-minutes 1) of which the last 5 are averaged into "
    "DIR/averaged.pt (--average-last 5, the paper's checkpoint averaging). So 'companion train --src de --tgt en "
    "--max-minutes 20 --out DIR' runs that setting; every flag given explicitly overrides its default."
)

# The largest length-penalty alpha accepted: the paper tuned alpha in [0.6, 1.0]; far above that the penalty
# ((5 + length) / 6) ** alpha only ever prefers the longest hypothesis.
MAX_ALPHA = 10.0

_LIMITS_GROUP = "limits (training stops at the first one reached; set at least one)"


# --------------------------------------------------------------------------------------------------------
# Declaring options
# --------------------------------------------------------------------------------------------------------
def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: Sequence[Any] | None = None,
    group: str | None = None,
    resumable: bool = False,
    switches: Mapping[str, tuple[Any, str]] | None = None,
    required: bool = False,
) -> Any:
    """A dataclass field that is also a command-line option.

    Args:
        default: the value when the option is not given (``dataclasses.MISSING`` with ``required=True``).
        help: the help text; ``{default}`` in it is replaced by the default.
        flag: the flag (default: ``--`` + the field name with ``-`` for ``_``). For a bool whose default is
            False the flag switches it on; for a bool whose default is True give e.g. ``flag="--no-bf16"``
            and the flag switches it off.
        metavar, choices: as in :meth:`argparse.ArgumentParser.add_argument`.
        group: the help section the flag is listed in.
        resumable: whether the value may change when a run is continued with ``--resume`` (limits, device,
            logging); every other option must match the recorded run.
        switches: instead of one flag, several flags that each set a fixed value:
            ``{"--norm-first": (True, help), "--post-ln": (False, help)}`` (``help`` is then unused).
        required: the option has no default and must be given.
    """
    metadata = {
        "option": dict(
            help=help,
            flag=flag,
            metavar=metavar,
            choices=tuple(choices) if choices else None,
            group=group,
            resumable=resumable,
            switches=dict(switches) if switches else None,
            required=required,
        )
    }
    if required:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


def option_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are command-line options, in declaration order."""
    return [f for f in dataclasses.fields(config_class) if "option" in f.metadata]


def flag_of(config_class: type, name: str) -> str:
    """The command-line flag of the field ``name`` (the first one, for a field set by several switches)."""
    spec = next(f for f in dataclasses.fields(config_class) if f.name == name).metadata["option"]
    if spec["switches"]:
        return next(iter(spec["switches"]))
    return spec["flag"] or "--" + name.replace("_", "-")


def add_options(parser: Any, config_class: type, *, suppress_defaults: bool = False) -> None:
    """Add one argparse flag per option field of ``config_class`` to ``parser``, grouped by ``group``.

    argparse only turns text into ``int``/``float``/``str``; the values are checked when the config is built.
    With ``suppress_defaults`` (the parser's ``argument_default=argparse.SUPPRESS``) flags that are not given
    are absent from the parsed namespace, so that a resumed run can tell given from default values.
    """
    groups: dict[str | None, Any] = {None: parser}
    for f in option_fields(config_class):
        spec = f.metadata["option"]
        target = groups.get(spec["group"])
        if target is None:
            target = groups[spec["group"]] = parser.add_argument_group(spec["group"])
        default = None if f.default is dataclasses.MISSING else f.default
        kwargs: dict[str, Any] = {"dest": f.name}
        if not suppress_defaults and not spec["required"]:
            kwargs["default"] = default
        if spec["switches"]:
            for flag, (value, text) in spec["switches"].items():
                target.add_argument(flag, action="store_const", const=value, help=text, **kwargs)
            continue
        help_text = spec["help"].replace("{default}", str(default))
        flag = spec["flag"] or "--" + f.name.replace("_", "-")
        if _base_type(f) is bool:
            action = "store_false" if default else "store_true"
            target.add_argument(flag, action=action, help=help_text, **kwargs)
            continue
        kwargs.update(help=help_text, metavar=spec["metavar"], required=spec["required"] or None)
        if spec["choices"]:
            kwargs["choices"] = list(spec["choices"])
        else:
            kwargs["type"] = _base_type(f)
        target.add_argument(flag, **{k: v for k, v in kwargs.items() if v is not None})


def _base_type(f: dataclasses.Field) -> type:
    """``int``, ``float``, ``bool`` or ``str`` from the field's annotation (``"int | None"`` -> int)."""
    names = {part.strip() for part in str(f.type).split("|")} - {"None"}
    for candidate in (bool, int, float, str):
        if candidate.__name__ in names:
            return candidate
    raise TypeError(f"option field {f.name} has an unsupported type {f.type!r}")


def _positive(config: Any, *names: str, allow_none: bool = False) -> None:
    for name in names:
        value = getattr(config, name)
        if value is None and allow_none:
            continue
        check_integer(flag_of(type(config), name), value, minimum=1)


def _positive_number(config: Any, *names: str, allow_none: bool = False) -> None:
    """Finite, positive and at most :data:`companion.train.OPTION_LIMITS` (where a limit is set)."""
    for name in names:
        value = getattr(config, name)
        if value is None and allow_none:
            continue
        setattr(
            config,
            name,
            check_number(flag_of(type(config), name), value, low=0, low_inclusive=False, high=OPTION_LIMITS.get(name)),
        )


def _fraction(config: Any, name: str) -> None:
    value = check_number(flag_of(type(config), name), getattr(config, name), low=0, high=1, high_inclusive=False)
    setattr(config, name, value)


# --------------------------------------------------------------------------------------------------------
# The training run's configuration
# --------------------------------------------------------------------------------------------------------
def _preset_help() -> str:
    parts = []
    for name, shape in MODEL_PRESETS.items():
        train = TRAINING_PRESETS[name]
        parts.append(
            f"{name}: d_model={shape['d_model']} layers={shape['num_encoder_layers']} d_ff={shape['d_ff']} "
            f"heads={shape['num_heads']} dropout={shape['dropout']} "
            f"{'pre-LN' if shape['norm_first'] else 'post-LN'} max_tokens={train['max_tokens']} "
            f"warmup={train['warmup']} lr_factor={train['lr_factor']}"
        )
    return "; ".join(parts)


@dataclass
class RunConfig:
    """Every option of a training run (``companion train``), declared once.

    Fields left at None that a preset sets (``d_model``, ``num_heads``, ``layers``, ``d_ff``, ``dropout``,
    ``norm_first``, ``max_tokens``, ``warmup``, ``lr_factor``) are filled from ``preset``
    (``companion.model.MODEL_PRESETS`` and ``TRAINING_PRESETS``) when the config is built, so an
    explicit value beats the preset, which beats the default. Building the config checks every value and
    raises :class:`~companion.errors.ConfigError` naming the flag. The help text of each field is its
    ``--help`` line.
    """

    # -- data ------------------------------------------------------------------------------------------
    task: str = option(
        "multi30k",
        "what to learn: Multi30k translation or a synthetic toy task (default: {default})",
        choices=["multi30k", "copy", "reverse", "sort"],
        group="data",
    )
    src: str = option("en", "source language (default: {default})", choices=["en", "de"], group="data")
    tgt: str = option("de", "target language (default: {default})", choices=["en", "de"], group="data")
    data_dir: str | None = option(
        None,
        "folder with Multi30k's train/val/test_2016_flickr .en/.de(.gz) files (default: $COMPANION_DATA_DIR, "
        "else the Hugging Face hub bentrevett/multi30k)",
        metavar="DIR",
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

    # -- model -----------------------------------------------------------------------------------------
    preset: str = option(
        "small",
        "model size and matching settings: " + _preset_help() + " (default: {default})",
        choices=list(MODEL_PRESETS),
        group="model",
    )
    d_model: int | None = option(None, "model width (default: from the preset)", metavar="N", group="model")
    num_heads: int | None = option(
        None, "attention heads (default: from the preset)", flag="--heads", metavar="N", group="model"
    )
    layers: int | None = option(
        None, "encoder layers = decoder layers (default: from the preset)", metavar="N", group="model"
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

    # -- optimisation ----------------------------------------------------------------------------------
    warmup: int | None = option(
        None,
        "warmup steps of the learning-rate schedule (paper: 4000; default: from the preset)",
        metavar="STEPS",
        group="optimisation",
    )
    lr_factor: float | None = option(
        None,
        "multiplies the paper's learning rate d_model^-0.5 min(step^-0.5, step warmup^-1.5) (default: from the preset)",
        metavar="F",
        group="optimisation",
    )
    label_smoothing: float = option(
        0.1, "label smoothing eps_ls (paper: 0.1; default: {default})", metavar="EPS", group="optimisation"
    )
    accum_steps: int = option(
        1, "batches per optimizer step (gradient accumulation; default: {default})", metavar="N", group="optimisation"
    )
    clip_grad: float | None = option(
        None,
        "clip the gradient norm to NORM (default: no clipping, as in the paper)",
        metavar="NORM",
        group="optimisation",
    )
    seed: int = option(0, "random seed (default: {default})", metavar="N", group="optimisation")

    # -- limits ----------------------------------------------------------------------------------------
    max_steps: int | None = option(None, "optimizer steps in total", metavar="N", group=_LIMITS_GROUP, resumable=True)
    max_minutes: float | None = option(
        None,
        "wall-clock minutes of training in total (summed over --resume sessions)",
        metavar="M",
        group=_LIMITS_GROUP,
        resumable=True,
    )
    max_epochs: int | None = option(
        None, "passes over the training data", metavar="N", group=_LIMITS_GROUP, resumable=True
    )

    # -- run -------------------------------------------------------------------------------------------
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
        "delete the run already in --out (its run.json, metrics.jsonl, checkpoints/ and "
        "averaged.pt only) and start afresh",
        group="run",
        resumable=True,
    )
    device: str = option(
        "auto",
        "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: {default})",
        metavar="DEV",
        group="run",
        resumable=True,
    )
    compile: bool = option(False, "compile the model with torch.compile", group="run", resumable=True)
    threads: int | None = option(
        None,
        "CPU threads for PyTorch (default: PyTorch's choice; torchrun sets 1 per process)",
        metavar="N",
        group="run",
        resumable=True,
    )
    bf16: bool = option(
        True,
        "disable bfloat16 autocast on CUDA (it is never used on CPU/MPS)",
        flag="--no-bf16",
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
    save_every: int | None = option(
        None, "write a checkpoint every STEPS", metavar="STEPS", group="run", resumable=True
    )
    save_every_minutes: float | None = option(
        None,
        f"write a checkpoint every M minutes; a final one is always written (default: "
        f"{DEFAULT_SAVE_EVERY_MINUTES:g} with --max-minutes unless --save-every is given, else none)",
        metavar="M",
        group="run",
        resumable=True,
    )
    keep_last: int | None = option(
        5, "keep only the newest N step checkpoints (default: {default})", metavar="N", group="run", resumable=True
    )
    eval_every: int | None = option(
        None, "validation loss every STEPS (default: only at the end)", metavar="STEPS", group="run", resumable=True
    )
    log_every: int = option(
        20, "metrics.jsonl line every STEPS (default: {default})", metavar="STEPS", group="run", resumable=True
    )
    progress: bool = option(True, "hide the progress bar", flag="--no-progress", group="run", resumable=True)

    def __post_init__(self) -> None:
        check_choice("--preset", self.preset, list(MODEL_PRESETS))
        self._fill_from_preset()
        self._fill_checkpoint_defaults()
        self._check()

    def _fill_checkpoint_defaults(self) -> None:
        """The measured setting (:data:`DEFAULTS_NOTE`): with a time budget a checkpoint every minute, and the
        last 5 averaged whenever periodic checkpoints are written (an explicit flag always wins)."""
        if self.save_every_minutes is None and self.save_every is None and isinstance(self.max_minutes, (int, float)):
            self.save_every_minutes = DEFAULT_SAVE_EVERY_MINUTES
        self._average_last_chosen = self.average_last is not None  # (not an option: not recorded)
        if self.average_last is None:
            periodic = self.save_every is not None or self.save_every_minutes is not None
            keep = self.keep_last if isinstance(self.keep_last, int) else DEFAULT_AVERAGE_LAST
            self.average_last = max(1, min(DEFAULT_AVERAGE_LAST, keep)) if periodic else 1

    def _fill_from_preset(self) -> None:
        shape, training = MODEL_PRESETS[self.preset], TRAINING_PRESETS[self.preset]
        for name, preset_name in _PRESET_MODEL_FIELDS.items():
            if getattr(self, name) is None:
                setattr(self, name, shape[preset_name])
        for name, value in training.items():
            if getattr(self, name) is None:
                setattr(self, name, value)

    def _check(self) -> None:
        cls = type(self)
        for f in option_fields(cls):
            spec = f.metadata["option"]
            if spec["choices"]:
                check_choice(flag_of(cls, f.name), getattr(self, f.name), spec["choices"])
            elif _base_type(f) is bool:
                check_bool(flag_of(cls, f.name), getattr(self, f.name))
        _positive(
            self,
            "min_freq",
            "max_tokens",
            "num_examples",
            "synthetic_max_len",
            "d_model",
            "num_heads",
            "layers",
            "d_ff",
            "warmup",
            "accum_steps",
            "average_last",
            "log_every",
        )
        _positive(
            self,
            "limit_train",
            "max_steps",
            "max_epochs",
            "threads",
            "save_every",
            "keep_last",
            "eval_every",
            allow_none=True,
        )
        check_integer("--vocab-size", self.vocab_size, minimum=5)  # more than the 4 special tokens
        check_integer("--synthetic-vocab", self.synthetic_vocab, minimum=5)
        check_integer("--max-len", self.max_len, minimum=2)  # one token plus <eos>
        check_integer("--seed", self.seed, minimum=0)
        _fraction(self, "dropout")
        _fraction(self, "label_smoothing")
        _positive_number(self, "lr_factor")
        _positive_number(self, "clip_grad", "max_minutes", "save_every_minutes", allow_none=True)
        for name in ("data_dir", "out", "device"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigError(f"{flag_of(cls, name)} must be a path or a string, got {value!r}")
        if isinstance(self.out, os.PathLike):
            self.out = str(self.out)
        if isinstance(self.data_dir, os.PathLike):
            self.data_dir = str(self.data_dir)
        if self.max_steps is None and self.max_minutes is None and self.max_epochs is None:
            raise ConfigError("set a limit: --max-steps, --max-minutes and/or --max-epochs")
        assert self.average_last is not None  # filled by _fill_checkpoint_defaults
        if self.keep_last is not None and self.average_last > self.keep_last:
            raise ConfigError(
                f"--average-last {self.average_last} averages more checkpoints than --keep-last "
                f"{self.keep_last} keeps; raise --keep-last to at least {self.average_last}"
            )
        if self.task == "multi30k" and self.src == self.tgt:
            raise ConfigError(f"--src and --tgt must differ, got {self.src!r} for both")
        self._check_model_shape()

    def _check_model_shape(self) -> None:
        """The model's own rules (heads divide d_model, ...), checked now rather than after data loading."""
        try:
            TransformerConfig(8, 8, **self._model_fields())
        except ValueError as error:
            raise ConfigError(f"the model options do not fit together: {error}") from None

    def _model_fields(self) -> dict[str, Any]:
        return dict(
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_encoder_layers=self.layers,
            num_decoder_layers=self.layers,
            d_ff=self.d_ff,
            dropout=self.dropout,
            max_len=self.max_len,
            norm_first=bool(self.norm_first),
        )

    # -- conversions -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every option by field name: the ``args`` of ``run.json`` and of each checkpoint's ``run_info``."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_record(cls, values: Mapping[str, Any]) -> RunConfig:
        """The config a run recorded (``run.json``'s or a checkpoint's ``args``).

        Keys of options that no longer exist are ignored; options added since take their defaults (and,
        for preset options, the recorded preset's value).
        """
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def resumed(cls, recorded: Mapping[str, Any], given: Mapping[str, Any]) -> RunConfig:
        """The config of a resumed run: the recorded values, with the ``given`` ones that may change.

        Raises :class:`~companion.errors.RunError` listing every given option that may not change on
        ``--resume`` (see ``resumable`` in :func:`option`) and differs from the recorded value.
        """
        _check_known(cls, given)
        fields_by_name = {f.name: f for f in option_fields(cls)}
        conflicts = [
            f"{_as_typed(cls, name, value)} (the run used {recorded.get(name)!r})"
            for name, value in given.items()
            if not fields_by_name[name].metadata["option"]["resumable"] and value != recorded.get(name)
        ]
        if conflicts:
            raise RunError(
                "--resume continues the recorded run; these flags differ from it: "
                + "; ".join(conflicts)
                + ". Start a new run (another --out, or --overwrite) to change them."
            )
        known = {f.name for f in dataclasses.fields(cls)}
        merged = {**{k: v for k, v in recorded.items() if k in known}, **given, "resume": True}
        return cls(**merged)

    def train_config(self) -> TrainConfig:
        """The :class:`~companion.train.TrainConfig` of this run: every field the two classes share by name."""
        shared = {f.name for f in dataclasses.fields(TrainConfig)} & {f.name for f in dataclasses.fields(self)}
        return TrainConfig(**{name: getattr(self, name) for name in shared})

    def model_config(self, src_vocab_size: int, tgt_vocab_size: int) -> TransformerConfig:
        """The :class:`~companion.model.TransformerConfig` of this run for the given vocabulary sizes.

        Embeddings are shared when one BPE vocabulary serves both languages; the output projection is tied.
        """
        shared = self.task == "multi30k" and self.tokenizer == "bpe" and src_vocab_size == tgt_vocab_size
        return TransformerConfig(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            share_embeddings=shared,
            tie_output=True,
            **self._model_fields(),
        )


def _as_typed(config_class: type, name: str, value: Any) -> str:
    """How a user gives ``value`` to the option ``name``: ``--heads 2``, or the switch alone (``--post-ln``)."""
    spec = next(f for f in dataclasses.fields(config_class) if f.name == name).metadata["option"]
    for flag, (switch_value, _) in (spec["switches"] or {}).items():
        if switch_value == value:
            return flag
    return f"{flag_of(config_class, name)} {value!r}"


def _check_known(config_class: type, given: Mapping[str, Any]) -> None:
    known = {f.name for f in option_fields(config_class)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"unknown {config_class.__name__} options: {unknown}")


# --------------------------------------------------------------------------------------------------------
# The training run
# --------------------------------------------------------------------------------------------------------
def _holds_run(out: Path) -> bool:
    return any((out / name).exists() for name in RUN_ARTIFACTS)


def _describe_run(out: Path) -> str:
    from .checkpoint import list_checkpoints

    found = list_checkpoints(out / "checkpoints")
    latest = f", latest {found[-1].name}" if found else ""
    return f"{len(found)} checkpoint(s){latest}"


def prepare_out_dir(out: str | os.PathLike, resume: bool, overwrite: bool, is_main: bool = True) -> Path | None:
    """Check the output folder of a training run; returns the checkpoint to resume from (or None).

    Refuses (:class:`~companion.errors.RunError`) to write into a folder that holds a run unless ``resume``
    (continue it: its latest checkpoint is returned) or ``overwrite`` (the run's own files,
    ``RUN_ARTIFACTS``, are deleted by the main process; other files stay).
    """
    from .checkpoint import latest_checkpoint

    out = Path(out)
    if resume and overwrite:
        raise RunError("--resume and --overwrite contradict each other; pass one of them")
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} exists and is not a folder")
    if _holds_run(out):
        if resume:
            latest = latest_checkpoint(out / "checkpoints")
            if latest is None:
                raise RunError(
                    f"--resume: {out} holds a run but no checkpoint to resume from; pass --overwrite to start afresh"
                )
            return latest
        if not overwrite:
            raise RunError(
                f"--out {out} already holds a run ({_describe_run(out)}); pass --resume to continue "
                "it, --overwrite to replace it, or choose another folder"
            )
        if is_main:
            for name in RUN_ARTIFACTS:
                target = out / name
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
    elif resume:
        raise RunError(f"--resume: {out} holds no run to resume")
    return None


LOCK_FILE = ".lock"


def _pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    except OSError:
        return False
    return True


def _lock_holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {holder['pid']} on {holder.get('host', '?')}, since {holder.get('since', '?')}"
    except (OSError, ValueError, KeyError, TypeError):
        return "an unknown process"


class RunFolderLock:
    """An exclusive lock on a run folder for the whole life of a run: ``DIR/.lock`` holds the holder's pid.

    Where the OS offers ``fcntl.flock`` (Linux, macOS) the lock is a kernel lock on that file, released
    when the process ends however it ends, so a lock file left by a killed run is recognised as stale and
    taken over. Elsewhere the file is created exclusively and a file whose pid no longer runs is stale.
    A second run into the same folder gets :class:`~companion.errors.RunLockedError` naming the holder.
    ``stale`` tells afterwards whether a stale lock file was found (and replaced).
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.path = Path(folder) / LOCK_FILE
        self.stale: str | None = None
        self._fd: int | None = None

    def __enter__(self) -> RunFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows
            self._acquire_by_pid()
            return
        for _ in range(100):  # retried only when the file was replaced between open and lock
            fd = self._open(os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise RunLockedError(self._busy_message()) from None
            try:
                same_file = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                self._fd = fd
                self._note_stale()
                self._write_holder()
                return
            os.close(fd)
        raise RunLockedError(f"could not lock {self.path}: it keeps being replaced by another process")

    def _acquire_by_pid(self) -> None:
        for _ in range(2):
            try:
                self._fd = self._open(os.O_RDWR | os.O_CREAT | os.O_EXCL)
                self._write_holder()
                return
            except FileExistsError:
                try:
                    pid = int(json.loads(self.path.read_text(encoding="utf-8"))["pid"])
                except (OSError, ValueError, KeyError, TypeError):
                    pid = -1
                if pid > 0 and _pid_alive(pid):
                    raise RunLockedError(self._busy_message()) from None
                self.stale = _lock_holder(self.path)
                self.path.unlink(missing_ok=True)
        raise RunLockedError(self._busy_message())

    def _open(self, flags: int) -> int:
        try:
            return os.open(self.path, flags, 0o644)
        except FileExistsError:
            raise
        except OSError as error:
            raise RunError(
                f"--out {self.path.parent}: cannot write into the folder ({error.strerror or error})"
            ) from None

    def _busy_message(self) -> str:
        return (
            f"--out {self.path.parent} is in use by another run ({_lock_holder(self.path)}): two runs in "
            "one folder would mix their checkpoints and logs. Wait for it to finish, or choose another "
            f"folder. (If no such process runs, delete {self.path}.)"
        )

    def _note_stale(self) -> None:
        if self.path.stat().st_size:  # a lock file that nobody holds: its run ended without removing it
            self.stale = _lock_holder(self.path)

    def _write_holder(self) -> None:
        import socket

        assert self._fd is not None
        record = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        ).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, record, 0) if hasattr(os, "pwrite") else os.write(self._fd, record)

    def release(self) -> None:
        """Remove the lock file and drop the lock (the file first, so that nobody locks a dying file)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None


class RunData(NamedTuple):
    """What :func:`build_run_data` returns: tokenizers (None for synthetic tasks), vocabulary sizes, batches."""

    tokenizers: dict[str, Any] | None
    vocab_sizes: tuple[int, int]
    train_batches: list[Any]
    valid_batches: list[Any]
    identity: dict[str, Any] | None = None  # what the data are (see data_identity); None for synthetic tasks


def data_identity(splits: Mapping[str, Sequence[tuple[str, str]]]) -> dict[str, Any]:
    """What exact resume depends on in the data: per split the number of sentence pairs and the SHA-256 of
    their text. Recorded in ``run.json`` and every checkpoint; ``--resume`` refuses data that differ."""
    import hashlib

    identity = {}
    for split, pairs in splits.items():
        sha = hashlib.sha256()
        for source, target in pairs:
            sha.update(
                source.encode("utf-8", "surrogatepass") + b"\t" + target.encode("utf-8", "surrogatepass") + b"\n"
            )
        identity[split] = {"pairs": len(pairs), "sha256": sha.hexdigest()}
    return identity


def _check_same_data(recorded: Mapping[str, Any] | None, current: Mapping[str, Any] | None, config: RunConfig) -> None:
    """RunError if a resumed run's data differ from the data its checkpoint recorded."""
    if not recorded or current is None:
        return  # a run recorded before data identities were kept, or a synthetic task (drawn from the seed)
    differing = [
        f"{split}: the run used {recorded[split]['pairs']} pairs (sha256 {recorded[split]['sha256'][:12]}), "
        f"now {current[split]['pairs']} pairs (sha256 {current[split]['sha256'][:12]})"
        for split in sorted(set(recorded) | set(current))
        if recorded.get(split) != current.get(split) and split in recorded and split in current
    ]
    if differing:
        source = config.data_dir or os.environ.get("COMPANION_DATA_DIR") or "the Hugging Face hub"
        raise RunError(
            f"--resume: the data in {source} are not the data this run was trained on ("
            + "; ".join(differing)
            + "). Resuming would not continue the same run; pass the "
            "--data-dir the run used, or start a new run."
        )


def build_tokenizers(
    config: RunConfig, train_pairs: Sequence[tuple[str, str]], rank: int = 0, world_size: int = 1
) -> tuple[Any, Any]:
    """``(src_tokenizer, tgt_tokenizer)`` trained on ``train_pairs`` as ``config`` says (one shared BPE, or
    one word vocabulary per language).

    Under ``torchrun`` rank 0 trains them and broadcasts them, so every rank holds identical vocabularies.
    """
    from .data import SubwordTokenizer, WordTokenizer, tokenizer_from_dict

    dicts: list[Any] = [None]
    if rank == 0:
        src_texts, tgt_texts = [s for s, _ in train_pairs], [t for _, t in train_pairs]
        if config.tokenizer == "bpe":
            shared = SubwordTokenizer.train(src_texts + tgt_texts, vocab_size=config.vocab_size)
            if shared.vocab_size > config.vocab_size:
                warnings.warn(
                    f"--vocab-size {config.vocab_size}: the BPE vocabulary has {shared.vocab_size} "
                    "entries, because it keeps every character of the training text (plus the 4 "
                    "special tokens); ask for more than that to get merges",
                    stacklevel=2,
                )
            dicts = [{"src": shared.to_dict(), "tgt": shared.to_dict()}]
        else:
            dicts = [
                {
                    "src": WordTokenizer.build(src_texts, config.src, min_freq=config.min_freq).to_dict(),
                    "tgt": WordTokenizer.build(tgt_texts, config.tgt, min_freq=config.min_freq).to_dict(),
                }
            ]
    if world_size > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(dicts, src=0)
    return tokenizer_from_dict(dicts[0]["src"]), tokenizer_from_dict(dicts[0]["tgt"])


def build_run_data(
    config: RunConfig, saved_tokenizers: Mapping[str, Any] | None = None, rank: int = 0, world_size: int = 1
) -> RunData:
    """Tokenizers and training/validation batches of a run (the tokenizers of a checkpoint when resuming).

    Synthetic tasks draw their pairs from ``config.seed``; Multi30k is read from ``config.data_dir`` (a
    missing folder or file is a :class:`~companion.errors.RunError`).
    """
    from .data import encode_pairs, load_multi30k, make_batches, synthetic_pairs, tokenizer_from_dict

    identity = None
    if config.task != "multi30k":
        vocab = config.synthetic_vocab
        train = synthetic_pairs(
            config.task, config.num_examples, max_len=config.synthetic_max_len, vocab_size=vocab, seed=config.seed
        )
        valid = synthetic_pairs(
            config.task,
            max(200, config.num_examples // 50),
            max_len=config.synthetic_max_len,
            vocab_size=vocab,
            seed=config.seed + 1,
        )
        tokenizers, vocab_sizes = None, (vocab, vocab)
    else:
        try:
            splits = load_multi30k(config.src, config.tgt, config.data_dir)
        except FileNotFoundError as error:
            raise RunError(str(error)) from None
        if config.limit_train:
            splits["train"] = splits["train"][: config.limit_train]
        identity = data_identity({name: splits[name] for name in ("train", "valid")})
        if saved_tokenizers is not None:
            src_tok, tgt_tok = (tokenizer_from_dict(saved_tokenizers[side]) for side in ("src", "tgt"))
        else:
            src_tok, tgt_tok = build_tokenizers(config, splits["train"], rank, world_size)
        train = encode_pairs(splits["train"], src_tok, tgt_tok, max_len=config.max_len)
        valid = encode_pairs(splits["valid"], src_tok, tgt_tok, max_len=config.max_len)
        tokenizers, vocab_sizes = {"src": src_tok, "tgt": tgt_tok}, (src_tok.vocab_size, tgt_tok.vocab_size)
    assert config.max_tokens is not None  # filled from the preset when the config was built
    train_batches = make_batches(train, config.max_tokens, seed=config.seed)
    valid_batches = make_batches(valid, config.max_tokens, shuffle=False)
    return RunData(tokenizers, vocab_sizes, train_batches, valid_batches, identity)


def _write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def train_run(
    options: Mapping[str, Any] | RunConfig, *, command: Sequence[str] | None = None, stream: TextIO | None = None
) -> dict[str, Any]:
    """Run ``companion train``: train a model into the folder ``out`` and return a summary.

    Args:
        options: the options chosen for this run, by :class:`RunConfig` field name (what the user typed:
            presets fill the rest), or a whole :class:`RunConfig`. With ``resume=True`` the recorded run's
            options are used, and the given ones may differ from them only where the option is resumable.
        command: the command-line words after ``companion``, recorded in ``run.json`` and the checkpoints
            (default: ``sys.argv[1:]``).
        stream: where the start and end lines go (default: stdout).

    Returns:
        The :meth:`~companion.train.Trainer.train` summary (steps, epochs, train_seconds, tokens_seen,
        valid, checkpoint) plus ``wall_seconds`` and, with ``average_last > 1``, ``averaged`` (the path of
        ``averaged.pt``) and ``averaged_from``.

    Raises:
        ConfigError: an option has an invalid value.
        RunError: the folder or the resume does not work out.
        DataUnavailableError: the data cannot be found (likewise the devices' and training's own errors,
            e.g. TrainingDivergedError).
    """
    import torch

    from . import __version__
    from .checkpoint import average_checkpoints, list_checkpoints, load_checkpoint, write_checkpoint
    from .devices import cleanup_distributed, setup_distributed
    from .model import Transformer
    from .train import Trainer

    given = options.to_dict() if isinstance(options, RunConfig) else dict(options)
    _check_known(RunConfig, given)
    stream = stream or sys.stdout
    if not given.get("out"):
        raise RunError("--out DIR is required (where checkpoints and logs go)")
    resume = bool(given.get("resume", False))
    config = None if resume else RunConfig(**given)  # checks every value before anything is touched
    out = Path(given["out"])
    if given.get("threads"):
        torch.set_num_threads(check_integer("--threads", given["threads"], minimum=1))
    rank, world_size, _ = setup_distributed(given.get("device", RunConfig.device))
    lock: RunFolderLock | None = None
    try:
        _make_out_dir(out, resume, bool(given.get("overwrite", False)))
        if rank == 0:  # one lock per run; the other processes of a torchrun job belong to the same run
            lock = RunFolderLock(out)
            lock.acquire()
            if lock.stale:
                warnings.warn(
                    f"{lock.path}: replaced a stale lock left by a run that ended without removing it ({lock.stale})",
                    stacklevel=2,
                )
        resume_from = prepare_out_dir(out, resume, bool(given.get("overwrite", False)), rank == 0)
        saved_tokenizers, recorded_data = None, None
        if resume_from is not None:
            checkpoint = load_checkpoint(resume_from)
            recorded = dict(checkpoint.get("run_info", {}).get("args") or {})
            if not recorded:
                raise RunError(f"{resume_from} does not record the flags of its run; cannot --resume it")
            config = RunConfig.resumed(recorded, given)
            _check_limits_ahead(config, checkpoint, resume_from)
            saved_tokenizers = checkpoint.get("tokenizers")
            recorded_data = checkpoint.get("run_info", {}).get("data")
        assert config is not None
        if world_size > 1:
            import torch.distributed as dist

            dist.barrier()  # rank 0 has cleaned the folder

        started = time.time()
        data = build_run_data(config, saved_tokenizers, rank, world_size)
        _check_same_data(recorded_data, data.identity, config)
        if config.accum_steps > len(data.train_batches):
            raise ConfigError(
                f"--accum-steps {config.accum_steps} is more than the {len(data.train_batches)} "
                "batches of an epoch: one optimizer step would see some batches twice. Lower "
                "--accum-steps or --max-tokens"
            )
        src_vocab, tgt_vocab = data.vocab_sizes
        torch.manual_seed(config.seed)
        model = Transformer(config.model_config(src_vocab, tgt_vocab))
        command = list(command) if command is not None else sys.argv[1:]
        args = config.to_dict()
        run_info = {
            "task": config.task,
            "src": config.src,
            "tgt": config.tgt,
            "args": args,
            "command": command,
            "world_size": world_size,
            "data": data.identity,
        }
        trainer = Trainer(
            model,
            config.train_config(),
            data.train_batches,
            data.valid_batches,
            out_dir=out,
            tokenizers=data.tokenizers,
            run_info=run_info,
        )
        if resume_from is not None:
            trainer.load_checkpoint(resume_from)
        if rank == 0:
            _write_json_atomic(
                out / "run.json",
                {
                    "companion_version": __version__,
                    "torch_version": str(torch.__version__),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "command": ["companion", "train", *command],
                    "args": args,
                    "world_size": world_size,
                    "device": str(trainer.device),
                    "model_parameters": model.num_parameters(),
                    "train_batches": len(data.train_batches),
                    "resumed_from": str(resume_from) if resume_from else None,
                    "data": data.identity,
                },
            )
            print(
                f"companion train: {config.task} {config.src}->{config.tgt if config.task == 'multi30k' else ''}"
                f" preset={config.preset} params={model.num_parameters():,} vocab={src_vocab}/{tgt_vocab} "
                f"batches/epoch={len(data.train_batches)} device={trainer.device} world_size={world_size}"
                + (f" resumed at step {trainer.state.step}" if resume_from else ""),
                file=stream,
                flush=True,
            )
        summary = trainer.train()
        average_last = config.average_last or 1
        if rank == 0 and average_last > 1:
            paths = list_checkpoints(out / "checkpoints")[-average_last:]
            if len(paths) < average_last and getattr(config, "_average_last_chosen", True):
                warnings.warn(
                    f"--average-last {average_last}: the run wrote only {len(paths)} "
                    "checkpoint(s), so averaged.pt averages those; write more with --save-every or "
                    "--save-every-minutes",
                    stacklevel=2,
                )
            averaged = average_checkpoints(paths)
            summary["averaged"] = str(write_checkpoint(averaged, out / "averaged.pt"))
            summary["averaged_from"] = [p.name for p in paths]
        summary["wall_seconds"] = time.time() - started
        if rank == 0:
            _print_summary(summary, stream)
        return summary
    finally:
        if lock is not None:
            lock.release()
        cleanup_distributed()


def _make_out_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """Create the output folder (a fresh run) or check that it is there (``--resume``), with clear errors."""
    if resume and overwrite:
        raise RunError("--resume and --overwrite contradict each other; pass one of them")
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} exists and is not a folder")
    if resume:
        if not out.is_dir():
            raise RunError(f"--resume: {out} holds no run to resume")
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"--out {out}: cannot create the folder ({error.strerror or error})") from None


def _check_limits_ahead(config: RunConfig, checkpoint: Mapping[str, Any], path: Path) -> None:
    """RunError if the resumed run has already reached its step or epoch limit (nothing left to train: it
    would only rewrite its last checkpoint)."""
    step = int(checkpoint.get("step", 0))
    epoch = ((checkpoint.get("trainer_state") or {}).get("state") or {}).get("epoch", 0)
    if config.max_steps is not None and config.max_steps <= step:
        raise RunError(
            f"--resume: {path.name} is at step {step}, and --max-steps {config.max_steps} is not beyond "
            "it; give a larger --max-steps to train further"
        )
    if config.max_epochs is not None and config.max_epochs <= epoch:
        raise RunError(
            f"--resume: {path.name} has finished {epoch} epoch(s), and --max-epochs {config.max_epochs} "
            "is not beyond it; give a larger --max-epochs to train further"
        )


def _print_summary(summary: Mapping[str, Any], stream: TextIO) -> None:
    valid = summary.get("valid") or {}
    ppl = f" valid_ppl={valid['valid_ppl']:.2f}" if valid else ""
    print(
        f"companion train: stopped ({summary['stop_reason']}) at step {summary['steps']} after "
        f"{summary['train_seconds'] / 60:.1f} min of training, epoch {summary['epochs']:.2f}{ppl}; "
        f"checkpoint {summary['checkpoint']}"
        + (f"; averaged {len(summary['averaged_from'])} -> {summary['averaged']}" if "averaged" in summary else ""),
        file=stream,
        flush=True,
    )


# --------------------------------------------------------------------------------------------------------
# Translation and evaluation runs
# --------------------------------------------------------------------------------------------------------
@dataclass
class _InferenceOptions:
    checkpoint: str = option(
        dataclasses.MISSING,
        "a checkpoint file, or a run folder (its averaged.pt if present, else its latest checkpoint)",
        metavar="PATH",
        required=True,
    )
    beam_size: int = option(4, "beam width; 1 = greedy decoding (default: {default}, as in the paper)", metavar="K")
    alpha: float = option(0.6, "length penalty alpha of beam search (default: {default}, as in the paper)", metavar="A")
    batch_size: int = option(64, "sentences decoded together (default: {default})", metavar="N")
    device: str = option(
        "auto", "auto (CUDA > MPS > CPU), cpu, cuda, cuda:N or mps (default: {default})", metavar="DEV"
    )

    def __post_init__(self) -> None:
        if not isinstance(self.checkpoint, (str, os.PathLike)):
            raise ConfigError(f"--checkpoint must be a path, got {self.checkpoint!r}")
        _positive(self, "beam_size", "batch_size")
        self.alpha = check_number("--alpha", self.alpha, low=0, high=MAX_ALPHA)
        if not isinstance(self.device, str):
            raise ConfigError(f"--device must be a string, got {self.device!r}")


@dataclass
class TranslateConfig(_InferenceOptions):
    """Options of ``companion translate``: the checkpoint, the beam search, the device and the input file."""

    input: str | None = option(None, "UTF-8 text file, one sentence per line (default: stdin)", metavar="FILE")


@dataclass
class EvaluateConfig(_InferenceOptions):
    """Options of ``companion evaluate``: the checkpoint, the beam search, the device and the Multi30k split."""

    split: str = option(
        "test", "which split; test = test_2016_flickr (default: {default})", choices=["test", "valid", "train"]
    )
    data_dir: str | None = option(
        None,
        "Multi30k folder (default: $COMPANION_DATA_DIR, else the folder recorded by "
        "the run if it still exists, else the Hugging Face hub)",
        metavar="DIR",
    )
    limit: int | None = option(None, "score only the first N sentences", metavar="N")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("--split", self.split, ["test", "valid", "train"])
        _positive(self, "limit", allow_none=True)


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint file, or for a run folder its ``averaged.pt`` (if present) else its latest checkpoint."""
    from .checkpoint import latest_checkpoint

    path = Path(path)
    if path.is_dir():
        if (path / "averaged.pt").is_file():
            return path / "averaged.pt"
        latest = latest_checkpoint(path / "checkpoints") or latest_checkpoint(path)
        if latest is None:
            raise RunError(f"--checkpoint {path} is a folder without averaged.pt or checkpoints/step_*.pt")
        return latest
    if not path.exists():
        raise RunError(f"--checkpoint {path} does not exist")
    return path


class InferenceModel(NamedTuple):
    """What :func:`load_for_inference` returns (a tuple, so it also unpacks in this order)."""

    model: Any
    src_tokenizer: Any
    tgt_tokenizer: Any
    checkpoint: dict[str, Any]
    device: Any


def load_for_inference(path: str | os.PathLike, device: str = "auto") -> InferenceModel:
    """The model (in eval mode, on ``device``), its tokenizers and the loaded checkpoint, for translating.

    ``path`` is a checkpoint file or a run folder (see :func:`resolve_checkpoint`). A synthetic-task
    checkpoint, which has no tokenizers, raises :class:`~companion.errors.CheckpointError`.
    """
    from .checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint
    from .devices import resolve_device

    target = resolve_device(device)
    checkpoint = load_checkpoint(resolve_checkpoint(path))
    src_tok, tgt_tok = tokenizers_from_checkpoint(checkpoint)
    model = model_from_checkpoint(checkpoint, device=target)
    return InferenceModel(model, src_tok, tgt_tok, checkpoint, target)


def translate_run(config: TranslateConfig, lines: Sequence[str], *, loaded: InferenceModel | None = None) -> list[str]:
    """Translate ``lines`` (one sentence each) with ``config.checkpoint``: one output line per input line.

    Blank lines give empty outputs in their place; newlines inside a translation become spaces. ``loaded``
    (from :func:`load_for_inference`) saves loading the checkpoint again. (The command line loads the model
    first, then reads ``config.input`` or stdin, and writes the result to stdout.)
    """
    from .decode import translate

    if loaded is None:
        loaded = load_for_inference(config.checkpoint, config.device)
    model, src_tok, tgt_tok, _, device = loaded
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
            [lines[i].strip() for i in wanted],
            src_tok,
            tgt_tok,
            beam_size=config.beam_size,
            alpha=config.alpha,
            batch_size=config.batch_size,
            device=device,
        )
        for i, text in zip(wanted, translations):
            outputs[i] = text
    return [text.replace("\n", " ") for text in outputs]


def evaluate_run(config: EvaluateConfig) -> dict[str, Any]:
    """Translate a Multi30k split with ``config.checkpoint`` and score it with sacreBLEU.

    The languages come from the checkpoint's run; the data from ``config.data_dir``, else
    ``$COMPANION_DATA_DIR``, else the folder the run recorded (if it still exists), else the hub. Returns
    ``bleu``, ``bleu_signature``, ``chrf``, ``chrf_signature``, ``hypotheses``, ``direction``, ``split``,
    ``sentences``, ``beam_size``, ``alpha``, ``checkpoint``, ``step`` and ``decode_seconds``.
    """
    from .data import DATA_DIR_ENV, load_multi30k
    from .evaluate import evaluate_translation

    model, src_tok, tgt_tok, checkpoint, target = load_for_inference(config.checkpoint, config.device)
    run_info = checkpoint.get("run_info") or {}
    if run_info.get("task", "multi30k") != "multi30k":
        raise RunError(
            f"the checkpoint was trained on the synthetic task {run_info['task']!r}; evaluate scores "
            "Multi30k translations"
        )
    src, tgt = run_info.get("src", "en"), run_info.get("tgt", "de")
    data_dir = config.data_dir
    if data_dir is None and not os.environ.get(DATA_DIR_ENV):
        recorded = (run_info.get("args") or {}).get("data_dir")
        data_dir = recorded if recorded and Path(recorded).is_dir() else None
    try:
        pairs = load_multi30k(src, tgt, data_dir)[config.split]
    except FileNotFoundError as error:
        raise RunError(str(error)) from None
    if config.limit is not None:
        pairs = pairs[: config.limit]
    started = time.time()
    result = evaluate_translation(
        model,
        pairs,
        src_tok,
        tgt_tok,
        beam_size=config.beam_size,
        alpha=config.alpha,
        batch_size=config.batch_size,
        device=target,
    )
    return {
        "bleu": result["bleu"],
        "bleu_signature": result["bleu_signature"],
        "chrf": result["chrf"],
        "chrf_signature": result["chrf_signature"],
        "hypotheses": result["hypotheses"],
        "direction": f"{src}->{tgt}",
        "split": "test_2016_flickr" if config.split == "test" else config.split,
        "sentences": len(pairs),
        "beam_size": config.beam_size,
        "alpha": config.alpha,
        "checkpoint": str(resolve_checkpoint(config.checkpoint)),
        "step": checkpoint.get("step"),
        "decode_seconds": time.time() - started,
    }
