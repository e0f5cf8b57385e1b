"""The configuration of a training run: :class:`RunConfig`, composed of a data, a model and a training config.

A run config holds three sections and the few settings of the run itself:

* ``data`` -- :class:`DataConfig`: the task, the languages, the tokenizer, the batching;
* ``model`` -- :class:`ModelOptions`: the model settings that do not depend on the data (the vocabulary sizes
  are known once the tokenizers are built, :meth:`RunConfig.model_config`);
* ``train`` -- :class:`~companion.train.TrainConfig` itself: the Trainer's settings, declared and checked there;
* ``preset``, ``out``, ``resume``, ``overwrite``, ``threads``, ``average_last``, ``choose_alpha``: the run's own.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validation import check_integer
from ..errors import ConfigError, RunError
from ..model import TransformerConfig
from ..options import check_declared, flag_of, label, option, option_fields, option_spec
from ..presets import DEFAULT_AVERAGE_LAST, PRESETS, default_save_every_minutes
from ..train import TrainConfig
from .sections import TRANSLATION, DataConfig, ModelOptions, _check_positive, _filled, _path_as_str

__all__ = ["DataConfig", "ModelOptions", "RunConfig", "SECTIONS", "DEFAULTS_NOTE"]

DEFAULTS_NOTE = (
    "Defaults: the best setting measured on Multi30k with 2 CPU cores in 20-minute runs (bench/multi30k.py, "
    "chosen on the validation split with bench/multi30k_select.py): --preset small (with its 1,200-token "
    "batches), --tokenizer bpe with --vocab-size 8000 (one vocabulary shared by both languages), and with "
    "--max-minutes M a checkpoint every M/30 minutes (--save-every-minutes 0.4 for 12 minutes, 1 for 30) of "
    "which the last 5 are averaged into DIR/averaged.pt (--average-last 5, the paper's checkpoint averaging), and at "
    "the end beam search's length penalty is chosen on the validation split and recorded there (--no-choose-alpha "
    "skips it). So "
    "'companion train --src de --tgt en --max-minutes 20 --out DIR' runs that setting; every flag given "
    "explicitly overrides its default."
)


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
    choose_alpha: bool = option(
        True,
        "do not choose beam search's length penalty at the end (by default a translation run with a validation "
        "split ends as 'companion choose-alpha' does: one beam-4 search of that split, and the alpha with the "
        "highest BLEU is recorded in the checkpoint that translate and evaluate use)",
        flag="--no-choose-alpha",
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
        if self.data.task != TRANSLATION and longest >= self.model.max_len:
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
        vocab = data.synthetic_vocab if data.task != TRANSLATION else data.vocab_size if data.tokenizer == "bpe" else 0
        per_layer = 4 * d * d + 2 * d * d_ff
        parameters = 2 * vocab * d + int(m.num_encoder_layers or 0) * per_layer
        parameters += int(m.num_decoder_layers or 0) * (per_layer + 4 * d * d)
        examples = data.num_examples * data.synthetic_max_len if data.task != TRANSLATION else 0
        return 16 * parameters + 4 * m.max_len * d + _BYTES_PER_SYNTHETIC_TOKEN * examples

    def _check_memory(self) -> None:
        available = _physical_memory()
        needed = self.training_memory()
        if available is not None and needed > available:
            raise ConfigError(
                f"this run needs about {needed / 2**30:,.1f} GiB of memory before any activation (weights, "
                f"gradients, Adam's moments, the positional table of --max-len {self.model.max_len}"
                + (", the synthetic examples" if self.data.task != TRANSLATION else "")
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
        ``save_every_minutes``, a checkpoint is written every ``max_minutes / 30``
        (:func:`companion.presets.default_save_every_minutes`).
        Raises :class:`~companion.errors.ConfigError` for an unknown name or a bad value (naming the option).
        """
        given = dict(options)
        _check_known(given)
        preset_name = given.get("preset", cls.preset)
        _check_preset(preset_name)
        train = {**PRESETS[preset_name].train, **_pick(given, TrainConfig)}
        if train.get("save_every") is None and train.get("save_every_minutes") is None:
            if isinstance(train.get("max_minutes"), (int, float)):
                train["save_every_minutes"] = default_save_every_minutes(train["max_minutes"])
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
            if name in _OPTIONS
            and not option_spec(_OPTIONS[name][1]).resumable
            and _as_recorded(name, value) != recorded.get(name)
        ]
        if conflicts:
            raise RunError(
                "--resume continues the recorded run; these flags differ from it: "
                + "; ".join(conflicts)
                + ". Start a new run (another --out, or --overwrite) to change them."
            )
        return cls.from_options({**_known(recorded), **given, "resume": True})


def _as_recorded(name: str, value: Any) -> Any:
    """A given option's value as the run record holds it: a --hf-dataset folder as its absolute path (the record
    keeps folders absolute; DataConfig makes them so), so that repeating a command with --resume matches."""
    if name == "hf_dataset" and isinstance(value, (str, os.PathLike)) and os.path.isdir(value):
        return os.path.abspath(value)
    return value


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
# Options whose default changed, with the value a record that does not name them was run with: such a record was
# written before the option was recorded, under the old default (word vocabularies until 0.3).
_OLD_DEFAULTS = {"tokenizer": "word"}


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
    """A record in today's field names (older records name some fields differently), with the old default of an
    option whose default changed where the record does not name it (:data:`_OLD_DEFAULTS`)."""
    return {**_OLD_DEFAULTS, **{_RENAMED_RECORD_KEYS.get(k, k): v for k, v in values.items()}}


def _as_typed(name: str, value: Any) -> str:
    """How a user gives ``value`` to the option ``name``: ``--heads 2``, or the switch alone (``--post-ln``)."""
    section, f = _OPTIONS[name]
    for flag, (switch_value, _) in (option_spec(f).switches or {}).items():
        if switch_value == value:
            return flag
    return f"{flag_of(section, name)} {value!r}"
