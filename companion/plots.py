"""Plots for the book and for your own runs: attention maps per head, learning curves from ``metrics.jsonl``.

matplotlib is imported inside the functions, so ``import companion`` works without it (it comes with the
``plots`` extra). Every function returns the matplotlib object it drew on; call ``plt.show()`` (or save the
figure) yourself.

* :func:`token_labels`: token strings for the ids of a tokenizer (axis labels).
* :func:`plot_attention_heads`: one heatmap per head of a ``[heads, q_len, k_len]`` weight tensor, with the
  query tokens on the vertical axis and the key tokens on the horizontal axis.
* :func:`read_metrics` and :func:`plot_learning_curves`: the JSON-lines log that
  :class:`companion.train.Trainer` writes, as lists of records and as a figure.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._extras import import_optional
from ._validation import check_id_list, check_number, check_positive_int
from .data import SPECIAL_TOKENS, Tokenizer

__all__ = ["token_labels", "plot_attention_heads", "read_metrics", "plot_learning_curves"]


def token_labels(tokenizer: Tokenizer, ids: Sequence[int] | torch.Tensor) -> list[str]:
    """One readable string per id, for axis labels: special tokens by name, others as the tokenizer spells them.

    Unlike :meth:`~companion.data.tokenizers.Tokenizer.decode`, nothing is dropped: ``<bos>``, ``<eos>``, ``<pad>`` and
    ``<unk>`` appear where their ids are, so the labels line up with the rows of an attention matrix.
    """
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a companion Tokenizer, got {type(tokenizer).__name__}")
    ids = check_id_list("ids", ids, tokenizer.vocab_size)
    return [SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else tokenizer.decode([i]) for i in ids]


def _as_heads_array(weights: object):
    """``weights`` as a float numpy array ``[heads, q_len, k_len]`` (TypeError/ValueError otherwise)."""
    if isinstance(weights, torch.Tensor):
        array = weights.detach().float().cpu().numpy()
    elif isinstance(weights, np.ndarray):
        array = weights.astype(float)
    else:
        raise TypeError(
            f"weights must be a torch.Tensor or numpy array [heads, q_len, k_len], got {type(weights).__name__}"
        )
    if array.ndim != 3:
        hint = " (index the batch first, e.g. weights[0])" if array.ndim == 4 else ""
        raise ValueError(f"weights must have 3 dimensions [heads, q_len, k_len], got shape {array.shape}{hint}")
    if 0 in array.shape:
        raise ValueError(f"weights must not be empty, got shape {array.shape}")
    return array


def plot_attention_heads(
    weights: torch.Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    *,
    title: str | None = None,
    ncols: int = 4,
    panel_size: float = 2.8,
    xlabel: str = "key token",
    ylabel: str = "query token",
    vmax: float | None = 1.0,
):
    """One heatmap per attention head, with tokens on the axes; returns the matplotlib ``Figure``.

    Args:
        weights: ``[heads, q_len, k_len]`` attention weights of one sentence (rows are queries).
        query_tokens: ``q_len`` labels for the rows (vertical axis).
        key_tokens: ``k_len`` labels for the columns (horizontal axis).
        title: figure title (``suptitle``).
        ncols: panels per row; the heads fill ``ceil(heads / ncols)`` rows.
        panel_size: width of one panel in inches (the height follows the matrix's aspect ratio).
        xlabel, ylabel: axis labels of the panels.
        vmax: top of the shared colour scale (1 for probabilities); None scales to the largest weight.

    All panels share one colour scale from 0 to ``vmax`` and one colour bar, so heads can be compared.
    """
    plt = import_optional("matplotlib.pyplot", "plotting")

    array = _as_heads_array(weights)
    heads, q_len, k_len = array.shape
    query_tokens, key_tokens = list(query_tokens), list(key_tokens)
    if len(query_tokens) != q_len:
        raise ValueError(
            f"query_tokens must hold q_len={q_len} labels (weights {array.shape}), got {len(query_tokens)}"
        )
    if len(key_tokens) != k_len:
        raise ValueError(f"key_tokens must hold k_len={k_len} labels (weights {array.shape}), got {len(key_tokens)}")
    check_positive_int("ncols", ncols)
    check_number("panel_size (inches)", panel_size, low=0, low_inclusive=False)
    ncols = min(ncols, heads)
    nrows = math.ceil(heads / ncols)
    height = panel_size * max(q_len, 1) / max(k_len, 1)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(panel_size * ncols + 1.2, (height + 1.3) * nrows + 0.4),
        squeeze=False,
        layout="constrained",
    )
    top = float(array.max()) if vmax is None else vmax
    image = None
    for head in range(nrows * ncols):
        ax = axes[head // ncols][head % ncols]
        if head >= heads:
            ax.set_axis_off()
            continue
        image = ax.imshow(array[head], cmap="viridis", vmin=0.0, vmax=top, aspect="equal")
        ax.set_xticks(range(k_len), key_tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(q_len), query_tokens if head % ncols == 0 else [""] * q_len, fontsize=8)
        ax.set_title(f"head {head}", fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        if head % ncols == 0:
            ax.set_ylabel(ylabel, fontsize=9)
    assert image is not None, "no head was drawn"
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def read_metrics(path: str | os.PathLike) -> dict[str, list[dict[str, Any]]]:
    """The records of a ``metrics.jsonl`` log, grouped by their ``kind`` (``"train"``, ``"valid"``, ...).

    Each group keeps the file order. A torn last line (a run killed while writing) is skipped; any other line
    that is not a JSON object raises a ValueError with its line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path {str(path)!r} is not a metrics file (expected DIR/metrics.jsonl of a run)")
    lines = path.read_text(encoding="utf-8").splitlines()
    groups: dict[str, list[dict[str, Any]]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                continue  # torn last line
            raise ValueError(f"{path}:{number} is not valid JSON: {line[:80]!r}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number} must hold a JSON object, got {type(record).__name__}")
        groups.setdefault(str(record.get("kind", "train")), []).append(record)
    return groups


def plot_learning_curves(runs: Mapping[str, Any] | str | os.PathLike, *, metric: str = "nll", ax=None):
    """Training and validation curves of one or more runs on one axis; returns the matplotlib ``Axes``.

    Args:
        runs: label -> a ``metrics.jsonl`` path or the dict :func:`read_metrics` returns; or one run alone: what
            :func:`read_metrics` returns, or a ``metrics.jsonl`` path (labelled ``run``).
        metric: ``"nll"`` (per-token negative log-likelihood, nats), ``"loss"`` (the smoothed training
            loss) or ``"ppl"`` (perplexity, drawn on a log scale).
        ax: the axes to draw on (a new figure if None).

    Training records are drawn as lines, validation records (``valid_<metric>``) as markers of the same colour.
    """
    plt = import_optional("matplotlib.pyplot", "plotting")

    if metric not in ("nll", "loss", "ppl"):
        raise ValueError(f"metric must be 'nll', 'loss' or 'ppl', got {metric!r}")
    if isinstance(runs, (str, os.PathLike)) or (
        isinstance(runs, Mapping) and runs and all(isinstance(v, list) for v in runs.values())
    ):
        runs = {"run": runs}  # one run: its path, or read_metrics' groups (kind -> records)
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError(f"runs must be a non-empty mapping label -> metrics, got {runs!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for label, source in runs.items():
        groups = source if isinstance(source, Mapping) else read_metrics(source)
        train = [r for r in groups.get("train", []) if metric in r]
        valid = [r for r in groups.get("valid", []) if f"valid_{metric}" in r]
        if not train and not valid:
            raise ValueError(f"runs[{label!r}] holds no {metric!r} records")
        color = None
        if train:
            (line,) = ax.plot([r["step"] for r in train], [r[metric] for r in train], label=f"{label}: train")
            color = line.get_color()
        if valid:
            ax.plot(
                [r["step"] for r in valid],
                [r[f"valid_{metric}"] for r in valid],
                "o--",
                color=color,
                label=f"{label}: validation",
            )
    names = {
        "nll": "negative log-likelihood per token (nats)",
        "loss": "training loss per token (nats)",
        "ppl": "perplexity (log scale)",
    }
    if metric == "ppl":
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(names[metric])
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
