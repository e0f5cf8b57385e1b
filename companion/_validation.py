"""Input checks shared by the companion modules.

Every public entry point validates its arguments *before* handing them to PyTorch, so that a mistake is
reported in the caller's terms (argument name, expected and actual shape or value) rather than as an
obscure error from deep inside a matmul, or worse, a silent broadcast.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["check_tensor", "check_last_dim", "check_token_ids", "check_bool_mask", "check_positive_int"]


def check_tensor(name: str, value: object, *, dims: int | Sequence[int] | None = None) -> torch.Tensor:
    """Check that ``value`` is a tensor with the given number of dimensions (an int or a set of ints)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if dims is not None:
        allowed = (dims,) if isinstance(dims, int) else tuple(dims)
        if value.dim() not in allowed:
            want = " or ".join(str(d) for d in allowed)
            raise ValueError(f"{name} must have {want} dimensions, got shape {tuple(value.shape)}")
    return value


def check_last_dim(name: str, value: torch.Tensor, size: int, what: str = "d_model") -> None:
    """Check the feature (last) dimension of ``value``."""
    if value.shape[-1] != size:
        raise ValueError(
            f"{name} must have last dimension {what}={size}, got shape {tuple(value.shape)}"
        )


def check_token_ids(name: str, tokens: object, vocab_size: int) -> torch.Tensor:
    """Check a ``[batch, seq]`` tensor of integer token ids in ``[0, vocab_size)``."""
    tokens = check_tensor(name, tokens, dims=2)
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty [batch, seq] tensor, got shape {tuple(tokens.shape)}")
    low, high = torch.aminmax(tokens)  # one pass, one host sync
    low, high = int(low), int(high)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size}) "
            f"(vocab_size={vocab_size})"
        )
    return tokens


def check_bool_mask(name: str, mask: object, target_shape: Sequence[int]) -> torch.Tensor:
    """Check that ``mask`` is boolean and broadcasts to ``target_shape`` (``[..., m, n]``).

    True means "may attend" (the convention of ``torch.nn.functional.scaled_dot_product_attention``).
    """
    mask = check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            "convert an additive float mask with `mask == 0`"
        )
    target = tuple(target_shape)
    try:
        shape = torch.broadcast_shapes(tuple(mask.shape), target)
    except RuntimeError:
        shape = None
    if shape != target:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{target} ([..., q_len, k_len])"
        )
    return mask


def check_positive_int(name: str, value: object) -> int:
    """Check a strictly positive integer hyper-parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
