"""The paper's decoding settings and limits (length penalty, output lengths, ``MAX_ALPHA``, ``MAX_BEAM_SIZE``)
and the checks a search runs once, at its entry."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .._validation import check_id_list, check_integer, check_token_ids
from ..data import BOS_ID, EOS_ID
from ..model import Transformer

# The paper's beam search (section 6.1): 4 beams, length penalty alpha 0.6. Used where a checkpoint records no
# setting of its own (companion.pretrained.default_decoding).
PAPER_BEAM_SIZE = 4
PAPER_ALPHA = 0.6
# The largest length-penalty alpha accepted (here and by the command line's --alpha): the paper tuned alpha in
# [0.6, 1.0]; far above that the penalty ((5 + length) / 6) ** alpha only ever prefers the longest hypothesis
# (and from alpha ~ 320 it overflows a float).
MAX_ALPHA = 10.0
# The widest beam accepted (here, by translate/translate_ids and by the command line's --beam-size): the paper's
# beam is 4, and beam search holds batch x beam hypotheses with their caches and a score per vocabulary entry, so
# far wider beams only exhaust memory.
MAX_BEAM_SIZE = 1000
_MAX_EXTRA_LEN = 50  # the paper's length limit: input length + 50 (the searches' default)


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (1 for ``alpha = 0``)."""
    return ((5 + length) / 6) ** alpha


def max_output_lengths(src: torch.Tensor, pad_id: int, max_extra_len: int, model_max_len: int) -> list[int]:
    """Per sentence, the most output tokens to generate: ``source length + max_extra_len``.

    ``src [batch, n]`` is right-padded; its length counts the non-pad tokens (``<eos>`` included). The limit
    is capped at ``model_max_len``, the longest target the model's positional table covers.
    """
    lengths = (src != pad_id).sum(dim=1)
    return [max(1, min(int(n) + max_extra_len, model_max_len)) for n in lengths]


def check_search_inputs(
    model: object, src: object, *, max_extra_len: object = 0, bos_id: object = BOS_ID, eos_id: object = EOS_ID
) -> torch.Tensor:
    """The checks a search runs once, at its entry: ``model`` a companion Transformer, ``src [batch, n]`` source
    ids in its vocabulary, ``max_extra_len`` a non-negative integer, ``bos_id``/``eos_id`` target token ids.

    Returns ``src``. Raises TypeError or ValueError naming the argument.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a companion Transformer, got {type(model).__name__}")
    src = check_token_ids("src", src, model.config.src_vocab_size)
    check_integer("max_extra_len", max_extra_len, minimum=0)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        check_integer(f"{name} (a target token id)", value, minimum=0, maximum=model.config.tgt_vocab_size - 1)
    return src


def _check_id_lists(name: str, rows: object, vocab_size: int) -> list[list[int]]:
    """Check a sequence of token-id lists (one per sentence); each is checked by ``check_id_list``."""
    if isinstance(rows, (str, bytes, torch.Tensor)) or not isinstance(rows, Sequence):
        raise TypeError(f"{name} must be a list of token-id lists (one per sentence), got {type(rows).__name__}")
    return [check_id_list(f"{name}[{i}]", row, vocab_size) for i, row in enumerate(rows)]


def check_beam_size(beam_size: object) -> int:
    """Check ``beam_size``: an integer in ``[1, MAX_BEAM_SIZE]``; returns it. Raises ValueError naming it."""
    return check_integer("beam_size", beam_size, minimum=1, maximum=MAX_BEAM_SIZE)
