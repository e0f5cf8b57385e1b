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

The package's modules: :mod:`~companion.runs.options` (declaring options, the argparse flags),
:mod:`~companion.runs.config` (:class:`RunConfig`), :mod:`~companion.runs.folder` (the output folder's checks),
:mod:`~companion.runs.lock` (:class:`RunFolderLock`), :mod:`~companion.runs.identity` (the data: identity,
tokenizers, batches), :mod:`~companion.runs.train` (:func:`train_run`) and :mod:`~companion.runs.infer`
(translation and evaluation).

The runs:

* :func:`train_run` -- ``companion train``: a fresh run or ``--resume``, one process or several under
  ``torchrun``; writes ``run.json``, ``metrics.jsonl``, ``checkpoints/`` and optionally ``averaged.pt``.
* :func:`translate_run` -- ``companion translate``: lines of text in, translations out.
* :func:`evaluate_run` -- ``companion evaluate``: BLEU and chrF on a Multi30k split.
* :func:`load_for_inference` / :func:`resolve_checkpoint` -- a model and its tokenizers from a checkpoint or a
  run folder.
"""

from __future__ import annotations

from .config import DEFAULTS_NOTE, TRAINING_PRESETS, RunConfig
from .folder import RUN_ARTIFACTS, prepare_out_dir
from .identity import RunData, build_run_data, build_tokenizers, data_identity
from .infer import (
    MAX_ALPHA,
    EvaluateConfig,
    InferenceModel,
    TranslateConfig,
    evaluate_run,
    load_for_inference,
    resolve_checkpoint,
    translate_run,
)
from .lock import RunFolderLock
from .options import add_options, option, option_fields
from .train import train_run

__all__ = [
    "TRAINING_PRESETS",
    "DEFAULTS_NOTE",
    "MAX_ALPHA",
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
