"""companion: the tested Transformer package that accompanies the book.

The public API mirrors the chapters: attention and masks (chapters 2-3), multi-head attention (chapter 4),
positional encodings (chapter 5), and the full encoder-decoder model (chapter 6).
"""

from .attention import MultiHeadAttention, causal_mask, fast_attention, padding_mask, scaled_dot_product_attention
from .model import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    KVCache,
    Transformer,
    TransformerConfig,
)
from .positional import LearnedPositionalEncoding, PositionalEncoding, sinusoidal_encoding

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "fast_attention",
    "causal_mask",
    "padding_mask",
    "MultiHeadAttention",
    "sinusoidal_encoding",
    "PositionalEncoding",
    "LearnedPositionalEncoding",
    "TransformerConfig",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "KVCache",
    "Transformer",
    "__version__",
]
