"""The named presets (tiny, small, base, big): one table for the model shape and the training settings of each.

``PRESETS[name].model`` holds :class:`~companion.model.TransformerConfig` fields (read by
``TransformerConfig.from_preset``, ``.base`` and ``.big``), ``.train`` :class:`~companion.train.TrainConfig`
fields and ``.data`` the batching of a run (``max_tokens``); ``companion train --preset NAME`` reads all three, and
every flag given explicitly overrides its preset value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "Preset",
    "PRESETS",
    "preset",
    "CHECKPOINTS_PER_BUDGET",
    "DEFAULT_AVERAGE_LAST",
    "default_save_every_minutes",
]

# The checkpoint setting of ``companion train`` with a --max-minutes budget: a checkpoint every budget/30 minutes,
# of which the last 5 are averaged (the paper's checkpoint averaging), so that the average spans the run's last
# 4/30. Chosen on the validation split with bench/checkpoint_spacing.py (one run per direction with a checkpoint
# every 0.2 minutes, averages of five at several spacings; 2-core Intel Xeon): at 12 minutes checkpoints 0.4
# minutes apart (budget/30) scored 39.24 de-en and 36.27 en-de against 38.77 and 35.14 at 0.6 (budget/20) and 38.09
# and 35.10 at 1 minute, the fixed default until 2026-12-05 (checkpoint_spacing_12min_xeon.json): a short run is
# still improving fast, and older weights pull it back. At 20 minutes every spacing from 0.5 to 1.33 minutes
# scored within 0.22 de-en and 0.52 en-de; 0.67 (budget/30) gave 40.09 / 38.30 against 40.22 / 38.26 at one a
# minute (checkpoint_spacing_20min_xeon.json, checkpoint_spacing_20min_en-de_xeon.json).
CHECKPOINTS_PER_BUDGET = 30
DEFAULT_AVERAGE_LAST = 5


def default_save_every_minutes(max_minutes: float) -> float:
    """Minutes between the checkpoints of a run with a ``max_minutes`` budget: ``max_minutes / 30``."""
    return max_minutes / CHECKPOINTS_PER_BUDGET


@dataclass(frozen=True)
class Preset:
    """One named setting: ``model`` (TransformerConfig fields), ``train`` (TrainConfig fields), ``data`` (batching)."""

    model: Mapping[str, Any]
    train: Mapping[str, Any]
    data: Mapping[str, Any]

    def describe(self) -> str:
        """One line for ``--help``: ``d_model=128 layers=2 ... max_tokens=1200 warmup=400 lr_factor=1.0``."""
        m = self.model
        return (
            f"d_model={m['d_model']} layers={m['num_encoder_layers']} d_ff={m['d_ff']} heads={m['num_heads']} "
            f"dropout={m['dropout']} {'pre-LN' if m['norm_first'] else 'post-LN'} "
            + " ".join(f"{k}={v}" for k, v in {**self.data, **self.train}.items())
        )


def _preset(model: dict[str, Any], train: dict[str, Any], data: dict[str, Any]) -> Preset:
    return Preset(MappingProxyType(model), MappingProxyType(train), MappingProxyType(data))


def _shape(d_model: int, heads: int, layers: int, d_ff: int, dropout: float) -> dict[str, Any]:
    return dict(
        d_model=d_model,
        num_heads=heads,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        d_ff=d_ff,
        dropout=dropout,
        norm_first=False,
    )


PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        # a few seconds on a laptop CPU: tests and quick starts
        "tiny": _preset(_shape(64, 4, 2, 256, 0.1), dict(warmup=200, lr_factor=1.0), dict(max_tokens=2000)),
        # Multi30k on 2 CPU cores in ~20 minutes (bench/multi30k.py: many small steps beat a wider model). Batches of
        # 1,200 tokens beat 600 on the validation split in a 20-minute budget, both directions, three comparisons
        # on two days (bench/multi30k_select.py, bench/results/selection_multi30k_cpu_2026-12-0*.json); 600 until
        # 2026-12-03, the value the shipped models were trained with (their checkpoints' args record it).
        "small": _preset(_shape(128, 4, 2, 512, 0.1), dict(warmup=400, lr_factor=1.0), dict(max_tokens=1200)),
        # the paper's base model (Table 3): 65M parameters with a 37k shared vocabulary
        "base": _preset(_shape(512, 8, 6, 2048, 0.1), dict(warmup=4000, lr_factor=1.0), dict(max_tokens=25000)),
        # the paper's big model: 213M parameters
        "big": _preset(_shape(1024, 16, 6, 4096, 0.3), dict(warmup=4000, lr_factor=1.0), dict(max_tokens=25000)),
    }
)


def preset(name: str) -> Preset:
    """``PRESETS[name]``, or a ValueError listing the names."""
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)}, got {name!r}")
    return PRESETS[name]
