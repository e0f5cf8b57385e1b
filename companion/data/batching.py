"""From text pairs to training tensors: id pairs, then right-padded :class:`Batch` tensors grouped by length
so that each batch holds about ``max_tokens`` tokens (the paper: ~25,000 per side).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .._validation import check_encoding_options, check_positive_int
from .tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer

__all__ = ["encode_pairs", "Batch", "make_batches", "pad_sequences"]

# -- id pairs and batches ----------------------------------------------------------------------------------


def encode_pairs(
    pairs: Sequence[tuple[str, str]], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, max_len: int | None = None
) -> list[tuple[list[int], list[int]]]:
    """Text pairs -> id pairs ``(src_ids, tgt_ids)`` (no ``<bos>``/``<eos>``; batching adds them).

    Length limit: with ``max_len`` (the model's ``config.max_len``), each side is **truncated** to
    ``max_len - 1`` ids, so that with the ``<eos>`` (source, target output) or ``<bos>`` (target input) that
    :func:`make_batches` adds every row fits the model. A warning reports how many pairs were cut.
    """
    check_encoding_options(src_tokenizer, tgt_tokenizer, max_len)
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"pairs[{i}] must be a (source, target) pair of strings, got {pair!r}")
    src_ids = src_tokenizer.encode_batch([s for s, _ in pairs])
    tgt_ids = tgt_tokenizer.encode_batch([t for _, t in pairs])
    encoded = list(zip(src_ids, tgt_ids))
    if max_len is not None:
        limit = max_len - 1
        cut = sum(len(s) > limit or len(t) > limit for s, t in encoded)
        if cut:
            warnings.warn(
                f"encode_pairs: truncated {cut} of {len(encoded)} pairs to max_len - 1 = {limit} tokens per side",
                stacklevel=2,
            )
            encoded = [(s[:limit], t[:limit]) for s, t in encoded]
    return encoded


@dataclass
class Batch:
    """One training batch, right-padded with ``pad_id``.

    Attributes:
        src: ``[batch, src_len]`` long, source ids + ``<eos>`` then padding.
        tgt_in: ``[batch, tgt_len]`` long, ``<bos>`` + target ids (the decoder input, teacher forcing).
        tgt_out: ``[batch, tgt_len]`` long, target ids + ``<eos>`` (what the decoder must predict).
        num_src_tokens, num_tgt_tokens: non-padding tokens in ``src`` and ``tgt_out``.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    num_src_tokens: int
    num_tgt_tokens: int

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on ``device``."""
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(move(self.src), move(self.tgt_in), move(self.tgt_out), self.num_src_tokens, self.num_tgt_tokens)

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory, for faster asynchronous copies to a GPU."""
        return Batch(
            self.src.pin_memory(),
            self.tgt_in.pin_memory(),
            self.tgt_out.pin_memory(),
            self.num_src_tokens,
            self.num_tgt_tokens,
        )


def make_batches(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    max_tokens: int,
    *,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    shuffle: bool = True,
    seed: int = 0,
) -> list[Batch]:
    """Group id pairs into :class:`Batch` es of similar length holding at most ``max_tokens`` tokens per side.

    Length bucketing: pairs are sorted by the length of their longer side (then by source length) and cut
    greedily into batches whose padded size ``batch * max(src_len, tgt_len)`` (lengths with the added
    ``<eos>``/``<bos>``) stays within ``max_tokens``; a single pair longer than that gets a batch of its own.
    On Multi30k about 90% of the padded positions hold real tokens. With ``shuffle`` the pairs of equal
    length and the order of the batches are shuffled with ``seed``; the result depends only on the arguments.
    Without ``shuffle`` the batches come from shortest to longest.
    """
    check_positive_int("max_tokens", max_tokens)
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"pairs[{i}] must be a (src_ids, tgt_ids) pair, got {type(pair).__name__}")
        if isinstance(pair[0], str) or isinstance(pair[1], str):
            raise TypeError(
                f"pairs[{i}] holds text ({pair[0]!r:.40}, ...): make_batches takes token ids. Encode the sentence "
                "pairs first: make_batches(encode_pairs(pairs, src_tokenizer, tgt_tokenizer), max_tokens)"
            )
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    if shuffle:
        rng.shuffle(order)  # random order among pairs of equal length
    order.sort(key=lambda i: (max(len(pairs[i][0]), len(pairs[i][1])), len(pairs[i][0])))  # stable sort
    batches = [
        _collate([pairs[i] for i in chunk], pad_id, bos_id, eos_id)
        for chunk in _chunk_by_tokens(order, pairs, max_tokens)
    ]
    if shuffle:
        rng.shuffle(batches)
    return batches


def _chunk_by_tokens(order: list[int], pairs: list, max_tokens: int) -> list[list[int]]:
    """Cut the sorted indices ``order`` into runs whose padded size stays within ``max_tokens``."""
    chunks: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = max(len(pairs[i][0]), len(pairs[i][1])) + 1  # + <eos> / <bos>
        if current and (len(current) + 1) * max(longest, length) > max_tokens:
            chunks.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        chunks.append(current)
    return chunks


def pad_sequences(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Right-pad ``rows`` to one length -> ``[len(rows), longest]`` long tensor."""
    width = max(len(row) for row in rows)
    return torch.tensor([list(row) + [pad_id] * (width - len(row)) for row in rows], dtype=torch.long)


def _collate(pairs: list, pad_id: int, bos_id: int, eos_id: int) -> Batch:
    src = pad_sequences([list(s) + [eos_id] for s, _ in pairs], pad_id)
    tgt_in = pad_sequences([[bos_id] + list(t) for _, t in pairs], pad_id)
    tgt_out = pad_sequences([list(t) + [eos_id] for _, t in pairs], pad_id)
    return Batch(src, tgt_in, tgt_out, int((src != pad_id).sum()), int((tgt_out != pad_id).sum()))
