"""Checkpoints: atomic writes, safe loading, compatibility checks and checkpoint averaging.

A checkpoint is one file written with :func:`torch.save` and read back with ``weights_only=True``, so loading
never unpickles arbitrary objects: it holds only tensors and plain values (dicts, lists, strings, numbers).

Contents (a dict)::

    format, format_version      "companion-checkpoint", 1
    companion_version, torch_version, created (UTC, ISO 8601)
    model_config                TransformerConfig.to_dict()
    model_state                 the model's state_dict
    tokenizers                  {"src": Tokenizer.to_dict(), "tgt": ...} or None (synthetic tasks)
    step                        optimizer steps taken
    train_config                TrainConfig.to_dict() or None
    trainer_state               optimizer, scheduler, RNG and counters for an exact resume (None if averaged)
    metrics                     latest training/validation numbers
    run_info                    how the run was started (data, command line)
    averaged_from               names of the checkpoints averaged into this one (or absent)
    content_sha256              digest of every tensor's bytes and of the metadata, checked on load

Atomicity: :func:`atomic_save` writes to a temporary file in the destination folder, flushes it to disk and
renames it over the destination with :func:`os.replace` (atomic on POSIX and Windows). A crash mid-write
leaves at most a stray ``.*.tmp`` file; the previous file under the final name is untouched.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_FORMAT_VERSION",
    "atomic_save",
    "save_checkpoint",
    "load_checkpoint",
    "check_compatible",
    "load_model_weights",
    "model_from_checkpoint",
    "tokenizers_from_checkpoint",
    "checkpoint_path",
    "list_checkpoints",
    "latest_checkpoint",
    "latest_valid_checkpoint",
    "nonfinite_tensors",
    "prune_checkpoints",
    "average_checkpoints",
]

CHECKPOINT_FORMAT = "companion-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


from .errors import CheckpointError  # noqa: E402  (re-exported: its home was this module)


# --------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------
def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj)`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as tmp:
            torch.save(obj, tmp)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException as error:
        with _suppress_os_error():
            os.unlink(tmp_name)
        cause = _os_error_in(error)
        if cause is not None:
            raise CheckpointError(_write_failure(path, cause)) from error
        raise
    _fsync_folder(path.parent)
    return path


def _os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind ``error``: itself, or the one PyTorch's writer turned into a RuntimeError
    ("unexpected pos ...") while the file's ``write`` failed (found in the exception's chain)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno is not None:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _write_failure(path: Path, error: OSError) -> str:
    import errno

    if error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        what = (
            "the disk is full (no space left on the device)"
            if error.errno == errno.ENOSPC
            else "the disk quota is exhausted"
        )
        return (
            f"cannot write the checkpoint {path}: {what}. Nothing was replaced: the previous checkpoint is "
            "intact. Free some space (or use --keep-last to keep fewer checkpoints) and --resume."
        )
    return f"cannot write the checkpoint {path}: {error.strerror or error}. The previous checkpoint is intact."


class _suppress_os_error:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, traceback) -> bool:
        return kind is not None and issubclass(kind, OSError)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


_PLAIN = (str, int, float, bool, type(None), torch.Tensor)


def _check_plain(value: Any, where: str) -> None:
    """Only tensors and plain Python values, so that ``weights_only=True`` loading accepts the file."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if type(key) not in (str, int):
                raise TypeError(f"{where} has a key of type {type(key).__name__}; only str/int keys can be saved")
            _check_plain(item, f"{where}[{key!r}]")
    elif type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
    elif type(value) not in _PLAIN and not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{where} is a {type(value).__name__}; checkpoints hold only tensors and plain values "
            "(str, int, float, bool, None, lists, dicts) so that loading never unpickles objects"
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
    from . import __version__  # late import: the package's __init__ may import this module first

    return {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_FORMAT_VERSION,
        "companion_version": __version__,
        "torch_version": str(torch.__version__),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


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


def write_checkpoint(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Seal ``checkpoint`` (a dict as built by :func:`save_checkpoint` or :func:`average_checkpoints`) with its
    digest and write it atomically.

    A checkpoint whose weights or trainer state hold inf or nan is never written
    (:class:`~companion.errors.CheckpointError`): every checkpoint on disk is one that training can continue
    from and decoding can use.
    """
    checkpoint = dict(checkpoint)
    _check_plain(checkpoint, "checkpoint")
    bad = nonfinite_tensors(checkpoint)
    if bad:
        raise CheckpointError(f"refusing to write {path}: {_describe_nonfinite(bad)}; the run diverged")
    checkpoint["content_sha256"] = _digest(checkpoint)
    return atomic_save(checkpoint, path)


# --------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------
def load_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device | None = "cpu", verify: bool = True
) -> dict[str, Any]:
    """Read a checkpoint safely (``weights_only=True``) and check that it is whole.

    Raises :class:`~companion.errors.CheckpointError` with the path and the reason for a missing, truncated, corrupt or
    foreign file (one not written by this package, or by a newer format version). ``verify=False`` skips
    the digest check (faster for large models).
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a folder; pass a checkpoint file (e.g. {path}/checkpoints/step_*.pt), "
            "or use latest_checkpoint(folder)"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes): it was truncated, probably by a crash "
            "during an old-style write; use an earlier checkpoint"
        )
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        message = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        if "weights only" in str(error).lower() or "weights_only" in str(error):
            detail = [line.strip() for line in str(error).splitlines() if "Unsupported" in line]
            message = detail[0][:300] if detail else message
            raise CheckpointError(
                f"{path} holds Python objects that weights_only=True loading refuses to unpickle (it was not "
                f"written by companion, or was tampered with): {message}"
            ) from error
        raise CheckpointError(
            f"{path} is not a readable checkpoint: it looks truncated or corrupt ({type(error).__name__}: "
            f"{message}). Delete it and use an earlier checkpoint."
        ) from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a companion checkpoint (no format marker {CHECKPOINT_FORMAT!r})"
        )
    version = checkpoint.get("format_version")
    if not isinstance(version, int) or version > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {version!r}; this companion reads up to "
            f"{CHECKPOINT_FORMAT_VERSION} (upgrade companion)"
        )
    for key in ("model_config", "model_state", "step"):
        if key not in checkpoint:
            raise CheckpointError(f"{path} lacks the entry {key!r}; the file is damaged")
    if verify and checkpoint.get("content_sha256") != _digest(checkpoint):
        raise CheckpointError(
            f"{path} is corrupt: its contents do not match the digest recorded when it was "
            "written (bytes changed on disk). Use an earlier checkpoint."
        )
    bad = nonfinite_tensors(checkpoint)
    if bad:
        raise CheckpointError(
            f"{path} is unusable: {_describe_nonfinite(bad)}. It was written by a run that "
            "diverged; use an earlier checkpoint."
        )
    try:
        check_model_config(checkpoint["model_config"])
    except CheckpointError as error:
        raise CheckpointError(f"{path}: {error}") from None
    return checkpoint


