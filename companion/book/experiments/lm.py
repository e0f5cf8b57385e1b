"""A small decoder-only (GPT-style) Transformer language model, used by chapter 3 to show what masking buys.

A decoder-only language model is the encoder stack of :mod:`companion.model` with one change: each position may
attend only to itself and to earlier positions (the causal mask of Vaswani et al., 2017, section 3.2.3). It
reads a character sequence ``[batch, seq]`` and predicts, at every position t, the token at t + 1.

``LanguageModelConfig(causal=False)`` builds the *broken* variant with full self-attention. Under teacher
forcing its position t can look at token t + 1, the very token it is asked to predict, so its training loss
collapses toward zero while it learns nothing usable for generation, where the future does not exist yet.

The module holds the pieces chapter 3 needs: a character tokenizer, the configuration, the model (with
``generate``), a seeded training loop, and two losses that tell the two variants apart:
:func:`teacher_forced_loss` (one pass over the whole sequence, what training minimises) and
:func:`left_to_right_loss` (each token predicted from its prefix only, as in generation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..._validation import check_bool, check_integer, check_number, check_positive_int, check_token_ids
from ...attention import causal_mask, padding_mask
from ...data import PAD_ID, SPECIAL_TOKENS, Tokenizer
from ...model import Encoder, TransformerConfig, eval_mode
from ...positional import LearnedPositionalEncoding, PositionalEncoding
from .training import fit, warmup_cosine_schedule

__all__ = [
    "CharTokenizer",
    "encode_sequences",
    "LanguageModelConfig",
    "DecoderOnlyLM",
    "teacher_forced_loss",
    "left_to_right_loss",
    "train_language_model",
]


class CharTokenizer(Tokenizer):
    """Character-level tokenizer with the special ids of :mod:`companion.data` (``<pad>=0, <unk>=1, <bos>=2,
    <eos>=3``) followed by one id per character of the alphabet. Unseen characters map to ``<unk>``.

    Build it from a corpus with :meth:`build`. Like every :class:`companion.data.tokenizers.Tokenizer`,
    ``encode`` adds no ``<bos>``/``<eos>`` (:func:`encode_sequences` does) and ``decode`` stops at the first ``<eos>``.
    """

    def __init__(self, characters: Iterable[str]) -> None:
        chars = list(characters)
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"characters must be single-character strings, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("characters must not repeat")
        self.itos: list[str] = list(SPECIAL_TOKENS) + chars
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(chars, start=len(SPECIAL_TOKENS))}

    @classmethod
    def build(cls, texts: Iterable[str]) -> CharTokenizer:
        """The tokenizer whose alphabet is every character of ``texts``, in sorted order."""
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of strings, got a single string")
        alphabet: set[str] = set()
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
            alphabet.update(text)
        return cls(sorted(alphabet))

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """Token ids of the characters of ``text`` (no ``<bos>``/``<eos>``)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [self.stoi.get(c, self.unk_id) for c in text]

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Text of ``ids``: stops at the first ``<eos>``, skips ``<pad>``/``<bos>``, writes ``<unk>`` as is."""
        return "".join(self.itos[i] for i in self._content_ids(ids))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description; :meth:`from_dict` rebuilds the tokenizer."""
        return {"type": "char", "characters": "".join(self.itos[len(SPECIAL_TOKENS) :])}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CharTokenizer:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(values, dict) or values.get("type") != "char":
            raise ValueError(f"values must be a dict from CharTokenizer.to_dict() with type 'char', got {values!r}")
        return cls(values["characters"])


