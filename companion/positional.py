"""Positional encodings (Vaswani et al., 2017, section 3.5).

Self-attention is permutation-equivariant: without position information the encoder sees a bag of tokens.
The paper adds a fixed sinusoidal signal to the embeddings,

    PE[pos, 2i]   = sin(pos / 10000^(2i / d_model))
    PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model)),

so that sines and cosines of one frequency sit side by side (interleaved) and the wavelengths form a
geometric progression from 2*pi to 10000*2*pi. A learned table is the alternative the paper compared
(Table 3, row E).
"""

from __future__ import annotations

import torch
from torch import nn

from ._dropout import Dropout
from ._validation import check_fraction, check_last_dim, check_positive_int, check_tensor

__all__ = ["sinusoidal_encoding", "PositionalEncoding", "LearnedPositionalEncoding"]


def sinusoidal_encoding(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's sinusoidal table, ``[num_positions, d_model]`` (float32).

    Column ``2i`` holds ``sin(pos / base**(2i/d_model))`` and column ``2i+1`` the cosine of the same angle.
    """
    check_positive_int("num_positions", num_positions)
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal encodings (sin/cos pairs), got {d_model}")
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]  # [num_positions, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # [d_model / 2]
    angle = position / base ** (two_i / d_model)  # [num_positions, d_model / 2]
    table = torch.empty(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


class _AddPositions(nn.Module):
    """Shared forward of the two encodings: ``dropout(x + table[start : start + seq])``."""

    def __init__(self, d_model: int, max_len: int, dropout: float) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.max_len = check_positive_int("max_len", max_len)
        check_fraction("dropout", dropout)
        self.dropout = Dropout(dropout)

    def table(self) -> torch.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Add positions ``start .. start+seq-1`` to ``x [batch, seq, d_model]`` and apply dropout."""
        check_tensor("x", x, dims=3)
        check_last_dim("x", x, self.d_model)
        if start < 0:
            raise ValueError(f"start must be a position >= 0, got {start}")
        end = start + x.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"positions {start}..{end - 1} exceed max_len={self.max_len}; raise max_len in the config "
                "or shorten the sequence"
            )
        return self.dropout(x + self.table()[start:end].to(x.dtype))


class PositionalEncoding(_AddPositions):
    """Adds the fixed sinusoidal encoding to embeddings ``[batch, seq, d_model]``, then dropout."""

    pe: torch.Tensor  # [max_len, d_model], a buffer

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.1) -> None:
        super().__init__(d_model, max_len, dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def table(self) -> torch.Tensor:
        """The fixed sinusoidal table ``[max_len, d_model]``."""
        return self.pe


class LearnedPositionalEncoding(_AddPositions):
    """Adds a learned position embedding (one trainable ``d_model`` vector per position), then dropout.

    The table starts as independent normal entries with standard deviation ``1/sqrt(2)``: the root-mean-square
    of the sinusoidal table (the mean of sin^2 + cos^2 over a pair is 1/2), so both encodings start on the
    same scale as each other and as the token embeddings scaled by ``sqrt(d_model)`` (standard deviation 1 in
    :class:`~companion.model.Transformer`). A much smaller start (e.g. ``d_model**-0.5``) leaves the model
    nearly blind to position early in training; on the small copy task of chapter 5 it learned noticeably
    more slowly. Rows of positions that never occur in training receive no gradient and keep these values.
    """

    init_std = 2.0**-0.5

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.1) -> None:
        super().__init__(d_model, max_len, dropout)
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * self.init_std)

    def table(self) -> torch.Tensor:
        """The learned table ``[max_len, d_model]`` (a parameter)."""
        return self.weight