def check_model_config(values: Any) -> Any:
    """The :class:`~companion.model.TransformerConfig` a checkpoint's ``model_config`` describes, with every
    field checked (types, ranges, finiteness), or :class:`~companion.errors.CheckpointError` naming the field."""
    import dataclasses
    import math

    from .model import TransformerConfig

    if not isinstance(values, Mapping):
        raise CheckpointError(f"the model_config must be a dict, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    for name, value in values.items():
        if name not in fields:
            raise CheckpointError(f"the model_config has an unknown field {name!r}")
        default = fields[name].default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise CheckpointError(f"the model_config field {name} must be True or False, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise CheckpointError(f"the model_config field {name} must be a finite number, got {value!r}")
    eps = values.get("layer_norm_eps", 1e-5)
    if not eps > 0:
        raise CheckpointError(f"the model_config field layer_norm_eps must be positive, got {eps!r}")
    try:
        return TransformerConfig.from_dict(dict(values))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"the model_config is invalid: {error}") from None


def _config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: checkpoint {saved.get(k)!r} vs model {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)
    ]


def check_compatible(
    checkpoint: Mapping[str, Any], model_config: Any = None, tokenizers: Mapping[str, Any] | None = None
) -> None:
    """Raise :class:`~companion.errors.CheckpointError` if ``checkpoint`` was written for another model config or
    vocabulary.

    ``model_config`` is a TransformerConfig (or its dict); ``tokenizers`` is ``{"src", "tgt"}`` tokenizers or
    dicts. Either may be None to skip that check.
    """
    if model_config is not None:
        current = model_config.to_dict() if hasattr(model_config, "to_dict") else dict(model_config)
        differences = _config_differences(checkpoint["model_config"], current)
        if differences:
            raise CheckpointError(
                "the checkpoint was written for another model configuration: " + "; ".join(differences)
            )
    if tokenizers is not None:
        saved = checkpoint.get("tokenizers")
        current_tok = _tokenizer_dicts(tokenizers)
        if saved is None:
            raise CheckpointError(
                "the checkpoint has no vocabularies (a synthetic-task model), but tokenizers were given"
            )
        assert current_tok is not None
        for side in ("src", "tgt"):
            if saved[side] != current_tok[side]:
                raise CheckpointError(
                    f"the checkpoint's {side} vocabulary differs from the given tokenizer "
                    f"({_describe_tokenizer(saved[side])} vs {_describe_tokenizer(current_tok[side])}); "
                    "it was trained with another vocabulary"
                )


