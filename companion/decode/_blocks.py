"""The best scores of each row, found block by block: the searches' per-step choices over the whole vocabulary.

A performance detail of the searches, not a concept of the book. Every decoding step picks, in each row of
scores ``[rows, n]`` (``n`` = the vocabulary, or beam size x vocabulary), the best entry (greedy search) or the few
best (beam search). On the CPUs we tried, PyTorch's ``max(dim).indices``, ``argmax`` and ``topk`` over a whole row
of thousands of scores are several times slower than a maximum without the index (``amax``), and they are paid at
every step. So both choices first take the maximum of each block of :data:`BLOCK` scores (a vectorised ``amax``),
choose among those few block maxima, and then search only inside the chosen blocks:

* :func:`first_argmax`: the first block holding the row's maximum, then the first maximum inside it, which is
  ``argmax``'s index (the first one where several tie);
* :func:`top_k`: the ``k`` best entries lie in the ``k`` blocks with the largest maxima (a block that holds one of
  them has a maximum at least as large, and no more than ``k - 1`` entries can beat it), so ``topk`` runs over
  those ``k`` blocks only. The same values and positions as ``torch.topk``, except that the order among exactly
  equal scores may differ (``torch.topk`` does not specify it either).

Both are exact; only the order of the work changes. On other devices (one kernel is fast there) and for rows of
fewer than two blocks they are the plain PyTorch calls.
"""

from __future__ import annotations

import torch

BLOCK = 64  # scores per block


def _worth_blocks(scores: torch.Tensor) -> bool:
    return scores.is_cpu and scores.shape[-1] >= 2 * BLOCK


def _block_maxima(scores: torch.Tensor) -> torch.Tensor:
    """``scores [rows, n]`` -> the maximum of each block of :data:`BLOCK` columns ``[rows, ceil(n / BLOCK)]`` (the
    last block may be shorter; a view of ``scores``, not a copy, is reduced)."""
    rows, n = scores.shape
    full = n // BLOCK
    maxima = scores[:, : full * BLOCK].reshape(rows, full, BLOCK).amax(dim=-1)
    if full * BLOCK == n:
        return maxima
    return torch.cat([maxima, scores[:, full * BLOCK :].amax(dim=-1, keepdim=True)], dim=1)


def _inside(scores: torch.Tensor, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores of the chosen ``blocks [rows, m]`` (block numbers): ``(values [rows, m * BLOCK], columns [rows,
    m * BLOCK])``, block by block in the given order; columns past the end of a short last block hold ``-inf``."""
    n = scores.shape[1]
    offsets = torch.arange(BLOCK, device=scores.device)
    columns = (blocks[:, :, None] * BLOCK + offsets).flatten(1)  # [rows, m * BLOCK]
    values = scores.gather(1, columns.clamp(max=n - 1))
    if n % BLOCK:
        values = values.masked_fill(columns >= n, float("-inf"))
    return values, columns


def first_argmax(scores: torch.Tensor) -> torch.Tensor:
    """``argmax(scores, dim=-1)`` of ``scores [rows, n]``: each row's column of its largest score, the first one
    where several tie. Returns ``[rows]`` (long)."""
    if not _worth_blocks(scores):
        return scores.max(dim=-1).indices
    best_block = _block_maxima(scores).max(dim=-1).indices  # [rows]: the first block holding the maximum
    values, columns = _inside(scores, best_block[:, None])
    return columns.gather(1, values.max(dim=-1, keepdim=True).indices).squeeze(1)


def top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(scores, k, dim=-1)`` of ``scores [rows, n]`` (``k <= n``): ``(values [rows, k]`` in descending
    order, ``columns [rows, k])``; the order among exactly equal scores may differ from ``torch.topk``'s."""
    if not _worth_blocks(scores):
        return scores.topk(k, dim=-1)
    maxima = _block_maxima(scores)
    blocks = maxima.topk(min(k, maxima.shape[1]), dim=-1).indices  # [rows, m]
    values, columns = _inside(scores, blocks)
    best, position = values.topk(k, dim=-1)
    chosen = columns.gather(1, position)
    if scores.shape[1] % BLOCK and bool((chosen >= scores.shape[1]).any()):
        return scores.topk(k, dim=-1)  # fewer than k scores above -inf in a row: a padded column came up
    return best, chosen