def encode_sequences(tokenizer: Tokenizer, texts: Sequence[str], max_len: int) -> torch.Tensor:
    """Language-model training rows ``[len(texts), max_len]``: ``<bos> ids <eos>``, right-padded with ``<pad>``.

    A text with more than ``max_len - 2`` tokens is cut to its first ``max_len`` ids (losing its ``<eos>``).
    """
    check_positive_int("max_len", max_len)
    if isinstance(texts, str) or len(texts) == 0:
        raise ValueError("texts must be a non-empty sequence of strings")
    rows = torch.full((len(texts), max_len), tokenizer.pad_id, dtype=torch.long)
    for row, text in enumerate(texts):
        ids = ([tokenizer.bos_id] + tokenizer.encode(text) + [tokenizer.eos_id])[:max_len]
        rows[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return rows


@dataclass
class LanguageModelConfig:
    """Hyper-parameters of :class:`DecoderOnlyLM` (defaults: a tiny model that trains in seconds on a CPU).

    Attributes:
        vocab_size: number of token ids.
        d_model, num_heads, num_layers, d_ff: width, heads, depth and feed-forward width.
        dropout: dropout on embeddings and sub-layer outputs.
        max_len: longest sequence the model accepts (size of the positional table).
        causal: True for causal self-attention (a real language model); False for full self-attention,
            the broken variant that sees the future during training.
        pad_id: padding id; keys holding it are masked, and targets holding it are ignored by the losses.
        norm_first: pre-LN layers (GPT-2 style, the default here) or the paper's post-LN.
        positional: "sinusoidal" (the paper) or "learned".
        tie_output: the output projection reuses the embedding matrix (Press and Wolf, 2017).
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.0
    max_len: int = 128
    causal: bool = True
    pad_id: int = PAD_ID
    norm_first: bool = True
    positional: str = "sinusoidal"
    tie_output: bool = True

    def __post_init__(self) -> None:
        check_bool("causal", self.causal, error=TypeError)
        check_integer(
            f"pad_id (a token id of vocab_size={self.vocab_size})", self.pad_id, minimum=0, maximum=self.vocab_size - 1
        )
        self.layer_config()  # validates every shared field with TransformerConfig's checks

    def layer_config(self) -> TransformerConfig:
        """The :class:`~companion.model.TransformerConfig` that builds this model's layers (encoder-style, no
        decoder)."""
        return TransformerConfig(
            src_vocab_size=self.vocab_size,
            tgt_vocab_size=self.vocab_size,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_encoder_layers=self.num_layers,
            num_decoder_layers=0,
            d_ff=self.d_ff,
            dropout=self.dropout,
            max_len=self.max_len,
            pad_id=self.pad_id,
            norm_first=self.norm_first,
            positional=self.positional,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> LanguageModelConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise a ValueError naming them."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown LanguageModelConfig fields: {unknown}")
        return cls(**values)


class DecoderOnlyLM(nn.Module):
    """Token embeddings + positions -> :class:`~companion.model.Encoder` stack under a self-attention mask -> logits.

    The attention mask of every layer is the causal mask (when ``config.causal``) combined with a key-padding
    mask that hides ``config.pad_id`` tokens: position i may attend to j when j <= i (causal only) and token j
    is not padding.
    """

    def __init__(self, config: LanguageModelConfig) -> None:
        super().__init__()
        if not isinstance(config, LanguageModelConfig):
            raise TypeError(f"config must be a LanguageModelConfig, got {type(config).__name__}")
        self.config = config
        layers = config.layer_config()
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        position = PositionalEncoding if config.positional == "sinusoidal" else LearnedPositionalEncoding
        self.pos = position(config.d_model, config.max_len, config.dropout)
        self.blocks = Encoder(layers)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=not config.tie_output)
        self._reset_parameters()
        if config.tie_output:
            self.head.weight = self.embed.weight

    def _reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if name.startswith("embed"):
                nn.init.normal_(p, mean=0.0, std=self.config.d_model**-0.5)
            elif p.dim() > 1 and not name.startswith("pos"):
                nn.init.xavier_uniform_(p)

    def attention_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """Boolean mask ``[batch, 1, seq, seq]`` (True = may attend) used by every layer for ``tokens``."""
        n = tokens.shape[1]
        keys = padding_mask(tokens, self.config.pad_id)  # [batch, 1, 1, seq]
        if self.config.causal:
            return keys & causal_mask(n, device=tokens.device)  # [batch, 1, seq, seq]
        return keys.expand(-1, -1, n, -1)

    def _check_tokens(self, name: str, tokens: object) -> torch.Tensor:
        tokens = check_token_ids(name, tokens, self.config.vocab_size)
        if tokens.shape[1] > self.config.max_len:
            raise ValueError(f"{name} has {tokens.shape[1]} positions, more than max_len={self.config.max_len}")
        return tokens

    def forward(self, tokens: torch.Tensor, need_weights: bool = False):
        """Next-token logits ``[batch, seq, vocab]`` for token ids ``tokens [batch, seq]``.

        With ``need_weights`` returns ``(logits, [weights [batch, heads, seq, seq] per layer])``.
        """
        tokens = self._check_tokens("tokens", tokens)
        x = self.pos(self.embed(tokens) * math.sqrt(self.config.d_model))
        x, maps = self.blocks(x, self.attention_mask(tokens), need_weights)
        logits = self.head(x)
        return (logits, maps) if need_weights else logits

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Extend ``prompt [batch, t]`` by ``max_new_tokens`` tokens, one at a time.

        Each step runs the model on everything generated so far and picks the next token from the logits of
        the last position: the arg-max when ``greedy``, otherwise a sample from ``softmax(logits / temperature)``
        drawn with ``generator``. Returns ``[batch, t + max_new_tokens]`` (the prompt included). The padding id
        is never produced. Dropout is switched off during generation.
        """
        prompt = self._check_tokens("prompt", prompt)
        check_positive_int("max_new_tokens", max_new_tokens)
        temperature = check_number("temperature", temperature, low=0, low_inclusive=False)
        total = prompt.shape[1] + max_new_tokens
        if total > self.config.max_len:
            raise ValueError(
                f"prompt length {prompt.shape[1]} + max_new_tokens {max_new_tokens} = {total} exceeds "
                f"max_len={self.config.max_len}"
            )
        tokens = prompt
        with eval_mode(self):
            for _ in range(max_new_tokens):
                logits = self(tokens)[:, -1, :].clone()  # [batch, vocab]
                logits[:, self.config.pad_id] = float("-inf")
                if greedy:
                    next_token = logits.argmax(dim=-1, keepdim=True)
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    next_token = torch.multinomial(probs, 1, generator=generator)
                tokens = torch.cat([tokens, next_token], dim=1)
        return tokens


