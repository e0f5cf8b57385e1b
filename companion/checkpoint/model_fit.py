"""The model entries of a checkpoint agree: every field of ``model_config``, the config's sizes against the
stored weights, and the tokenizers against the vocabulary sizes (nothing is built)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from ..data import tokenizer_from_dict
from ..errors import CheckpointError
from ..model import TransformerConfig

_DERIVED_TABLES_LIMIT = 1 << 30  # bytes of tables computed from the config, not stored (sinusoidal positions)


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.60}" if isinstance(value, (str, int, float)) else type(value).__name__


def check_model_config(values: Any) -> TransformerConfig:
    """The :class:`~companion.model.TransformerConfig` a checkpoint's ``model_config`` describes, with every
    field checked (types, ranges, finiteness), or :class:`~companion.errors.CheckpointError` naming the field."""
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


# Where each size of the config shows in the stored weights: (field, tensor name, dimension). A learned
# positional table pins max_len too; the feed-forward width is read from the first layer that has one.
_SIZE_PINS = (
    ("src_vocab_size", "src_embed.weight", 0),
    ("d_model", "src_embed.weight", 1),
    ("tgt_vocab_size", "tgt_embed.weight", 0),
    ("d_model", "tgt_embed.weight", 1),
)
_LAYER_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.")
_FFN_KEY = re.compile(r"^(encoder|decoder)\.layers\.\d+\.ffn\.linear1\.weight$")


def _check_weights_fit(config: TransformerConfig, weights: Any) -> None:
    """``model_state`` holds tensors whose shapes are the sizes ``config`` asks for, so that building the model
    allocates no more than the file holds (plus its positional tables, bounded here too).

    Nothing is built: the vocabulary sizes, ``d_model``, ``d_ff`` and a learned ``max_len`` are read from the
    tensors that carry them, the layers are counted from the tensor names, and the sinusoidal tables
    (``max_len x d_model`` float32 per stack, computed at build time) must stay under 1 GiB. The remaining
    names and shapes are compared when the weights are copied into the built model (:func:`load_model_weights`).
    """
    if not isinstance(weights, Mapping):
        raise CheckpointError(f"the entry 'model_state' must be a dict of tensors, got {_describe(weights)}")
    for name, tensor in weights.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise CheckpointError(
                f"model_state[{name!r:.60}] must be a tensor named by a string, got {_describe(tensor)}"
            )
    pins = list(_SIZE_PINS)
    ffn = next((name for name in weights if _FFN_KEY.match(name)), None)
    if ffn is not None:
        pins.append(("d_ff", ffn, 0))
    if config.positional == "learned":
        pins += [("max_len", "src_pos.weight", 0), ("max_len", "tgt_pos.weight", 0)]
    for field, name, dim in pins:
        stored = weights.get(name)
        if stored is None or stored.dim() != 2:
            raise CheckpointError(
                f"model_state lacks the 2-D tensor {name!r} that holds model_config.{field}: the weights are not a "
                "companion Transformer's"
            )
        if stored.shape[dim] != getattr(config, field):
            raise CheckpointError(
                f"model_config.{field} is {getattr(config, field):,}, but model_state[{name!r}] has shape "
                f"{tuple(stored.shape)}: the config does not describe these weights"
            )
    for stack in ("encoder", "decoder"):
        found = {int(m.group(2)) for name in weights if (m := _LAYER_KEY.match(name)) and m.group(1) == stack}
        wanted = getattr(config, f"num_{stack}_layers")
        if found != set(range(wanted)):
            raise CheckpointError(
                f"model_config.num_{stack}_layers is {wanted:,}, but model_state holds {len(found)} {stack} "
                "layers: the config does not describe these weights"
            )
    tables = 2 * config.max_len * config.d_model * 4 if config.positional == "sinusoidal" else 0
    if tables > _DERIVED_TABLES_LIMIT:
        raise CheckpointError(
            f"model_config.max_len {config.max_len:,} (with d_model {config.d_model}) asks for {tables / 2**30:,.1f} "
            f"GiB of sinusoidal position tables, computed when the model is built; a checkpoint may ask for at "
            f"most {_DERIVED_TABLES_LIMIT / 2**30:.0f} GiB"
        )


def _check_tokenizers(saved: Any, config: TransformerConfig) -> None:
    """``tokenizers`` is None or ``{"src", "tgt"}`` tokenizer dicts with the config's vocabulary sizes."""
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"the entry 'tokenizers' must be a dict with 'src' and 'tgt' (or None), got {_describe(saved)}"
        )
    for side in ("src", "tgt"):
        if side not in saved:
            raise CheckpointError(f"the checkpoint's tokenizers lack the {side!r} entry; the file is damaged")
    if set(saved) != {"src", "tgt"}:
        raise CheckpointError(f"the entry 'tokenizers' must hold only 'src' and 'tgt', got {sorted(map(str, saved))}")
    for side, wanted in (("src", config.src_vocab_size), ("tgt", config.tgt_vocab_size)):
        size = _tokenizer_size(saved[side], side)
        if size != wanted:
            raise CheckpointError(
                f"the checkpoint's {side} tokenizer has {size} entries but model_config's {side}_vocab_size "
                f"{wanted}: the vocabulary does not belong to these weights"
            )


def _tokenizer_size(values: Any, side: str) -> int:
    """Entries of a saved tokenizer: a word vocabulary's length, or a rebuilt subword tokenizer's size."""
    if not isinstance(values, Mapping):
        raise CheckpointError(
            f"the checkpoint's {side} tokenizer is damaged: it must be a dict, got {_describe(values)}"
        )
    if values.get("type") == "word":
        itos = values.get("itos")
        if not isinstance(itos, list) or not all(isinstance(token, str) for token in itos):
            raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: its itos must be a list of strings")
        return len(itos)
    try:
        return tokenizer_from_dict(dict(values)).vocab_size
    except (TypeError, ValueError, KeyError, OSError) as error:
        raise CheckpointError(f"the checkpoint's {side} tokenizer is damaged: {error}") from None
