"""Writing checkpoints: building the dict, refusing what could not be loaded, sealing it with its digest."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._version import __version__
from ..errors import CheckpointError
from .files import atomic_save
from .validate import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_FORMAT_VERSION,
    _check_entries,
    _describe_nonfinite,
    _digest,
    _plain_tree_problem,
    nonfinite_tensors,
)


def _tokenizer_dicts(tokenizers: Mapping[str, Any] | None) -> dict[str, dict] | None:
    if tokenizers is None:
        return None
    if not isinstance(tokenizers, Mapping) or set(tokenizers) != {"src", "tgt"}:
        raise ValueError(f"tokenizers must be a dict with keys 'src' and 'tgt', got {tokenizers!r:.80}")
    return {k: (dict(v) if isinstance(v, Mapping) else v.to_dict()) for k, v in tokenizers.items()}


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: nn.Module,
    step: int,
    tokenizers: Mapping[str, Any] | None = None,
    train_config: Mapping[str, Any] | None = None,
    trainer_state: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    run_info: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint of ``model`` (a companion Transformer) atomically; returns the path.

    ``tokenizers`` is ``{"src": ..., "tgt": ...}`` (tokenizers or their ``to_dict()``); ``trainer_state`` comes
    from :meth:`companion.train.Trainer.state_dict`.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(f"model must be a companion Transformer (with .config), got {type(model).__name__}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    checkpoint = _new_checkpoint(
        model_config=config.to_dict(),
        model_state=model.state_dict(),
        step=step,
        tokenizers=_tokenizer_dicts(tokenizers),
        train_config=dict(train_config) if train_config else None,
        trainer_state=dict(trainer_state) if trainer_state else None,
        metrics=dict(metrics or {}),
        run_info=dict(run_info or {}),
    )
    return write_checkpoint(checkpoint, path)


def _new_checkpoint(**fields: Any) -> dict[str, Any]:
    return {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "companion_version": __version__,
        "torch_version": str(torch.__version__),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


def write_checkpoint(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Seal ``checkpoint`` (a dict as built by :func:`save_checkpoint` or :func:`average_checkpoints`) with its
    digest and write it atomically.

    A checkpoint whose weights or trainer state hold inf or nan is never written
    (:class:`~companion.errors.CheckpointError`), nor one that :func:`load_checkpoint` would refuse (entries of
    the wrong type, weights that do not fit the config, vocabularies of another size): every checkpoint on disk
    is one that training can continue from and decoding can use. Objects that are not tensors or plain values
    raise a TypeError.
    """
    checkpoint = dict(checkpoint)
    problem = _plain_tree_problem(checkpoint)
    if problem is not None:
        raise TypeError(problem)
    bad = nonfinite_tensors(checkpoint)
    if bad:
        raise CheckpointError(f"refusing to write {path}: {_describe_nonfinite(bad)}; the run diverged")
    try:
        _check_entries(checkpoint)
    except CheckpointError as error:
        raise CheckpointError(f"refusing to write {path}: {error}") from None
    checkpoint["content_sha256"] = _digest(checkpoint)
    return atomic_save(checkpoint, path)
