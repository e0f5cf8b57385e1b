"""companion: the tested Transformer package that accompanies the book *Attention, Executed*.

The package has three layers; each imports only from the ones below it.

1. **The library** (this top level, and every module directly under ``companion/``), in the order of the book:
   attention and masks (chapters 2-4: :func:`scaled_dot_product_attention`, :func:`fast_attention`,
   :func:`causal_mask`, :func:`padding_mask`, :class:`MultiHeadAttention`, :class:`AttentionCache`), positional
   encodings (chapter 5), the encoder-decoder model (:class:`TransformerConfig`, :class:`Transformer` and its
   layers), data, training, checkpoints and the pretrained model (the training chapter), decoding and evaluation
   (the decoding chapter), and the errors, all under :class:`CompanionError`. Plots (:mod:`companion.plots`),
   devices (:mod:`companion.devices`) and the ONNX export (:mod:`companion.export`) are imported from their
   modules.
2. **The runs** (:mod:`companion.runs`, and the command line ``companion train|translate|evaluate`` in
   :mod:`companion.cli`): one configured run, its output folder and its lock.
3. **The book's tooling** (:mod:`companion.book`): the chapters' experiment code (small RNNs, language models,
   probes, ...) in :mod:`companion.book.experiments` and the website's widgets in
   :mod:`companion.book.interactive`.

``import companion`` loads the library only; nothing in the library imports the runs or the book, and
``tests/unit/test_layers.py`` checks that.
"""

from __future__ import annotations

from ._version import __version__
from .attention import (
    AttentionCache,
    MultiHeadAttention,
    causal_mask,
    fast_attention,
    padding_mask,
    scaled_dot_product_attention,
)
from .checkpoint import load_checkpoint, model_from_checkpoint, tokenizers_from_checkpoint
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
from .errors import (
    CheckpointError,
    CompanionError,
    ConfigError,
    DataError,
    DataUnavailableError,
    DeviceUnavailableError,
    NonFiniteOutputError,
    PretrainedUnavailableError,
    RunError,
    RunLockedError,
    TrainingDivergedError,
)
from .evaluate import corpus_bleu, corpus_chrf, evaluate_translation, perplexity
from .model import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    KVCache,
    Transformer,
    TransformerConfig,
    eval_mode,
)
from .positional import LearnedPositionalEncoding, PositionalEncoding, sinusoidal_encoding
from .pretrained import PretrainedModel, load_pretrained
from .train import TrainConfig, Trainer, label_smoothed_loss, noam_lr

__all__ = [
    # attention (chapters 2-4)
    "scaled_dot_product_attention",
    "fast_attention",
    "causal_mask",
    "padding_mask",
    "MultiHeadAttention",
    "AttentionCache",
    # positions (chapter 5)
    "sinusoidal_encoding",
    "PositionalEncoding",
    "LearnedPositionalEncoding",
    # the model
    "TransformerConfig",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "KVCache",
    "Transformer",
    "eval_mode",
    # data
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "PAD_ID",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "Tokenizer",
    "WordTokenizer",
    "SubwordTokenizer",
    "tokenizer_from_dict",
    "load_multi30k",
    "encode_pairs",
    "Batch",
    "make_batches",
    "synthetic_pairs",
    # training and checkpoints
    "noam_lr",
    "label_smoothed_loss",
    "TrainConfig",
    "Trainer",
    "load_checkpoint",
    "model_from_checkpoint",
    "tokenizers_from_checkpoint",
    "load_pretrained",
    "PretrainedModel",
    # decoding and evaluation
    "greedy_decode",
    "beam_search",
    "translate",
    "translate_ids",
    "length_penalty",
    "score_hypotheses",
    "corpus_bleu",
    "corpus_chrf",
    "perplexity",
    "evaluate_translation",
    # errors
    "CompanionError",
    "CheckpointError",
    "DataUnavailableError",
    "DeviceUnavailableError",
    "TrainingDivergedError",
    "RunError",
    "RunLockedError",
    "ConfigError",
    "DataError",
    "NonFiniteOutputError",
    "PretrainedUnavailableError",
    "__version__",
]
