"""Input checks shared by the companion modules.

Every public entry point validates its arguments *before* handing them to PyTorch, so that a mistake is
reported in the caller's terms (argument name, expected and actual shape or value) rather than as an
obscure error from deep inside a matmul, or worse, a silent broadcast.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        raise ValueError(f"{name} must have last dimension {what}={size}, got shape {tuple(value.shape)}")


def check_token_ids(name: str, tokens: object, vocab_size: int) -> torch.Tensor:
    """Check a ``[batch, seq]`` tensor of integer token ids in ``[0, vocab_size)``."""
    tokens = check_tensor(name, tokens, dims=2)
    if tokens.dtype not in (torch.long, torch.int32):
        raise TypeError(
            f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype} "
            "(torch.int32 works too; convert with .long())"
        )
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty [batch, seq] tensor, got shape {tuple(tokens.shape)}")
    extremes = torch.aminmax(tokens)  # one pass, one host sync
    low, high = int(extremes.min), int(extremes.max)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size}) (vocab_size={vocab_size})"
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


# --------------------------------------------------------------------------------------------------------
# Option checks: raise companion.errors.ConfigError (a ValueError), which the command line reports without a
# traceback. ``name`` should say how the user set the value (e.g. "--max-steps").
# --------------------------------------------------------------------------------------------------------
def check_integer(name: str, value: object, *, minimum: int | None = None) -> int:
    """Check an integer option, optionally ``>= minimum`` (bools are not integers here)."""
    from .errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        want = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"{name} must be {want}, got {value!r}")
    return value


def check_number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """Check a finite real number (no inf or nan) in the range given by ``low``/``high``; returns it as float.

    ``check_number("--lr-factor", x, low=0, low_inclusive=False)`` asks for a positive number;
    ``check_number("--dropout", p, low=0, high=1, high_inclusive=False)`` for one in ``[0, 1)``.
    """
    import math

    from .errors import ConfigError

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (number < low if low_inclusive else number <= low)
    too_high = high is not None and (number > high if high_inclusive else number >= high)
    if too_low or too_high:
        if low == 0 and not low_inclusive and high is None:
            want = "a positive number"
        elif low == 0 and not low_inclusive and high_inclusive:
            want = f"a positive number no larger than {high:g}"
        else:
            left = "-inf" if low is None else f"{low:g}"
            right = "inf" if high is None else f"{high:g}"
            want = (
                f"a number in {'[' if low_inclusive and low is not None else '('}{left}, "
                f"{right}{']' if high_inclusive and high is not None else ')'}"
            )
        raise ConfigError(f"{name} must be {want}, got {value!r}")
    return number


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """Check that ``value`` is one of ``choices``."""
    from .errors import ConfigError

    if value not in choices:
        raise ConfigError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_bool(name: str, value: object) -> bool:
    """Check a True/False option."""
    from .errors import ConfigError

    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return value
