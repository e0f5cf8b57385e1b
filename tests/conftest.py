"""Shared fixtures for the companion tests: deterministic seeding and tiny model configurations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from companion import Transformer, TransformerConfig

TINY = dict(
    src_vocab_size=23,
    tgt_vocab_size=19,
    d_model=16,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=32,
    dropout=0.1,
    max_len=64,
    pad_id=0,
)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """One intra-op thread for the test: tiny models run many small ops, and on a shared 2-core CPU several
    threads per op mostly wait for each other. Modules that want it everywhere use ``pytestmark``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_config() -> Callable[..., TransformerConfig]:
    """Factory for a tiny :class:`TransformerConfig` (d_model=16, 4 heads, 2+2 layers); keywords override."""

    def make(**overrides: Any) -> TransformerConfig:
        return TransformerConfig(**{**TINY, **overrides})

    return make


@pytest.fixture
def tiny_model(tiny_config) -> Callable[..., Transformer]:
    """Factory for a tiny :class:`Transformer` in eval mode (dropout off); keywords override the config."""

    def make(**overrides: Any) -> Transformer:
        return Transformer(tiny_config(**overrides)).eval()

    return make


def random_tokens(batch: int, length: int, vocab_size: int, low: int = 1) -> torch.Tensor:
    """Random token ids in ``[low, vocab_size)`` (``low=1`` keeps the pad id 0 out)."""
    return torch.randint(low, vocab_size, (batch, length))


@pytest.fixture
def tokens() -> Callable[..., torch.Tensor]:
    """Factory ``tokens(batch, length, vocab_size, low=1)`` for random non-pad token ids."""
    return random_tokens


def pytest_collection_modifyitems(config, items) -> None:
    """Everything under tests/integration/ and tests/book/ is slow by nature (subprocesses, builds, servers):
    mark it, so that ``make unit`` (``-m "not slow"``) stays the fast loop."""
    for item in items:
        parts = item.path.parts
        if "integration" in parts or ("book" in parts and "tests" in parts):
            item.add_marker(pytest.mark.slow)
