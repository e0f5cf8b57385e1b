"""The training run's configuration: :class:`RunConfig`, every option of ``companion train`` declared once."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._validation import check_bool, check_choice, check_integer
from ..errors import ConfigError, RunError
from ..model import MODEL_PRESETS, TransformerConfig
from ..train import TrainConfig
from .options import _base_type, _fraction, _positive, _positive_number, flag_of, option, option_fields

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


_LIMITS_GROUP = "limits (training stops at the first one reached; set at least one)"


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
