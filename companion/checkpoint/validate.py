"""Checking a checkpoint dict before anything is built from it: format, entries, plain trees of bounded size,
the digest, finiteness, the trainer state, and (:mod:`.model_fit`) the model entries."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..decode.limits import MAX_ALPHA, MAX_BEAM_SIZE
from ..errors import CheckpointError
from ..model import TransformerConfig
from .model_fit import _check_tokenizers, _check_weights_fit, _describe, check_model_config

CHECKPOINT_FORMAT = "companion-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1


def _digest(checkpoint: Mapping[str, Any]) -> str:
    """sha256 over the metadata (as canonical JSON) and every tensor's dtype, shape and bytes."""
    sha = hashlib.sha256()

    def visit(value: Any, key: str) -> Any:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            sha.update(f"{key}:{t.dtype}:{tuple(t.shape)}".encode())
            if t.numel():
                sha.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            return f"<tensor {key}>"
        if isinstance(value, Mapping):
            return {str(k): visit(v, f"{key}/{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [visit(v, f"{key}/{i}") for i, v in enumerate(value)]
        return value

    skeleton = {k: visit(v, k) for k, v in checkpoint.items() if k != "content_sha256"}
    sha.update(json.dumps(skeleton, sort_keys=True, default=repr).encode())
    return sha.hexdigest()


_PLAIN = (str, int, float, bool, type(None))
MAX_NESTING = 32  # levels of dicts and lists (what companion writes nests 6 deep)
MAX_VALUES = 5_000_000  # values in all (a word vocabulary of 1M entries per side is 2M)


def _plain_tree_problem(checkpoint: Mapping[str, Any]) -> str | None:
    """Why the entries of ``checkpoint`` are not trees of dense tensors and plain values (str/int keys, at most
    ``MAX_NESTING`` levels and ``MAX_VALUES`` values in all), or None if they are. ``weights_only=True`` loading
    accepts such trees, and every later step (digest, checks) walks them without deep recursion or unbounded
    work (a sub-list shared many times, which a crafted pickle can nest into an exponential tree, counts at
    each visit)."""
    for key in checkpoint:
        if not isinstance(key, str):
            return f"the checkpoint has an entry named by a {type(key).__name__} ({key!r:.40}); names are strings"
    pending: list[tuple[Any, str, int]] = [(value, key, 1) for key, value in checkpoint.items()]
    visited = 0
    while pending:
        item, place, depth = pending.pop()
        visited += 1
        if visited > MAX_VALUES:
            return f"the checkpoint holds more than {MAX_VALUES:,} values (dict and list entries)"
        if isinstance(item, torch.Tensor):
            if item.is_meta:
                return f"{place} is a tensor on the meta device (shape only, no data)"
            if item.layout != torch.strided:
                return f"{place} is a {item.layout} tensor; checkpoints hold dense tensors only"
        elif isinstance(item, Mapping) or type(item) in (list, tuple):
            if depth >= MAX_NESTING:
                return f"{place.split('[', 1)[0]} nests dicts and lists deeper than {MAX_NESTING} levels"
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if type(key) not in (str, int):
                        return f"{place} has a key of type {type(key).__name__}; only str/int keys can be saved"
                    pending.append((child, f"{place}[{key!r}]", depth + 1))
            else:
                pending.extend((child, f"{place}[{i}]", depth + 1) for i, child in enumerate(item))
        elif type(item) not in _PLAIN:
            return (
                f"{place} is a {type(item).__name__}; checkpoints hold only tensors and plain values "
                "(str, int, float, bool, None, lists, dicts) so that loading never unpickles objects"
            )
    return None


def nonfinite_tensors(checkpoint: Mapping[str, Any]) -> list[str]:
    """Where a checkpoint holds inf or nan: the names of the floating-point tensors of its weights
    (``model_state``) and of its trainer state (optimizer moments, ...) that are not all finite."""
    found: list[str] = []

    def visit(value: Any, where: str) -> None:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()):
                found.append(where)
        elif isinstance(value, Mapping):
            for key, item in value.items():
                visit(item, f"{where}/{key}")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(item, f"{where}/{i}")

    for key in ("model_state", "trainer_state"):
        visit(checkpoint.get(key), key)
    return found


def _describe_nonfinite(names: Sequence[str]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} tensor(s) hold inf or nan ({shown})"


# -- the entries ------------------------------------------------------------------------------------------
_REQUIRED_ENTRIES = ("model_config", "model_state", "step")
_OPTIONAL_ENTRIES = {
    "format": "the format marker",
    "format_version": "the format version",
    "companion_version": "a version string",
    "torch_version": "a version string",
    "created": "a date string",
    "tokenizers": "the vocabularies",
    "train_config": "the training settings",
    "trainer_state": "the optimizer, scheduler, RNG and counters",
    "metrics": "training numbers",
    "run_info": "how the run was started",
    "averaged_from": "file names",
    "decoding": "the beam search chosen for these weights",
    "content_sha256": "the digest",
}
_TRAINER_STATE_ENTRIES = ("state", "optimizer", "scheduler", "rng", "world_size")


def check_checkpoint(checkpoint: Any, *, verify_digest: bool = False) -> TransformerConfig:
    """Check every entry of a checkpoint dict (as :func:`load_checkpoint` returns it, or built in memory) and
    return the :class:`~companion.model.TransformerConfig` it describes.

    Checked, in this order, without building anything: the format marker and version; that the required
    entries are there and no unknown ones; that every entry is a tree of dense tensors and plain values
    (bounded depth and size); the digest (``verify_digest``; a dict built in memory, e.g. by
    :func:`average_checkpoints`, has none); the type of every entry (``step``, versions, ``metrics``,
    ``run_info``, ``train_config``, ``averaged_from``, the counters, optimizer, scheduler and RNG states of
    ``trainer_state``); that all weights and trainer state are finite; every field of ``model_config``; that
    the config's sizes (vocabularies, ``d_model``, ``d_ff``, layers, ``max_len``) are those of the stored
    tensors, so that building the model allocates no more than the file holds; and that the tokenizers have
    the config's vocabulary sizes. Raises :class:`~companion.errors.CheckpointError` naming the entry.
    """
    if not isinstance(checkpoint, Mapping):
        raise CheckpointError(f"a checkpoint is a dict, got {type(checkpoint).__name__}")
    _check_format(checkpoint)
    problem = _plain_tree_problem(checkpoint)
    if problem is not None:
        raise CheckpointError(f"{problem} (the file was not written by companion, or was tampered with)")
    if verify_digest and checkpoint.get("content_sha256") != _digest(checkpoint):
        raise CheckpointError(
            "the checkpoint is corrupt: its contents do not match the digest recorded when it was written "
            "(bytes changed on disk). Use an earlier checkpoint."
        )
    bad = nonfinite_tensors(checkpoint)
    if bad:
        raise CheckpointError(
            f"the checkpoint is unusable: {_describe_nonfinite(bad)}. It was written by a run that diverged; "
            "use an earlier checkpoint."
        )
    return _check_entries(checkpoint)


def _check_format(checkpoint: Mapping[str, Any]) -> None:
    if "format" in checkpoint and checkpoint["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"the checkpoint is not a companion checkpoint (format {checkpoint['format']!r:.60})")
    version = checkpoint.get("format_version", CHECKPOINT_FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"the checkpoint has format version {version!r:.60}; this companion reads versions 1 to "
            f"{CHECKPOINT_FORMAT_VERSION} (upgrade companion)"
        )
    for key in _REQUIRED_ENTRIES:
        if key not in checkpoint:
            raise CheckpointError(f"the checkpoint lacks the entry {key!r}; the file is damaged")
    unknown = sorted(str(k) for k in checkpoint if k not in _REQUIRED_ENTRIES and k not in _OPTIONAL_ENTRIES)
    if unknown:
        raise CheckpointError(
            f"the checkpoint has unknown entries {unknown}; a companion checkpoint holds only "
            f"{sorted([*_REQUIRED_ENTRIES, *_OPTIONAL_ENTRIES])}"
        )


def _check_entries(checkpoint: Mapping[str, Any]) -> TransformerConfig:
    """The type checks of :func:`check_checkpoint`, then the config against the weights and the tokenizers."""
    _check_count("step", checkpoint["step"])
    for key in ("companion_version", "torch_version", "created", "content_sha256"):
        if key in checkpoint and not isinstance(checkpoint[key], str):
            raise CheckpointError(f"the entry {key!r} must be a string, got {_describe(checkpoint[key])}")
    for key in ("metrics", "run_info"):
        if key in checkpoint:
            _check_dict(key, checkpoint[key])
    if checkpoint.get("train_config") is not None:
        _check_dict("train_config", checkpoint["train_config"])
    names = checkpoint.get("averaged_from")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise CheckpointError(f"the entry 'averaged_from' must be a list of file names, got {_describe(names)}")
    if checkpoint.get("trainer_state") is not None:
        _check_trainer_state(checkpoint["trainer_state"], checkpoint["step"])
    if "decoding" in checkpoint:
        check_decoding_entry(checkpoint["decoding"])
    config = check_model_config(checkpoint["model_config"])
    _check_weights_fit(config, checkpoint["model_state"])
    _check_tokenizers(checkpoint.get("tokenizers"), config)
    return config


def check_decoding_entry(decoding: Any) -> None:
    """The ``decoding`` entry: a dict whose ``beam_size`` is a whole number in ``[1, MAX_BEAM_SIZE]`` and whose
    ``alpha`` is a number in ``[0, MAX_ALPHA]`` (the rest, how they were chosen, is free)."""
    _check_dict("decoding", decoding)
    beam_size, alpha = decoding.get("beam_size"), decoding.get("alpha")
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or not 1 <= beam_size <= MAX_BEAM_SIZE:
        raise CheckpointError(
            f"the entry 'decoding' must hold a beam_size from 1 to {MAX_BEAM_SIZE}, got {_describe(beam_size)}"
        )
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= MAX_ALPHA:
        raise CheckpointError(f"the entry 'decoding' must hold an alpha from 0 to {MAX_ALPHA}, got {_describe(alpha)}")


def _check_count(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"the entry {where!r} must be a non-negative integer, got {_describe(value)}")


def _check_dict(where: str, value: Any) -> None:
    if not isinstance(value, Mapping):
        raise CheckpointError(f"the entry {where!r} must be a dict, got {_describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise CheckpointError(f"the entry {where!r} must have string keys, got {key!r:.40}")


def _check_trainer_state(state: Any, step: int) -> None:
    """``trainer_state`` as :meth:`companion.train.Trainer.state_dict` writes it."""
    from ..train import TrainState  # late import: companion.train uses this module

    if not isinstance(state, Mapping):
        raise CheckpointError(f"the entry 'trainer_state' must be a dict (or None), got {_describe(state)}")
    if set(state) != set(_TRAINER_STATE_ENTRIES):
        extra, missing = (
            sorted(set(map(str, state)) - set(_TRAINER_STATE_ENTRIES)),
            sorted(set(_TRAINER_STATE_ENTRIES) - set(state)),
        )
        raise CheckpointError(
            f"the entry 'trainer_state' must hold exactly {list(_TRAINER_STATE_ENTRIES)}"
            + (f"; it has the unknown {extra}" if extra else "")
            + (f"; it lacks {missing}" if missing else "")
        )
    _check_counters(state["state"], {f.name: f.default for f in dataclasses.fields(TrainState)}, step)
    _check_optimizer_state(state["optimizer"])
    _check_dict("trainer_state.scheduler", state["scheduler"])
    world_size = state["world_size"]
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise CheckpointError(f"trainer_state.world_size must be a positive integer, got {_describe(world_size)}")
    _check_rng_states(state["rng"], world_size)


def _check_counters(counters: Any, defaults: Mapping[str, Any], step: int) -> None:
    _check_dict("trainer_state.state", counters)
    for name, value in counters.items():
        if name not in defaults:
            raise CheckpointError(f"trainer_state.state has an unknown counter {name!r}")
        default = defaults[name]
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if isinstance(default, int) and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CheckpointError(f"trainer_state.state.{name} must be a non-negative integer, got {_describe(value)}")
        if isinstance(default, float) and not (number and value >= 0):
            raise CheckpointError(f"trainer_state.state.{name} must be a non-negative number, got {_describe(value)}")
        if default is None and value is not None and not (number or isinstance(value, Mapping)):
            raise CheckpointError(
                f"trainer_state.state.{name} must be a number, a dict or None, got {_describe(value)}"
            )
    if counters.get("step", step) != step:
        raise CheckpointError(f"trainer_state.state.step is {counters['step']!r} but the checkpoint's step is {step}")


def _check_optimizer_state(optimizer: Any) -> None:
    _check_dict("trainer_state.optimizer", optimizer)
    if set(optimizer) != {"state", "param_groups"}:
        raise CheckpointError(f"trainer_state.optimizer must hold 'state' and 'param_groups', got {sorted(optimizer)}")
    per_parameter, groups = optimizer["state"], optimizer["param_groups"]
    if not isinstance(per_parameter, Mapping) or not all(
        isinstance(k, int) and isinstance(v, Mapping) for k, v in per_parameter.items()
    ):
        raise CheckpointError("trainer_state.optimizer.state must map parameter numbers to dicts")
    if not isinstance(groups, list) or not all(
        isinstance(g, Mapping) and isinstance(g.get("params"), list) and all(isinstance(i, int) for i in g["params"])
        for g in groups
    ):
        raise CheckpointError("trainer_state.optimizer.param_groups must be a list of dicts with 'params' lists")


def _check_rng_states(states: Any, world_size: int) -> None:
    """One ``{"torch": ByteTensor, "cuda"?: ByteTensor}`` per process, as ``torch.get_rng_state`` gives them."""
    if not isinstance(states, list) or len(states) != world_size:
        raise CheckpointError(
            f"trainer_state.rng must list one RNG state per process (world_size {world_size}), got "
            f"{len(states) if isinstance(states, list) else _describe(states)}"
        )
    cpu_size = torch.get_rng_state().numel()
    for rank, rng in enumerate(states):
        if not isinstance(rng, Mapping) or "torch" not in rng or not set(rng) <= {"torch", "cuda"}:
            raise CheckpointError(f"trainer_state.rng[{rank}] must be a dict with 'torch' (and 'cuda') states")
        for kind, tensor in rng.items():
            wanted = cpu_size if kind == "torch" else None
            if (
                not isinstance(tensor, torch.Tensor)
                or tensor.dtype != torch.uint8
                or tensor.dim() != 1
                or (wanted is not None and tensor.numel() != wanted)
            ):
                shape = (
                    f"{tensor.dtype} {tuple(tensor.shape)}" if isinstance(tensor, torch.Tensor) else _describe(tensor)
                )
                raise CheckpointError(
                    f"trainer_state.rng[{rank}][{kind!r}] is not a {kind} RNG state (a 1-D uint8 tensor"
                    f"{f' of {wanted} bytes' if wanted else ''}), got {shape}"
                )
