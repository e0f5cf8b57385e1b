"""Recurrent encoder-decoders from before the Transformer: with and without (additive) attention.

Two small, batch-first GRU models for sequence-to-sequence tasks, built to be compared with each other:

* :class:`EncoderDecoder` - the "RNN Encoder-Decoder" of Cho et al. (2014), in the spirit of Sutskever et al.
  (2014): the encoder squeezes the whole source into **one fixed-size vector** ``c``; the decoder starts from
  ``c`` and also reads it at every step, but never sees the individual source positions.
* :class:`AttentionEncoderDecoder` - the "RNNsearch" model of Bahdanau et al. (2014): before emitting target
  token ``i`` the decoder scores every encoder state ``h_j`` against its previous state ``s_{i-1}`` with the
  additive score ``v^T tanh(W_q s_{i-1} + W_k h_j)`` (:class:`companion.book.experiments.scoring.AdditiveScore`),
  takes the softmax-weighted average ``c_i`` of the encoder states, and reads ``c_i`` instead of a single ``c``.

Both share :class:`GRUEncoder` (optionally bidirectional, padding-aware), teacher-forced ``forward`` for
training, step-by-step ``greedy_decode`` for inference, and the special token ids of
:mod:`companion.data` (``<pad>=0, <unk>=1, <bos>=2, <eos>=3``); real symbols are ``4 .. vocab_size - 1``.

:func:`synthetic_batch` makes copy, reversal and sorting tasks of controllable length (with
:func:`companion.data.synthetic.synthetic_pairs` and :func:`companion.data.batching.make_batches`),
:func:`train_seq2seq` trains either model on them (seeded, CPU-friendly), and :func:`accuracy_by_length`
measures greedy-decoding accuracy per source length.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..._validation import check_choice, check_integer, check_positive_int, check_token_ids
from ...data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    SYNTHETIC_TASKS,
    UNK_ID,
    Batch,
    make_batches,
    synthetic_pairs,
)
from .scoring import AdditiveScore, attend
from .training import fit

__all__ = [
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "FIRST_SYMBOL_ID",
    "GRUEncoder",
    "EncoderDecoder",
    "AttentionEncoderDecoder",
    "synthetic_batch",
    "train_seq2seq",
    "accuracy_by_length",
]

FIRST_SYMBOL_ID = len(SPECIAL_TOKENS)  # ids below this are <pad>, <unk>, <bos>, <eos>


# --------------------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------------------
def _source_lengths(src: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Lengths ``[batch]`` of right-padded sources; rejects empty rows and padding in the middle."""
    real = src != pad_id
    lengths = real.sum(dim=1)
    if (lengths == 0).any():
        row = int((lengths == 0).nonzero()[0])
        raise ValueError(f"src row {row} is all padding (pad_id={pad_id}); every source needs a real token")
    expected = torch.arange(src.shape[1], device=src.device)[None, :] < lengths[:, None]
    if not torch.equal(real, expected):
        row = int((real != expected).any(dim=1).nonzero()[0])
        raise ValueError(
            f"src must be right-padded (real tokens first, then pad_id={pad_id}), row {row} is {src[row].tolist()}"
        )
    return lengths


