"""Argument and option checks, one family for the whole package.

Every public entry point validates its arguments *before* handing them to PyTorch, so that a mistake is
reported in the caller's terms (argument name, expected and actual shape or value) rather than as an
obscure error from deep inside a matmul, or worse, a silent broadcast. Each value is checked once, where it
enters (a public function, a config's ``__post_init__``, a command-line option), never on a per-step path.

The API (each check returns the value it accepted, so ``self.n = check_positive_int("n", n)`` reads well):

- ``check_integer(name, value, *, minimum=None, maximum=None)``: an ``int`` (``bool`` is not one) in the range;
  ``check_positive_int(name, value)`` is ``check_integer(..., minimum=1)``.
- ``check_number(name, value, *, low=None, high=None, low_inclusive=True, high_inclusive=True)``: a finite
  ``int`` or ``float`` in the range, returned as ``float``; ``check_fraction(name, value)`` one in ``[0, 1)``.
- ``check_bool(name, value)``: exactly ``True`` or ``False``; ``check_choice(name, value, choices)``: one of them.
- ``check_tensor(name, value, *, dims=None)``, ``check_last_dim(name, value, size)``,
  ``check_token_ids(name, tokens, vocab_size)`` (a ``[batch, seq]`` tensor; one host sync),
  ``check_id_list(name, ids, vocab_size)`` (one sequence), ``check_bool_mask(name, mask, shape)``.
- ``check_encoding_options(src_tokenizer, tgt_tokenizer, max_len)``: what encoding text pairs takes.

``name`` is what the caller wrote: an argument (``"d_model"``), a config field, or a flag (``"--max-steps"``),
and every message starts with it. The scalar checks take a keyword ``error``, the class they raise for a bad
value (wrong type included), ``ValueError`` by default: a run's options pass ``error=ConfigError`` (a
ValueError too), which the command line reports without a traceback. The tensor checks raise ``TypeError``
for a wrong type or dtype and ``ValueError`` for a wrong shape or value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "check_integer",
    "check_positive_int",
    "check_number",
    "check_fraction",
    "check_bool",
    "check_choice",
    "check_tensor",
    "check_last_dim",
    "check_token_ids",
    "check_id_list",
    "check_bool_mask",
    "check_encoding_options",
]

ErrorClass = type[Exception]


# --------------------------------------------------------------------------------------------------------
# Scalars: integers, numbers, flags, choices
# --------------------------------------------------------------------------------------------------------
def _integer_wanted(minimum: int | None, maximum: int | None) -> str:
    if maximum is not None:
        return f"an integer in [{'-inf' if minimum is None else minimum}, {maximum}]"
    if minimum == 1:
        return "a positive integer"
    return "an integer" if minimum is None else f"an integer >= {minimum}"


def check_integer(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None, error: ErrorClass = ValueError
) -> int:
    """Check an integer (bools are not integers here), optionally in ``[minimum, maximum]``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise error(f"{name} must be {_integer_wanted(minimum, maximum)}, got {value!r}")
    return value


def check_positive_int(name: str, value: object, *, error: ErrorClass = ValueError) -> int:
    """Check a strictly positive integer (a size, a count, a number of steps)."""
    return check_integer(name, value, minimum=1, error=error)


def _number_wanted(low: float | None, high: float | None, low_inclusive: bool, high_inclusive: bool) -> str:
    if low == 0 and high is None:
        return "a non-negative number" if low_inclusive else "a positive number"
    if low == 0 and not low_inclusive and high_inclusive:
        return f"a positive number no larger than {high:g}"
    left = "(-inf" if low is None else f"{'[' if low_inclusive else '('}{low:g}"
    right = "inf)" if high is None else f"{high:g}{']' if high_inclusive else ')'}"
    return f"a number in {left}, {right}"


