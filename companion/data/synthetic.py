"""Synthetic sequence-to-sequence tasks that need no data: copy, reverse and sort."""

from __future__ import annotations

import random
from collections.abc import Callable

from .._validation import check_positive_int
from .tokenizers import SPECIAL_TOKENS

__all__ = ["SYNTHETIC_TASKS", "synthetic_pairs"]

# -- synthetic tasks ---------------------------------------------------------------------------------------

SYNTHETIC_TASKS = ("copy", "reverse", "sort")


def synthetic_pairs(
    task: str, num_examples: int, *, min_len: int = 1, max_len: int = 10, vocab_size: int = 20, seed: int = 0
) -> list[tuple[list[int], list[int]]]:
    """Id pairs for a toy task: the target is the source copied, reversed or sorted.

    Source ids are drawn uniformly from ``range(4, vocab_size)`` (ids 0-3 are the specials) and lengths
    uniformly from ``[min_len, max_len]``; the same ``seed`` gives the same pairs.
    """
    transforms: dict[str, Callable[[list[int]], list[int]]] = {
        "copy": list,
        "reverse": lambda s: s[::-1],
        "sort": sorted,
    }
    if task not in transforms:
        raise ValueError(f"task must be one of {list(SYNTHETIC_TASKS)}, got {task!r}")
    check_positive_int("num_examples", num_examples)
    check_positive_int("min_len", min_len)
    check_positive_int("max_len", max_len)
    if min_len > max_len:
        raise ValueError(f"min_len must be <= max_len, got min_len={min_len} and max_len={max_len}")
    check_positive_int("vocab_size", vocab_size)
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must be larger than {len(SPECIAL_TOKENS)} (ids 0-3 are specials), got {vocab_size}"
        )
    rng = random.Random(seed)
    pairs = []
    for _ in range(num_examples):
        source = [rng.randrange(len(SPECIAL_TOKENS), vocab_size) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((source, list(transforms[task](source))))
    return pairs