class GRUEncoder(nn.Module):
    """Embedding + (bi)directional GRU over a right-padded source.

    Args:
        vocab_size: source vocabulary size (ids ``0 .. vocab_size - 1``, with ``pad_id`` for padding).
        embed_dim: width of the token embeddings.
        hidden_dim: GRU width per direction.
        bidirectional: run a second GRU from right to left and concatenate (Bahdanau et al., 2014).
        pad_id: id of the padding token.

    ``output_dim`` is ``hidden_dim`` times the number of directions: the width of every encoder state and of
    the summary vector. The right-to-left GRU reads each row's *real* tokens in reverse (padding never enters
    either direction), so a padded sentence is encoded exactly as it would be alone.
    """

    def __init__(
        self, vocab_size: int, embed_dim: int, hidden_dim: int, bidirectional: bool = True, pad_id: int = PAD_ID
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("hidden_dim", hidden_dim)
        if not 0 <= pad_id < vocab_size:
            raise ValueError(f"pad_id must be in [0, vocab_size={vocab_size}), got {pad_id}")
        self.pad_id = pad_id
        self.bidirectional = bool(bidirectional)
        self.output_dim = hidden_dim * (2 if bidirectional else 1)
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.forward_gru = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.backward_gru = nn.GRU(embed_dim, hidden_dim, batch_first=True) if bidirectional else None

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode ``src [batch, n]`` (right-padded token ids).

        Returns:
            ``states [batch, n, output_dim]`` (zeros at padded positions), ``summary [batch, output_dim]`` (the
            forward state at each row's last real token, concatenated with the backward state at position 0
            when bidirectional) and ``src_mask [batch, n]`` (True at real tokens).
        """
        src = check_token_ids("src", src, self.vocab_size)
        lengths = _source_lengths(src, self.pad_id)
        src_mask = src != self.pad_id
        embedded = self.embedding(src)  # [batch, n, embed]
        # Padding sits after the real tokens, so it cannot influence the left-to-right states we keep.
        states, _ = self.forward_gru(embedded)  # [batch, n, hidden]
        last = (lengths - 1)[:, None, None].expand(-1, 1, states.shape[-1])
        summary = [states.gather(1, last)[:, 0]]
        if self.backward_gru is not None:
            # Reverse each row's real part (padding stays at the end), run left to right, reverse back.
            positions = torch.arange(src.shape[1], device=src.device)[None, :]
            index = torch.where(src_mask, lengths[:, None] - 1 - positions, positions)
            index = index[:, :, None].expand(-1, -1, embedded.shape[-1])
            backward, _ = self.backward_gru(embedded.gather(1, index))
            backward = backward.gather(1, index[:, :, :1].expand(-1, -1, backward.shape[-1]))
            states = torch.cat([states, backward], dim=-1)
            summary.append(backward[:, 0])
        return states * src_mask[:, :, None], torch.cat(summary, dim=-1), src_mask


# --------------------------------------------------------------------------------------------------------
# Decoders
# --------------------------------------------------------------------------------------------------------
class _Seq2Seq(nn.Module):
    """What both models share: the encoder, target embedding, initial decoder state and greedy decoding."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        bidirectional: bool,
    ) -> None:
        super().__init__()
        self.tgt_vocab_size = check_positive_int("tgt_vocab_size", tgt_vocab_size)
        if tgt_vocab_size <= EOS_ID:
            raise ValueError(f"tgt_vocab_size must exceed EOS_ID={EOS_ID}, got {tgt_vocab_size}")
        self.hidden_dim = hidden_dim
        self.encoder = GRUEncoder(src_vocab_size, embed_dim, hidden_dim, bidirectional=bidirectional)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, embed_dim, padding_idx=PAD_ID)
        self.init_state = nn.Linear(self.encoder.output_dim, hidden_dim)  # s_0 = tanh(W summary)

    def _check_tgt(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        tgt_in = check_token_ids("tgt_in", tgt_in, self.tgt_vocab_size)
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"src and tgt_in must have the same batch size, got src {tuple(src.shape)} "
                f"and tgt_in {tuple(tgt_in.shape)}"
            )
        return tgt_in

    def step(
        self, prev_tokens: torch.Tensor, state: torch.Tensor, memory: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One decoder step: ``(logits [batch, vocab], new state [batch, hidden], weights [batch, n] or None)``."""
        raise NotImplementedError

    def start(self, src: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Encode ``src``; return the initial decoder state ``[batch, hidden]`` and what :meth:`step` reads."""
        raise NotImplementedError

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Decode ``src [batch, n]`` greedily, feeding back the most likely token, for at most ``max_len`` steps.

        ``<pad>``, ``<unk>`` and ``<bos>`` are never targets, so only symbols and EOS compete for the argmax.

        Returns:
            ``tokens [batch, L]`` with ``L <= max_len`` (generation stops early once every row has emitted
            ``EOS_ID``; the EOS itself is kept and everything after it is ``PAD_ID``), and for the attention model
            the alignment ``weights [batch, L, n]`` (rows after EOS are zero), else None.
        """
        check_positive_int("max_len", max_len)
        state, memory = self.start(src)
        prev = torch.full((src.shape[0],), BOS_ID, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        tokens, weights = [], []
        for _ in range(max_len):
            logits, state, alpha = self.step(prev, state, memory)
            logits[:, [PAD_ID, UNK_ID, BOS_ID]] = float("-inf")  # never targets of these tasks
            prev = logits.argmax(dim=-1).masked_fill(finished, PAD_ID)
            tokens.append(prev)
            if alpha is not None:
                weights.append(alpha.masked_fill(finished[:, None], 0.0))
            finished = finished | (prev == EOS_ID)
            if finished.all():
                break
        out = torch.stack(tokens, dim=1)
        return out, (torch.stack(weights, dim=1) if weights else None)


class EncoderDecoder(_Seq2Seq):
    """GRU encoder-decoder with a single fixed-size context vector (Cho et al., 2014).

    The encoder's summary ``c`` (``[batch, encoder.output_dim]``) sets the initial decoder state
    ``s_0 = tanh(W c)`` and is concatenated to the decoder input and to the read-out at every step:
    ``s_i = GRU(s_{i-1}, [E y_{i-1}; c])``, ``logits_i = W_o [s_i; c; E y_{i-1}]``. Nothing else about the
    source reaches the decoder, so ``c`` is the bottleneck.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (ids 0, 1, 2 are PAD, BOS, EOS).
        embed_dim: embedding width; hidden_dim: GRU width (per encoder direction, and of the decoder).
        bidirectional: bidirectional encoder (``c`` then holds both final states).
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 32,
        hidden_dim: int = 64,
        bidirectional: bool = True,
    ) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, embed_dim, hidden_dim, bidirectional)
        context_dim = self.encoder.output_dim
        self.decoder = nn.GRU(embed_dim + context_dim, hidden_dim, batch_first=True)
        self.readout = nn.Linear(hidden_dim + context_dim + embed_dim, tgt_vocab_size)

    def start(self, src: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        _, summary, _ = self.encoder(src)
        return torch.tanh(self.init_state(summary)), (summary,)

    def step(self, prev_tokens, state, memory):
        (context,) = memory
        embedded = self.tgt_embedding(prev_tokens)  # [batch, embed]
        output, _ = self.decoder(torch.cat([embedded, context], dim=-1)[:, None, :], state[None])
        new_state = output[:, 0]
        return self.readout(torch.cat([new_state, context, embedded], dim=-1)), new_state, None

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: logits ``[batch, t, tgt_vocab]`` for ``src [batch, n]`` and ``tgt_in [batch, t]``
        (the target shifted right, starting with ``BOS_ID``). The whole target runs through one GRU call."""
        state, (context,) = self.start(src)
        tgt_in = self._check_tgt(src, tgt_in)
        embedded = self.tgt_embedding(tgt_in)  # [batch, t, embed]
        repeated = context[:, None, :].expand(-1, tgt_in.shape[1], -1)  # [batch, t, context]
        states, _ = self.decoder(torch.cat([embedded, repeated], dim=-1), state[None])
        return self.readout(torch.cat([states, repeated, embedded], dim=-1))


class AttentionEncoderDecoder(_Seq2Seq):
    """GRU encoder-decoder with Bahdanau (additive) attention, "RNNsearch" (Bahdanau et al., 2014).

    At step ``i``: scores ``e_ij = v^T tanh(W_q s_{i-1} + W_k h_j)`` over the real source positions, weights
    ``alpha_i = softmax(e_i)`` (``[batch, n]``, padding masked out), context ``c_i = sum_j alpha_ij h_j``; then
    ``s_i = GRU(s_{i-1}, [E y_{i-1}; c_i])`` and ``logits_i = W_o [s_i; c_i; E y_{i-1}]``.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (ids 0, 1, 2 are PAD, BOS, EOS).
        embed_dim: embedding width; hidden_dim: GRU width (per encoder direction, and of the decoder).
        attention_dim: hidden width of the additive score (default ``hidden_dim``).
        bidirectional: bidirectional encoder, as in the paper.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 32,
        hidden_dim: int = 64,
        attention_dim: int | None = None,
        bidirectional: bool = True,
    ) -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, embed_dim, hidden_dim, bidirectional)
        context_dim = self.encoder.output_dim
        self.score = AdditiveScore(hidden_dim, context_dim, attention_dim or hidden_dim)
        self.decoder = nn.GRUCell(embed_dim + context_dim, hidden_dim)
        self.readout = nn.Linear(hidden_dim + context_dim + embed_dim, tgt_vocab_size)

    def start(self, src: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        states, summary, src_mask = self.encoder(src)
        # W_k h_j does not depend on the decoder step: compute it once per source (Bahdanau et al., appendix).
        return torch.tanh(self.init_state(summary)), (states, self.score.project_keys(states), src_mask)

    def _recur(
        self, embedded: torch.Tensor, state: torch.Tensor, memory: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Attend with ``s_{i-1}``, then update the state.

        Returns ``(s_i [batch, hidden], c_i [batch, 2h], alpha_i [batch, n])``.
        """
        states, projected_keys, src_mask = memory
        scores = self.score.score_projected(state[:, None, :], projected_keys)  # e_i: [batch, 1, n]
        context, weights = attend(scores, states, mask=src_mask[:, None, :])  # [batch, 1, 2h], [batch, 1, n]
        context = context[:, 0]
        new_state = self.decoder(torch.cat([embedded, context], dim=-1), state)
        return new_state, context, weights[:, 0]

    def step(self, prev_tokens, state, memory):
        embedded = self.tgt_embedding(prev_tokens)
        new_state, context, weights = self._recur(embedded, state, memory)
        return self.readout(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: ``(logits [batch, t, tgt_vocab], weights [batch, t, n])`` for ``src [batch, n]`` and
        ``tgt_in [batch, t]`` (the target shifted right, starting with ``BOS_ID``).

        Only the recurrence is a Python loop; embeddings and the read-out are applied to all steps at once.
        """
        state, memory = self.start(src)
        embedded = self.tgt_embedding(self._check_tgt(src, tgt_in))  # [batch, t, embed]
        states, contexts, weights = [], [], []
        for i in range(tgt_in.shape[1]):
            state, context, alpha = self._recur(embedded[:, i], state, memory)
            states.append(state)
            contexts.append(context)
            weights.append(alpha)
        features = torch.cat([torch.stack(states, dim=1), torch.stack(contexts, dim=1), embedded], dim=-1)
        return self.readout(features), torch.stack(weights, dim=1)


# --------------------------------------------------------------------------------------------------------
# Synthetic tasks, training and evaluation
# --------------------------------------------------------------------------------------------------------
def synthetic_batch(
    task: str, batch_size: int, min_len: int, max_len: int | None = None, vocab_size: int = 24, seed: int = 0
) -> Batch:
    """One padded batch of a synthetic task, from :func:`companion.data.synthetic.synthetic_pairs`.

    Args:
        task: ``"copy"``, ``"reverse"`` or ``"sort"`` (the target is the source copied, reversed or sorted).
        batch_size: number of examples.
        min_len, max_len: source lengths are drawn uniformly from ``[min_len, max_len]`` (``max_len`` defaults
            to ``min_len``: every example has that length).
        vocab_size: total vocabulary; symbols are ``FIRST_SYMBOL_ID .. vocab_size - 1``.
        seed: the same seed gives the same batch.

    Returns:
        a :class:`companion.data.batching.Batch`, rows sorted by length: ``src [batch, n + 1]`` (symbols, ``<eos>``,
        then padding), ``tgt_in [batch, n + 1]`` (``<bos>`` then the answer) and ``tgt_out [batch, n + 1]``
        (the answer then ``<eos>``), where ``n`` is the longest source in the batch.
    """
    if task not in SYNTHETIC_TASKS:
        raise ValueError(f"task must be one of {list(SYNTHETIC_TASKS)}, got {task!r}")
    max_len = min_len if max_len is None else max_len
    pairs = synthetic_pairs(task, batch_size, min_len=min_len, max_len=max_len, vocab_size=vocab_size, seed=seed)
    (batch,) = make_batches(pairs, max_tokens=batch_size * (max_len + 1), shuffle=False)
    return batch


def _logits(model: nn.Module, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    out = model(src, tgt_in)
    return out[0] if isinstance(out, tuple) else out


def train_seq2seq(
    model: _Seq2Seq,
    task: str = "reverse",
    steps: int = 300,
    batch_size: int = 32,
    min_len: int = 5,
    max_len: int = 40,
    vocab_size: int | None = None,
    lr: float = 3e-3,
    clip_norm: float = 1.0,
    seed: int = 0,
    spread: int = 4,
) -> list[float]:
    """Train ``model`` with Adam and teacher forcing on freshly sampled synthetic batches; returns the losses.

    Each step draws a length ``L`` uniformly from ``[min_len, max_len]`` and a fresh :func:`synthetic_batch` with
    lengths in ``[max(min_len, L - spread), L]``, so batches mix lengths (exercising padding) without always
    paying for the longest sequence. The loss is the mean cross-entropy over real target tokens (``PAD_ID`` ignored).
    Deterministic: the same ``seed`` and initial weights give the same losses (on one machine and thread count).
    The loop is :func:`companion.book.experiments.training.fit` (Adam, gradient norm clipped to ``clip_norm``, constant
    learning rate); the model is left in eval mode.

    Args:
        model: an :class:`EncoderDecoder` or :class:`AttentionEncoderDecoder`.
        task: ``"copy"``, ``"reverse"`` or ``"sort"``.
        steps, batch_size: number of optimizer steps and examples per step.
        min_len, max_len: range of source lengths.
        vocab_size: vocabulary of the task (default: the model's source vocabulary).
        lr, clip_norm: Adam learning rate and gradient-norm clipping threshold.
        seed: seeds the batch generator.
        spread: how far below ``L`` lengths in one batch may go.
    """
    if not isinstance(model, _Seq2Seq):
        raise TypeError(f"model must be an EncoderDecoder or AttentionEncoderDecoder, got {type(model).__name__}")
    for name, value in (("steps", steps), ("batch_size", batch_size), ("min_len", min_len), ("max_len", max_len)):
        check_positive_int(name, value)
    if max_len < min_len:
        raise ValueError(f"max_len must be >= min_len, got min_len={min_len} and max_len={max_len}")
    check_choice("task", task, list(SYNTHETIC_TASKS))
    check_integer("spread", spread, minimum=0)
    vocab_size = vocab_size or model.encoder.vocab_size
    if vocab_size > min(model.encoder.vocab_size, model.tgt_vocab_size):
        raise ValueError(
            f"vocab_size={vocab_size} exceeds the model's vocabularies (src {model.encoder.vocab_size}, "
            f"tgt {model.tgt_vocab_size})"
        )

    def next_batch(generator: torch.Generator) -> Batch:
        top = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        batch_seed = int(torch.randint(2**31 - 1, (1,), generator=generator))
        return synthetic_batch(task, batch_size, max(min_len, top - spread), top, vocab_size, batch_seed)

    def loss_fn(model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = _logits(model, batch.src, batch.tgt_in)
        return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID)

    return fit(model, next_batch, loss_fn, steps, lr=lr, seed=seed, clip_norm=clip_norm)


@torch.no_grad()
def accuracy_by_length(
    model: _Seq2Seq,
    task: str,
    lengths: Sequence[int],
    examples_per_length: int = 100,
    vocab_size: int | None = None,
    seed: int = 1234,
) -> dict[int, float]:
    """Greedy-decoding token accuracy for each source length.

    For each length ``L``, decodes ``examples_per_length`` fresh examples with ``greedy_decode``
    (``max_len = L + 1``) and returns the fraction of the ``L`` answer positions predicted exactly (a missing
    or wrong token counts as an error; the final EOS is not counted). Example sets are seeded by ``seed + L``.
    """
    if not isinstance(model, _Seq2Seq):
        raise TypeError(f"model must be an EncoderDecoder or AttentionEncoderDecoder, got {type(model).__name__}")
    check_positive_int("examples_per_length", examples_per_length)
    vocab_size = vocab_size or model.encoder.vocab_size
    model.eval()
    result = {}
    for length in lengths:
        check_positive_int("length", int(length))
        batch = synthetic_batch(task, examples_per_length, int(length), vocab_size=vocab_size, seed=seed + int(length))
        predicted, _ = model.greedy_decode(batch.src, max_len=int(length) + 1)
        predicted = F.pad(predicted, (0, int(length) + 1 - predicted.shape[1]), value=PAD_ID)
        correct = predicted[:, : int(length)] == batch.tgt_out[:, : int(length)]
        result[int(length)] = float(correct.float().mean())
    return result
