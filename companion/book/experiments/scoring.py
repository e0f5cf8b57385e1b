"""Attention scoring functions from before the Transformer, and the softmax step they share.

An attention layer does two things: it *scores* every key against every query, then turns each row of
scores into weights with a softmax and averages the values with them. The first step is where the
historical variants differ; the second step is the same for all of them.

* :class:`AdditiveScore` - Bahdanau et al. (2014): :math:`e_{ij} = v^\\top \\tanh(W_q q_i + W_k k_j)`,
  a one-hidden-layer network applied to every (query, key) pair ("additive" or "concat" attention).
* :class:`GeneralScore` - Luong et al. (2015), "general": :math:`e_{ij} = q_i^\\top W k_j`.
* :class:`DotScore` - Luong et al. (2015), "dot": :math:`e_{ij} = q_i^\\top k_j`; with ``scaled=True`` it is the
  Transformer's scaled dot product :math:`q_i^\\top k_j / \\sqrt{d_k}` (Vaswani et al., 2017).
* :func:`attend` - softmax over the keys (with an optional boolean mask, True = may attend) and the
  weighted average of the values.

All modules are batch-first: ``query [batch, m, d_q]``, ``keys [batch, n, d_k]`` give
``scores [batch, m, n]``, one row per query.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..._validation import check_bool, check_last_dim, check_positive_int, check_tensor
from ...attention import masked_softmax

__all__ = ["AdditiveScore", "GeneralScore", "DotScore", "attend"]


def _check_query_keys(query: object, keys: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Both must be 3-D ``[batch, len, dim]`` tensors with the same batch size and at least one position."""
    query = check_tensor("query", query, dims=3)
    keys = check_tensor("keys", keys, dims=3)
    if query.shape[0] != keys.shape[0]:
        raise ValueError(
            f"query and keys must have the same batch size, got query {tuple(query.shape)} and keys {tuple(keys.shape)}"
        )
    if query.shape[1] == 0 or keys.shape[1] == 0:
        raise ValueError(
            f"query and keys must hold at least one position, got query {tuple(query.shape)} "
            f"and keys {tuple(keys.shape)}"
        )
    return query, keys


class AdditiveScore(nn.Module):
    r"""Bahdanau's additive score :math:`e_{ij} = v^\top \tanh(W_q q_i + W_k k_j)`.

    ``W_q`` is ``[hidden_dim, query_dim]``, ``W_k`` is ``[hidden_dim, key_dim]`` and ``v`` is ``[hidden_dim]``
    (no biases, as in the paper's appendix). Queries and keys may have different widths.

    The key projection does not depend on the query, so a decoder that scores the same keys at every step
    can compute it once with :meth:`project_keys` and then call :meth:`score_projected` per step.

    Args:
        query_dim: width ``d_q`` of the queries.
        key_dim: width ``d_k`` of the keys.
        hidden_dim: width of the hidden layer (the paper's ``n'``).
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_dim = check_positive_int("query_dim", query_dim)
        self.key_dim = check_positive_int("key_dim", key_dim)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)  # W_q
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=False)  # W_k
        self.v = nn.Parameter(torch.empty(hidden_dim))
        nn.init.uniform_(self.v, -1.0 / math.sqrt(hidden_dim), 1.0 / math.sqrt(hidden_dim))

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """``W_k k_j`` for every key: ``[batch, n, key_dim]`` -> ``[batch, n, hidden_dim]``."""
        check_tensor("keys", keys, dims=3)
        check_last_dim("keys", keys, self.key_dim, what="key_dim")
        return self.key_proj(keys)

    def score_projected(self, query: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        """Scores ``[batch, m, n]`` from queries ``[batch, m, query_dim]`` and :meth:`project_keys` output."""
        query, projected_keys = _check_query_keys(query, projected_keys)
        check_last_dim("query", query, self.query_dim, what="query_dim")
        check_last_dim("projected_keys", projected_keys, self.hidden_dim, what="hidden_dim")
        hidden = torch.tanh(self.query_proj(query)[:, :, None, :] + projected_keys[:, None, :, :])  # [b, m, n, h]
        return hidden @ self.v  # [batch, m, n]

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Scores ``[batch, m, n]`` for ``query [batch, m, query_dim]`` and ``keys [batch, n, key_dim]``."""
        query, keys = _check_query_keys(query, keys)
        check_last_dim("query", query, self.query_dim, what="query_dim")
        return self.score_projected(query, self.project_keys(keys))


class GeneralScore(nn.Module):
    r"""Luong's "general" (bilinear) score :math:`e_{ij} = q_i^\top W k_j` with ``W`` of shape ``[query_dim, key_dim]``.

    Args:
        query_dim: width ``d_q`` of the queries.
        key_dim: width ``d_k`` of the keys.
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim = check_positive_int("query_dim", query_dim)
        self.key_dim = check_positive_int("key_dim", key_dim)
        # nn.Linear(key_dim, query_dim) stores a [query_dim, key_dim] weight and maps k_j to W k_j.
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    @property
    def weight(self) -> torch.Tensor:
        """The bilinear matrix ``W`` ``[query_dim, key_dim]``."""
        return self.key_proj.weight

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Scores ``[batch, m, n]`` for ``query [batch, m, query_dim]`` and ``keys [batch, n, key_dim]``."""
        query, keys = _check_query_keys(query, keys)
        check_last_dim("query", query, self.query_dim, what="query_dim")
        check_last_dim("keys", keys, self.key_dim, what="key_dim")
        return query @ self.key_proj(keys).transpose(1, 2)


class DotScore(nn.Module):
    r"""Dot-product score :math:`e_{ij} = q_i^\top k_j`, divided by :math:`\sqrt{d_k}` when ``scaled`` is True.

    Luong's "dot" score (``scaled=False``) and the Transformer's scaled dot product (``scaled=True``).
    It has no parameters, so queries and keys must have the same width.
    """

    def __init__(self, scaled: bool = False) -> None:
        super().__init__()
        self.scaled = check_bool("scaled", scaled, error=TypeError)

    def extra_repr(self) -> str:
        return f"scaled={self.scaled}"

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Scores ``[batch, m, n]`` for ``query [batch, m, d]`` and ``keys [batch, n, d]``."""
        query, keys = _check_query_keys(query, keys)
        check_last_dim("keys", keys, query.shape[-1], what="d (the query width)")
        scores = query @ keys.transpose(1, 2)
        return scores / math.sqrt(query.shape[-1]) if self.scaled else scores


def attend(
    scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax the scores over the keys and average the values with the resulting weights.

    Args:
        scores: ``[batch, m, n]`` from any scoring module.
        values: ``[batch, n, d_v]``, one value per key.
        mask: optional boolean mask broadcastable to ``[batch, m, n]``; True = may attend (e.g.
            ``[batch, 1, n]`` hides padded source positions from every query).

    Returns:
        ``(context [batch, m, d_v], weights [batch, m, n])``. Each row of ``weights`` sums to 1, except a row
        whose keys are all masked, which is all zeros (and its context is the zero vector), never NaN.
    """
    scores = check_tensor("scores", scores, dims=3)
    values = check_tensor("values", values, dims=3)
    if values.shape[0] != scores.shape[0] or values.shape[1] != scores.shape[2]:
        raise ValueError(
            "values must be [batch, n, d_v] with the batch size and n (number of keys) of scores "
            f"[batch, m, n], got scores {tuple(scores.shape)} and values {tuple(values.shape)}"
        )
    if mask is not None:
        check_tensor("mask", mask, dims=(2, 3))
    weights = masked_softmax(scores, mask)  # the softmax step of every attention in the package
    return weights @ values, weights
