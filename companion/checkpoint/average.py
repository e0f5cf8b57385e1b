"""Checkpoint averaging (the paper averaged the last 5 or 20 checkpoints of a run)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from .load import check_compatible, load_checkpoint


def average_checkpoints(paths: Sequence[str | os.PathLike]) -> dict[str, Any]:
    """Average the weights of several checkpoints of one run (the paper averaged the last 5 or 20).

    All checkpoints must share the model configuration and vocabularies. Floating-point tensors are averaged
    (accumulated in float64); integer buffers are taken from the last checkpoint. Returns a checkpoint dict
    (metadata of the last one, no trainer state, ``averaged_from`` listing the files) that
    ``write_checkpoint`` can save and :func:`model_from_checkpoint` can load.
    """
    if isinstance(paths, (str, os.PathLike)) or not isinstance(paths, Sequence) or not paths:
        raise ValueError(f"paths must be a non-empty list of checkpoint files, got {paths!r}")
    sums: dict[str, torch.Tensor] = {}
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:
            first = checkpoint
        else:
            try:
                check_compatible(checkpoint, model_config=first["model_config"], tokenizers=first.get("tokenizers"))
            except CheckpointError as error:
                raise CheckpointError(f"cannot average {path} with {paths[0]}: {error}") from None
            if first.get("tokenizers") is None and checkpoint.get("tokenizers") is not None:
                raise CheckpointError(f"cannot average {path} with {paths[0]}: only one has vocabularies")
        for name, tensor in checkpoint["model_state"].items():
            if tensor.is_floating_point():
                sums[name] = sums[name] + tensor.double() if name in sums else tensor.double()
        last = checkpoint
    assert last is not None
    count = len(paths)
    averaged = {
        name: (sums[name] / count).to(tensor.dtype) if name in sums else tensor
        for name, tensor in last["model_state"].items()
    }
    result = {k: v for k, v in last.items() if k not in ("trainer_state", "content_sha256")}
    result.update(model_state=averaged, trainer_state=None, averaged_from=[Path(p).name for p in paths])
    return result
