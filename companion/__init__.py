"""companion: the tested Transformer package that accompanies the book.

The public API mirrors the chapters: attention and masks (chapters 2-3), multi-head attention (chapter 4),
positional encodings (chapter 5), and the full encoder-decoder model (chapter 6).
"""

from .attention import (
    AttentionCache,
    MultiHeadAttention,
    causal_mask,
    fast_attention,
    padding_mask,
    scaled_dot_product_attention,
)
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
from .data import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    UNK,
    UNK_ID,
    Batch,
    DataUnavailableError,
    SubwordTokenizer,
    Tokenizer,
    WordTokenizer,
    encode_pairs,
    load_multi30k,
    make_batches,
    synthetic_pairs,
    tokenizer_from_dict,
)
from .decode import beam_search, greedy_decode, length_penalty, score_hypotheses, translate, translate_ids
from .evaluate import corpus_bleu, corpus_chrf, evaluate_translation, perplexity
from .train import TrainConfig, Trainer, label_smoothed_loss, noam_lr
from .scoring import AdditiveScore, DotScore, GeneralScore, attend
from .rnn import AttentionEncoderDecoder, EncoderDecoder, GRUEncoder
from .lm import CharTokenizer, DecoderOnlyLM, LanguageModelConfig

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "fast_attention",
    "causal_mask",
    "padding_mask",
    "MultiHeadAttention",
    "AttentionCache",
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
    # data (chapter 6)
    "PAD", "UNK", "BOS", "EOS", "PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID",
    "Tokenizer", "WordTokenizer", "SubwordTokenizer", "tokenizer_from_dict", "DataUnavailableError",
    "load_multi30k", "encode_pairs", "Batch", "make_batches", "synthetic_pairs",
    # decoding and evaluation
    "greedy_decode", "beam_search", "translate", "translate_ids", "length_penalty", "score_hypotheses",
    "corpus_bleu", "corpus_chrf", "perplexity", "evaluate_translation",
    # training
    "noam_lr", "label_smoothed_loss", "TrainConfig", "Trainer",
    # chapter 1: scoring functions and recurrent encoder-decoders; chapter 3: a decoder-only language model
    "AdditiveScore", "GeneralScore", "DotScore", "attend",
    "GRUEncoder", "EncoderDecoder", "AttentionEncoderDecoder",
    "CharTokenizer", "LanguageModelConfig", "DecoderOnlyLM",
    "__version__",
]
