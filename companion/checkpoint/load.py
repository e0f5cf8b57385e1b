"""Reading checkpoints: safe loading, compatibility with a model and vocabulary, and building the model and
tokenizers a checkpoint describes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import tokenizer_from_dict
from ..devices import resolve_device
from ..errors import CheckpointError
from ..model import Transformer
from .archive import _check_archive, _unreadable
from .files import list_checkpoints
from .model_fit import check_model_config
from .validate import CHECKPOINT_FORMAT, check_checkpoint, check_decoding_entry
from .write import _tokenizer_dicts, write_checkpoint


def load_checkpoint(
    path: str | os.PathLike, map_location: str | torch.device | None = "cpu", verify: bool = True
) -> dict[str, Any]:
    """Read a checkpoint safely (``weights_only=True``) and check that it is whole and valid.

    Raises :class:`~companion.errors.CheckpointError` with the path and the reason for a missing, truncated,
    corrupt or foreign file (one not written by this package, or by a newer format version; a file that is no
    zip archive is named for what it is: a Git LFS pointer, an HTML page, text, ...). Before ``torch.load``
    reads anything, the zip directory is checked (no compressed member, no more contents than the file holds:
    no zip bomb). After it, every entry is checked (:func:`check_checkpoint`) before anything is built: the
    weights against the config, counters, RNG states, tokenizers against the vocabulary sizes, and so on.
    ``verify=False`` skips the digest check (faster for large models).
    """
    path = Path(path)
    _check_archive(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        raise CheckpointError(_unreadable(path, error)) from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a companion checkpoint (no format marker {CHECKPOINT_FORMAT!r})"
        )
    try:
        check_checkpoint(checkpoint, verify_digest=verify)
    except CheckpointError as error:
        raise CheckpointError(_about(path, str(error))) from None
    return checkpoint


def record_decoding(path: str | os.PathLike, decoding: Mapping[str, Any]) -> Path:
    """Record in the checkpoint file ``path`` the beam search chosen for its weights, as its ``decoding`` entry:
    ``beam_size``, ``alpha`` and whatever says how they were chosen (plain values; an earlier entry is replaced).

    Everything else in the file stays as it was; the digest is renewed and the file replaced atomically (a
    failure leaves it untouched). ``companion translate`` and ``companion evaluate`` decode with the recorded
    setting unless told otherwise. Raises :class:`~companion.errors.CheckpointError` for a file that
    :func:`load_checkpoint` refuses or a ``decoding`` without a valid ``beam_size`` and ``alpha``.
    """
    path = Path(path)
    check_decoding_entry(decoding)
    checkpoint = load_checkpoint(path)
    checkpoint["decoding"] = dict(decoding)
    checkpoint.pop("content_sha256", None)
    return write_checkpoint(checkpoint, path)


def _about(path: Path, message: str) -> str:
    """``message`` about the file ``path``: "the checkpoint is ..." becomes "PATH is ...", others "PATH: ..."."""
    subject = "the checkpoint "
    return f"{path} {message[len(subject) :]}" if message.startswith(subject) else f"{path}: {message}"


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
        details = " ".join(str(error).split())[:500]
        raise CheckpointError(f"the checkpoint's weights do not fit the model: {details}") from error


def model_from_checkpoint(
    checkpoint: Mapping[str, Any] | str | os.PathLike, device: str | torch.device = "cpu"
) -> Transformer:
    """Build the :class:`~companion.model.Transformer` a checkpoint describes, with its weights, in eval mode.

    ``checkpoint`` is a file (read with :func:`load_checkpoint`) or a checkpoint dict, which gets the same checks
    (:func:`check_checkpoint`) except the digest. ``device`` (``"cpu"``, ``"cuda[:N]"``, ``"mps"``, ``"auto"``)
    is resolved first, as the command line does: a missing backend is a
    :class:`~companion.errors.DeviceUnavailableError`, a name that is no device a
    :class:`~companion.errors.ConfigError`.
    """
    target = resolve_device(device)
    if isinstance(checkpoint, Mapping):
        config = check_checkpoint(checkpoint)
    else:
        checkpoint = load_checkpoint(checkpoint)
        config = check_model_config(checkpoint["model_config"])
    model = Transformer(config)
    load_model_weights(model, checkpoint)
    return model.to(target).eval()


def tokenizers_from_checkpoint(checkpoint: Mapping[str, Any]) -> tuple[Any, Any]:
    """The ``(src, tgt)`` tokenizers saved in a checkpoint (CheckpointError if it has none, if one is damaged, or
    if one's size is not the vocabulary size of the checkpoint's model)."""
    saved = checkpoint.get("tokenizers")
    if not saved:
        raise CheckpointError(
            "this checkpoint has no vocabularies (it was trained on a synthetic task), so it "
            "cannot translate or evaluate text"
        )
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"the checkpoint's tokenizers entry must be a dict, got {type(saved).__name__}")
    config = checkpoint.get("model_config")
    rebuilt = []
    for side in ("src", "tgt"):
        if side not in saved:
            raise CheckpointError(f"the checkpoint's tokenizers lack the {side!r} entry; the file is damaged")
        try:
            tokenizer = tokenizer_from_dict(saved[side])
        except (TypeError, ValueError, KeyError, OSError) as error:
            raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: {error}") from None
        wanted = config.get(f"{side}_vocab_size") if isinstance(config, Mapping) else None
        if wanted is not None and tokenizer.vocab_size != wanted:
            raise CheckpointError(
                f"the checkpoint's {side} tokenizer has {tokenizer.vocab_size} entries but model_config's "
                f"{side}_vocab_size {wanted}: the vocabulary does not belong to these weights"
            )
        rebuilt.append(tokenizer)
    return rebuilt[0], rebuilt[1]


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