def check_number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    error: ErrorClass = ValueError,
) -> float:
    """Check a finite real number (no inf or nan) in the range given by ``low``/``high``; returns it as float.

    ``check_number("lr", x, low=0, low_inclusive=False)`` asks for a positive number;
    ``check_number("dropout", p, low=0, high=1, high_inclusive=False)`` for one in ``[0, 1)``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{name} must be {_number_wanted(low, high, low_inclusive, high_inclusive)}, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise error(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (number < low if low_inclusive else number <= low)
    too_high = high is not None and (number > high if high_inclusive else number >= high)
    if too_low or too_high:
        raise error(f"{name} must be {_number_wanted(low, high, low_inclusive, high_inclusive)}, got {value!r}")
    return number


def check_fraction(name: str, value: object, *, error: ErrorClass = ValueError) -> float:
    """Check a number in ``[0, 1)``: a dropout rate, a label-smoothing weight."""
    return check_number(name, value, low=0, high=1, high_inclusive=False, error=error)


def check_bool(name: str, value: object, *, error: ErrorClass = ValueError) -> bool:
    """Check a True/False switch (``1`` or ``"yes"`` are refused: they are usually a mistake)."""
    if not isinstance(value, bool):
        raise error(f"{name} must be True or False, got {value!r}")
    return value


def check_choice(name: str, value: object, choices: Sequence[object], *, error: ErrorClass = ValueError) -> object:
    """Check that ``value`` is one of ``choices`` (the message lists them)."""
    if value not in choices:
        raise error(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------------------
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


def _check_has_values(name: str, ids: torch.Tensor) -> None:
    """Token ids are read, so a tensor on the meta device (a shape without data) cannot be one."""
    if ids.is_meta:
        raise ValueError(f"{name} is a tensor on the meta device (a shape without values); token ids need values")


def check_token_ids(name: str, tokens: object, vocab_size: int) -> torch.Tensor:
    """Check a non-empty ``[batch, seq]`` tensor of integer token ids in ``[0, vocab_size)``.

    The range check reads the ids' extremes back to the host (one ``aminmax``, one device sync): call it where
    ids enter (a public entry point), not at every step of a loop that feeds back ids it chose itself.
    """
    tokens = check_tensor(name, tokens, dims=2)
    if tokens.dtype not in (torch.long, torch.int32):
        raise TypeError(
            f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype} "
            "(torch.int32 works too; convert with .long())"
        )
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty [batch, seq] tensor, got shape {tuple(tokens.shape)}")
    _check_has_values(name, tokens)
    extremes = torch.aminmax(tokens)  # one pass, one host sync
    low, high = int(extremes.min), int(extremes.max)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size}) (vocab_size={vocab_size})"
        )
    return tokens


def check_id_list(name: str, ids: object, vocab_size: int) -> list[int]:
    """Check one sequence of token ids (a list of ints or a 1-D tensor) in ``[0, vocab_size)``; returns a list."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"{name} must be one sequence (1-D), got shape {tuple(ids.shape)}")
        _check_has_values(name, ids)
        ids = ids.tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(ids).__name__}")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"{name} must be integers, got {i!r} of type {type(i).__name__}")
        if not 0 <= i < vocab_size:
            raise ValueError(f"{name} holds {i}, outside the vocabulary [0, {vocab_size})")
    return list(ids)


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


# --------------------------------------------------------------------------------------------------------
# Encoding text pairs
# --------------------------------------------------------------------------------------------------------


def check_encoding_options(src_tokenizer: object, tgt_tokenizer: object, max_len: object) -> None:
    """The checks of encoding text pairs (``encode_pairs``, ``prepare_store``): two companion Tokenizers, and
    ``max_len`` None or an integer of at least 2 (one token plus ``<eos>``)."""
    from .data.tokenizers import Tokenizer  # here, not at the top: companion.data imports this module

    for name, tok in (("src_tokenizer", src_tokenizer), ("tgt_tokenizer", tgt_tokenizer)):
        if not isinstance(tok, Tokenizer):
            raise TypeError(f"{name} must be a companion Tokenizer, got {type(tok).__name__}")
    if max_len is not None and check_positive_int("max_len", max_len) < 2:
        raise ValueError(f"max_len must be at least 2 (one token plus <eos>), got {max_len}")
