"""Runs: train a model into a folder, translate with it, score it. Used by the CLI, ``bench/`` and the training chapter.

A training run is described by one :class:`RunConfig`, composed of a :class:`DataConfig`, a
:class:`ModelOptions` and the :class:`~companion.train.TrainConfig` of the Trainer, plus the run's own settings
(preset, folder, resume/overwrite, threads, checkpoint averaging). Every option is a field of exactly one of
them, declared once with :func:`~companion.options.option` (type, default, help, flag, resumability) and checked
once, by the class that declares it. From these declarations ``companion train``'s flags are built
(:func:`add_options` over ``SECTIONS``), the flat run record ``run.json`` (and the ``run_info`` of every
checkpoint) is written and read back (:meth:`RunConfig.to_record`, :meth:`RunConfig.from_record`), and
``--resume`` merges the recorded and the newly given values (:meth:`RunConfig.resumed`). One table,
``companion.presets.PRESETS``, gives each preset's model and training settings.

The package's modules, each one job:

* ``companion.runs.config`` -- :class:`RunConfig` and its sections;
* ``companion.runs.options`` -- the argparse flags built from option declarations;
* ``companion.runs.folder`` -- the output folder's checks (:func:`prepare_out_dir`);
* ``companion.runs.lock`` -- :class:`RunFolderLock`, one run per folder;
* ``companion.runs.identity`` -- the run's data: their identity (hashes), tokenizers, batches;
* ``companion.runs.train`` -- :func:`train_run` (``companion train``): a fresh run or ``--resume``, one
  process or several under ``torchrun``; writes ``run.json``, ``metrics.jsonl``, ``checkpoints/`` and
  optionally ``averaged.pt``;
* ``companion.runs.infer`` -- :func:`translate_run` (``companion translate``), :func:`evaluate_run`
  (``companion evaluate``: BLEU and chrF on a Multi30k split), and :func:`load_for_inference` /
  :func:`resolve_checkpoint` (a model and its tokenizers from a checkpoint or a run folder);
* ``companion.runs.choose`` -- :func:`choose_alpha_run` (``companion choose-alpha``): beam search's length
  penalty chosen on the validation split and recorded in the checkpoint, which translate and evaluate then use.

Errors a user can cause are :class:`~companion.errors.ConfigError` (a bad option value, naming the option) and
:class:`~companion.errors.RunError` (a folder, resume or checkpoint that does not work out).
"""

from __future__ import annotations

from ..options import option, option_fields
from .choose import ChooseAlphaConfig, choose_alpha_run
from .config import DEFAULTS_NOTE, SECTIONS, DataConfig, ModelOptions, RunConfig
from .folder import RUN_ARTIFACTS, RunFolder, prepare_out_dir
from .identity import RunData, build_run_data, build_tokenizers, check_same_data, data_identity
from .infer import (
    MAX_ALPHA,
    EvaluateConfig,
    InferenceModel,
    TranslateConfig,
    describe_weights,
    evaluate_run,
    load_for_inference,
    resolve_checkpoint,
    translate_run,
)
from .lock import RunFolderLock
from .options import add_options, given_options
from .train import train_run

__all__ = [
    "DEFAULTS_NOTE",
    "MAX_ALPHA",
    "RUN_ARTIFACTS",
    "SECTIONS",
    "option",
    "option_fields",
    "add_options",
    "given_options",
    "RunConfig",
    "DataConfig",
    "ModelOptions",
    "TranslateConfig",
    "EvaluateConfig",
    "prepare_out_dir",
    "RunFolder",
    "RunFolderLock",
    "data_identity",
    "check_same_data",
    "build_tokenizers",
    "build_run_data",
    "RunData",
    "train_run",
    "resolve_checkpoint",
    "load_for_inference",
    "describe_weights",
    "InferenceModel",
    "translate_run",
    "evaluate_run",
    "ChooseAlphaConfig",
    "choose_alpha_run",
]