def _shifted(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``tokens[:, :-1]`` and next-token targets ``tokens[:, 1:]``."""
    if tokens.shape[1] < 2:
        raise ValueError(f"sequences need at least 2 positions to predict a next token, got {tuple(tokens.shape)}")
    return tokens[:, :-1], tokens[:, 1:]


@torch.no_grad()
def teacher_forced_loss(model: DecoderOnlyLM, sequences: torch.Tensor, batch_size: int = 256) -> float:
    """Mean next-token cross-entropy (nats per token) with the whole sequence fed at once, as in training.

    ``sequences [num, seq]`` are right-padded token ids; padding targets are ignored.
    """
    sequences = model._check_tokens("sequences", sequences)
    check_positive_int("batch_size", batch_size)
    total, count = 0.0, 0
    pad = model.config.pad_id
    with eval_mode(model):
        for batch in sequences.split(batch_size):
            inputs, targets = _shifted(batch)
            logits = model(inputs)
            total += F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad, reduction="sum").item()
            count += int((targets != pad).sum())
    return total / max(count, 1)


@torch.no_grad()
def left_to_right_loss(model: DecoderOnlyLM, sequences: torch.Tensor) -> float:
    """Mean next-token cross-entropy when token t+1 is predicted from the prefix ``tokens[:, :t+1]`` only.

    This is the situation of generation: the future is not there to look at. For a causal model it equals
    :func:`teacher_forced_loss` (causality makes the last position of a prefix compute exactly what it computes
    inside the full sequence); for a non-causal model it is the honest measure. Costs one forward pass per
    position.
    """
    sequences = model._check_tokens("sequences", sequences)
    inputs, targets = _shifted(sequences)
    pad = model.config.pad_id
    total = 0.0
    with eval_mode(model):
        for t in range(inputs.shape[1]):
            logits = model(inputs[:, : t + 1])[:, -1, :]  # [num, vocab]
            total += F.cross_entropy(logits, targets[:, t], ignore_index=pad, reduction="sum").item()
    return total / max(int((targets != pad).sum()), 1)


def train_language_model(
    model: DecoderOnlyLM,
    sequences: torch.Tensor,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    warmup: int = 20,
) -> list[float]:
    """Train ``model`` on next-token prediction with Adam and return the training loss of every step.

    Args:
        model: the language model (trained in place).
        sequences: right-padded token ids ``[num, seq]``; padding targets are ignored.
        steps: number of optimisation steps; each draws a random batch of ``batch_size`` rows.
        lr: peak learning rate, reached after ``warmup`` linear warm-up steps, then decayed with a cosine.
        seed: seeds the batch order (and the dropout masks, through the global generator).

    Returns:
        the mean cross-entropy (nats per token) of each step's batch, ``steps`` floats.

    The loop is :func:`companion.book.experiments.training.fit` (Adam with betas 0.9 and 0.98, gradient norm clipped to
    1, :func:`~companion.book.experiments.training.warmup_cosine_schedule`); the model is left in eval mode.
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    sequences = model._check_tokens("sequences", sequences)
    _shifted(sequences)
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    schedule = warmup_cosine_schedule(warmup, steps)
    pad = model.config.pad_id

    def random_batch(generator: torch.Generator) -> torch.Tensor:
        batch = sequences[torch.randint(0, sequences.shape[0], (batch_size,), generator=generator)]
        return batch[:, : int((batch != pad).sum(dim=1).max())]  # drop all-padding columns

    def next_token_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
        inputs, targets = _shifted(batch)
        return F.cross_entropy(model(inputs).transpose(1, 2), targets, ignore_index=pad)

    return fit(
        model,
        random_batch,
        next_token_loss,
        steps,
        lr=lr,
        seed=seed,
        seed_global_rng=True,
        betas=(0.9, 0.98),
        schedule=schedule,
        clip_norm=1.0,
    )