def _describe_tokenizer(values: Mapping[str, Any]) -> str:
    size = len(values.get("itos", ())) or values.get("vocab_size") or "?"
    extra = f", {values['language']}" if "language" in values else ""
    return f"{values.get('type', '?')} tokenizer{extra}, {size} entries"


def load_model_weights(model: nn.Module, checkpoint: Mapping[str, Any]) -> None:
    """Copy the checkpoint's weights into ``model`` after checking that the configurations agree."""
    check_compatible(checkpoint, model_config=getattr(model, "config", None))
    try:
        model.load_state_dict(checkpoint["model_state"])
    except RuntimeError as error:
        raise CheckpointError(f"the checkpoint's weights do not fit the model: {str(error)[:500]}") from error


def model_from_checkpoint(
    checkpoint: Mapping[str, Any] | str | os.PathLike, device: str | torch.device = "cpu"
) -> nn.Module:
    """Build the :class:`~companion.model.Transformer` a checkpoint describes, with its weights, in eval mode."""
    from .model import Transformer

    if not isinstance(checkpoint, Mapping):
        checkpoint = load_checkpoint(checkpoint)
    config = check_model_config(checkpoint["model_config"])
    model = Transformer(config)
    load_model_weights(model, checkpoint)
    return model.to(device).eval()


def tokenizers_from_checkpoint(checkpoint: Mapping[str, Any]) -> tuple[Any, Any]:
    """The ``(src, tgt)`` tokenizers saved in a checkpoint (CheckpointError if it has none)."""
    from .data import tokenizer_from_dict

    saved = checkpoint.get("tokenizers")
    if not saved:
        raise CheckpointError(
            "this checkpoint has no vocabularies (it was trained on a synthetic task), so it "
            "cannot translate or evaluate text"
        )
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"the checkpoint's tokenizers entry must be a dict, got {type(saved).__name__}")
    rebuilt = []
    for side in ("src", "tgt"):
        if side not in saved:
            raise CheckpointError(f"the checkpoint's tokenizers lack the {side!r} entry; the file is damaged")
        try:
            rebuilt.append(tokenizer_from_dict(saved[side]))
        except (TypeError, ValueError, KeyError, OSError) as error:
            raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: {error}") from None
    return rebuilt[0], rebuilt[1]


# --------------------------------------------------------------------------------------------------------
# Folders of step checkpoints
# --------------------------------------------------------------------------------------------------------
def checkpoint_path(folder: str | os.PathLike, step: int) -> Path:
    """``folder/step_XXXXXXXX.pt`` (zero-padded so that names sort by step)."""
    return Path(folder) / f"step_{step:08d}.pt"


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """The ``step_*.pt`` files in ``folder``, oldest step first (temp files of interrupted writes ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    """The newest step checkpoint in ``folder`` (None if there is none)."""
    found = list_checkpoints(folder)
    return found[-1] if found else None


def latest_valid_checkpoint(folder: str | os.PathLike) -> tuple[Path | None, list[str]]:
    """The newest step checkpoint in ``folder`` that loads: whole, digest intact, every tensor finite.

    Returns ``(path or None, reasons)``, where ``reasons`` says why each newer file was passed over.
    """
    reasons = []
    for path in reversed(list_checkpoints(folder)):
        try:
            load_checkpoint(path)
        except CheckpointError as error:
            reasons.append(str(error))
            continue
        return path, reasons
    return None, reasons


def prune_checkpoints(folder: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` step checkpoints (and stale temp files); returns the deleted."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last <= 0:
        raise ValueError(f"keep_last must be a positive integer, got {keep_last!r}")
    found = list_checkpoints(folder)
    doomed = found[:-keep_last]
    doomed += [p for p in Path(folder).glob(".step_*.pt.*.tmp") if p.is_file()]  # left by killed writers
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


# --------------------------------------------------------------------------------------------------------
# Averaging
# --------------------------------------------------------------------------------------------------------
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
