"""Step functions: the next token's logits for every row still decoding (:class:`DecoderStep` and the two
steps over a :class:`~companion.model.Transformer`, with and without the key/value cache)."""

from __future__ import annotations

import math
from typing import Protocol

import torch

from ..data import BOS_ID
from ..errors import NonFiniteOutputError
from ..model import Transformer


class DecoderStep(Protocol):
    """What a search asks of the model at each step. A row is one hypothesis of one sentence."""

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        """``prefixes [rows, t]`` (``<bos>`` and the tokens so far) -> next-token logits ``[rows, vocab]`` (float32),
        with the tokens that are never generated (``<pad>``, ``<bos>``) at -inf."""
        ...

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        """From now on, row ``i`` is former row ``rows[i]`` (``rows [new_rows]``: dropped rows are gone, a row may be
        repeated). ``same_sources``: every row keeps reading the source sentence it read (beams of a sentence
        swapping their prefixes), so nothing that depends on the source alone has to move."""
        ...


def _never_generated(logits: torch.Tensor, pad_id: int, bos_id: int) -> torch.Tensor:
    """``logits [rows, vocab]`` as float32 with ``<pad>`` and ``<bos>`` at -inf; refuses inf or nan scores."""
    logits = logits.float()
    # One reduction instead of an elementwise test and a second reduction: the sum of finite float32 scores is
    # finite unless they are astronomically large, and only then is the exact test needed.
    if not math.isfinite(logits.sum().item()) and not bool(torch.isfinite(logits).all()):
        raise NonFiniteOutputError(
            "the model's next-token scores hold inf or nan, so no token can be chosen: its weights are broken "
            "(a diverged run?). Decode with a checkpoint whose weights are finite."
        )
    logits[:, pad_id] = float("-inf")
    logits[:, bos_id] = float("-inf")
    return logits


class ModelStep:
    """A step function over a :class:`~companion.model.Transformer` (the base of :class:`CachedStep` and
    :class:`RecomputeStep`): ``memory [rows, n, d_model]`` and ``src_mask [rows, 1, 1, n]`` are the encoder's
    output for each row; ``<pad>`` and ``bos_id`` are never generated."""

    def __init__(self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, *, bos_id: int) -> None:
        self.model, self.memory, self.src_mask, self.bos_id = model, memory, src_mask, bos_id

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        """See :meth:`DecoderStep.select`: keep rows ``rows [new_rows]`` of everything kept per row."""
        if not same_sources:
            self.memory, self.src_mask = self.memory[rows], self.src_mask[rows]


class CachedStep(ModelStep):
    """Incremental decoding: each step feeds only the newest token ``prefixes[:, -1:]``; the keys and values of
    the earlier positions come from a :class:`~companion.model.KVCache`."""

    def __init__(self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, *, bos_id: int) -> None:
        super().__init__(model, memory, src_mask, bos_id=bos_id)
        self.cache = model.new_cache()

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        logits = self.model.decode_unchecked(prefixes[:, -1:], self.memory, self.src_mask, cache=self.cache)
        return _never_generated(logits[:, -1], self.model.config.pad_id, self.bos_id)

    def select(self, rows: torch.Tensor, *, same_sources: bool = False) -> None:
        """See :meth:`DecoderStep.select`; the key/value cache's rows move too (its cross-attention part only when
        the sources change)."""
        self.cache.reorder(rows, include_cross=not same_sources)  # cross-attention keys depend on the source only
        super().select(rows, same_sources=same_sources)


class RecomputeStep(ModelStep):
    """Decoding without a cache: each step reruns the decoder over the whole prefix ``[rows, t]`` and projects
    only its last position onto the vocabulary (as a loop around a plain ``nn.Transformer`` does). The same
    tokens as :class:`CachedStep`; the baseline that the cache is measured against."""

    def __call__(self, prefixes: torch.Tensor) -> torch.Tensor:
        logits = self.model.decode_unchecked(prefixes, self.memory, self.src_mask, last_only=True)
        return _never_generated(logits[:, -1], self.model.config.pad_id, self.bos_id)


def model_step(
    model: Transformer, src: torch.Tensor, *, bos_id: int = BOS_ID, copies: int = 1, use_cache: bool = True
) -> ModelStep:
    """Encode ``src [batch, n]`` (ids already checked) and return the step function over ``batch * copies`` rows
    (row ``sentence * copies + j``: ``copies`` hypotheses per sentence, for beam search)."""
    memory, src_mask = model.encode_unchecked(src)  # [batch, n, d_model], [batch, 1, 1, n]
    if copies > 1:
        memory, src_mask = memory.repeat_interleave(copies, dim=0), src_mask.repeat_interleave(copies, dim=0)
    return (CachedStep if use_cache else RecomputeStep)(model, memory, src_mask, bos_id=bos_id)
