"""Tests for companion.book.experiments.rnn: GRU encoder-decoders with and without additive attention, synthetic
tasks, training."""

from __future__ import annotations

import pytest
import torch

from companion import data
from companion.book.experiments.rnn import (
    BOS_ID,
    EOS_ID,
    FIRST_SYMBOL_ID,
    PAD_ID,
    AttentionEncoderDecoder,
    EncoderDecoder,
    GRUEncoder,
    accuracy_by_length,
    synthetic_batch,
    train_seq2seq,
)

VOCAB = 11
MODELS = [EncoderDecoder, AttentionEncoderDecoder]


pytestmark = pytest.mark.usefixtures("one_thread")


def _model(cls, **kwargs):
    return cls(VOCAB, VOCAB, embed_dim=8, hidden_dim=12, **kwargs).eval()


def _logits(out):
    return out[0] if isinstance(out, tuple) else out


# ------------------------------------------------------------------------------------ synthetic data
def test_special_ids_are_those_of_companion_data():
    assert (PAD_ID, BOS_ID, EOS_ID) == (data.PAD_ID, data.BOS_ID, data.EOS_ID)
    assert FIRST_SYMBOL_ID == len(data.SPECIAL_TOKENS)


def test_synthetic_reversal_batch_is_padded_and_reversed():
    batch = synthetic_batch("reverse", 16, 2, 6, vocab_size=VOCAB, seed=0)
    assert batch.src.shape[0] == 16 and batch.tgt_in.shape == batch.tgt_out.shape
    for src, tgt_in, tgt_out in zip(batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()):
        n = src.index(EOS_ID)
        symbols = src[:n]
        assert 2 <= n <= 6 and all(FIRST_SYMBOL_ID <= t < VOCAB for t in symbols)
        assert all(t == PAD_ID for t in src[n + 1 :])
        assert tgt_out[: n + 1] == symbols[::-1] + [EOS_ID]
        assert tgt_in[: n + 1] == [BOS_ID] + symbols[::-1]
        assert all(t == PAD_ID for t in tgt_out[n + 1 :])


def test_synthetic_copy_batch_of_one_length():
    batch = synthetic_batch("copy", 5, 4, vocab_size=VOCAB, seed=1)
    assert batch.src.shape == (5, 5) and batch.tgt_out.shape == (5, 5)
    assert torch.equal(batch.tgt_out, batch.src)  # copy: target + <eos> == source + <eos>


def test_synthetic_batches_are_reproducible():
    a = synthetic_batch("reverse", 4, 6, vocab_size=VOCAB, seed=3)
    b = synthetic_batch("reverse", 4, 6, vocab_size=VOCAB, seed=3)
    c = synthetic_batch("reverse", 4, 6, vocab_size=VOCAB, seed=4)
    assert torch.equal(a.src, b.src) and not torch.equal(a.src, c.src)


def test_synthetic_batch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="task"):
        synthetic_batch("shuffle", 2, 3, vocab_size=VOCAB)
    with pytest.raises(ValueError, match="vocab_size"):
        synthetic_batch("copy", 2, 3, vocab_size=FIRST_SYMBOL_ID)
    with pytest.raises(ValueError, match="min_len"):
        synthetic_batch("copy", 2, 0, vocab_size=VOCAB)
    with pytest.raises(ValueError, match="min_len"):
        synthetic_batch("copy", 2, 5, 3, vocab_size=VOCAB)


# ------------------------------------------------------------------------------------------- encoder
@pytest.mark.parametrize("bidirectional", [False, True])
def test_encoder_shapes(bidirectional):
    encoder = GRUEncoder(VOCAB, 8, 12, bidirectional=bidirectional)
    src = torch.tensor([[4, 5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID, PAD_ID]])
    states, summary, mask = encoder(src)
    width = 24 if bidirectional else 12
    assert encoder.output_dim == width
    assert states.shape == (2, 5, width) and summary.shape == (2, width)
    assert mask.tolist() == [[True] * 5, [True] * 3 + [False] * 2]
    assert (states[1, 3:] == 0).all()


@pytest.mark.parametrize("bidirectional", [False, True])
def test_padding_does_not_change_the_encoding(bidirectional):
    encoder = GRUEncoder(VOCAB, 8, 12, bidirectional=bidirectional)
    src = torch.tensor([[4, 5, 6, 7, 8, 9, EOS_ID], [10, 4, 6, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    states, summary, _ = encoder(src)
    alone_states, alone_summary, _ = encoder(src[1:, :4])
    torch.testing.assert_close(states[1, :4], alone_states[0])
    torch.testing.assert_close(summary[1], alone_summary[0])


def test_backward_direction_reads_right_to_left():
    encoder = GRUEncoder(VOCAB, 8, 12, bidirectional=True)
    src = torch.tensor([[4, 5, 6, 7]])
    states, summary, _ = encoder(src)
    # The backward half at position 0 has read the whole sentence; changing the last token must change it,
    # while the forward half at position 0 has only read token 0 and must not change.
    states2, _, _ = encoder(torch.tensor([[4, 5, 6, 8]]))
    torch.testing.assert_close(states[0, 0, :12], states2[0, 0, :12])
    assert not torch.allclose(states[0, 0, 12:], states2[0, 0, 12:])
    torch.testing.assert_close(summary[0, 12:], states[0, 0, 12:])
    torch.testing.assert_close(summary[0, :12], states[0, -1, :12])


# -------------------------------------------------------------------------------------------- models
@pytest.mark.parametrize("cls", MODELS)
def test_teacher_forced_logits_have_one_row_per_target_step(cls):
    model = _model(cls)
    batch = synthetic_batch("reverse", 3, 3, 5, vocab_size=VOCAB, seed=0)
    out = model(batch.src, batch.tgt_in)
    assert _logits(out).shape == (*batch.tgt_in.shape, VOCAB)


def test_attention_weights_are_distributions_over_real_source_tokens():
    model = _model(AttentionEncoderDecoder)
    src = torch.tensor([[4, 5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID, PAD_ID]])
    tgt_in = torch.tensor([[BOS_ID, 7, 6, 5, 4], [BOS_ID, 9, 8, PAD_ID, PAD_ID]])
    _, weights = model(src, tgt_in)
    assert weights.shape == (2, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5))
    assert (weights[1, :, 3:] == 0).all() and (weights[0] > 0).all()


@pytest.mark.parametrize("cls", MODELS)
def test_teacher_forcing_equals_stepwise_decoding(cls):
    model = _model(cls)
    batch = synthetic_batch("copy", 2, 4, 6, vocab_size=VOCAB, seed=0)
    logits = _logits(model(batch.src, batch.tgt_in))
    state, memory = model.start(batch.src)
    for i in range(batch.tgt_in.shape[1]):
        step_logits, state, _ = model.step(batch.tgt_in[:, i], state, memory)
        torch.testing.assert_close(step_logits, logits[:, i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", MODELS)
def test_padding_in_the_batch_does_not_change_a_row(cls):
    model = _model(cls)
    src = torch.tensor([[4, 5, 6, 7, 8, 9, EOS_ID], [10, 4, 6, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    tgt_in = torch.tensor([[BOS_ID, 9, 8, 7, 6, 5, 4], [BOS_ID, 6, 4, 10, PAD_ID, PAD_ID, PAD_ID]])
    logits = _logits(model(src, tgt_in))
    alone = _logits(model(src[1:, :4], tgt_in[1:, :4]))
    torch.testing.assert_close(logits[1, :4], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", MODELS)
def test_greedy_decode_shapes_and_padding_after_eos(cls):
    model = _model(cls)
    src = synthetic_batch("reverse", 3, 2, 5, vocab_size=VOCAB, seed=0).src
    tokens, weights = model.greedy_decode(src, max_len=7)
    assert tokens.dtype == torch.long and tokens.shape[0] == 3 and 1 <= tokens.shape[1] <= 7
    for row in tokens.tolist():
        assert not {PAD_ID, data.UNK_ID, BOS_ID} & set(row[: row.index(EOS_ID) if EOS_ID in row else None])
        if EOS_ID in row:
            assert all(t == PAD_ID for t in row[row.index(EOS_ID) + 1 :])
        else:
            assert len(row) == 7
    if cls is AttentionEncoderDecoder:
        assert weights.shape == (3, tokens.shape[1], src.shape[1])
        live = tokens != PAD_ID
        torch.testing.assert_close(weights.sum(-1)[live], torch.ones(int(live.sum())))
    else:
        assert weights is None


def test_greedy_decode_stops_early_when_every_row_has_finished():
    model = _model(AttentionEncoderDecoder)
    with torch.no_grad():  # force EOS to always win
        model.readout.bias.fill_(-100.0)
        model.readout.bias[EOS_ID] = 100.0
    tokens, weights = model.greedy_decode(torch.tensor([[4, 5, 6]]), max_len=10)
    assert tokens.tolist() == [[EOS_ID]] and weights.shape == (1, 1, 3)


# -------------------------------------------------------------------------------------------- training
def test_attention_model_learns_short_reversal_quickly():
    torch.manual_seed(0)
    model = AttentionEncoderDecoder(9, 9, embed_dim=16, hidden_dim=32)
    losses = train_seq2seq(model, "reverse", steps=150, batch_size=32, min_len=3, max_len=6, lr=1e-2, seed=0)
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    accuracy = accuracy_by_length(model, "reverse", [3, 6], examples_per_length=64)
    assert min(accuracy.values()) > 0.9, accuracy
    # The learned alignment is anti-diagonal: output step i looks mostly at source position n - 1 - i, or at
    # a neighbour (a bidirectional encoder state also carries its neighbours' tokens).
    src = synthetic_batch("reverse", 16, 6, vocab_size=9, seed=5).src  # [16, 7]: six symbols and <eos>
    _, weights = model.greedy_decode(src, max_len=7)
    offset = (weights[:, :6].argmax(-1) - torch.arange(5, -1, -1)).abs()
    assert (offset <= 1).float().mean() > 0.9, offset
    assert weights[:, 0].argmax(-1).eq(5).all(), "the first output is the last source token"


def test_training_is_reproducible_and_lowers_the_loss_of_the_bottleneck_model():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = EncoderDecoder(9, 9, embed_dim=8, hidden_dim=16)
        runs.append(train_seq2seq(model, "copy", steps=60, batch_size=16, min_len=2, max_len=4, lr=1e-2))
    assert runs[0] == runs[1]
    assert sum(runs[0][-5:]) < sum(runs[0][:5])


def test_accuracy_by_length_counts_wrong_and_missing_tokens():
    model = _model(AttentionEncoderDecoder)
    with torch.no_grad():  # a model that always says EOS gets every answer token wrong
        model.readout.bias.fill_(-100.0)
        model.readout.bias[EOS_ID] = 100.0
    assert accuracy_by_length(model, "copy", [1, 4], examples_per_length=8) == {1: 0.0, 4: 0.0}


# ------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("cls", MODELS)
def test_bad_sources_raise(cls):
    model = _model(cls)
    tgt = torch.tensor([[BOS_ID, 3]])
    with pytest.raises(ValueError, match="src"):
        model(torch.tensor([3, 4]), tgt)  # not [batch, seq]
    with pytest.raises(TypeError, match="src"):
        model(torch.tensor([[3.0, 4.0]]), tgt)
    with pytest.raises(ValueError, match="src"):
        model(torch.tensor([[3, VOCAB]]), tgt)  # outside the vocabulary
    with pytest.raises(ValueError, match="right-padded"):
        model(torch.tensor([[PAD_ID, 3]]), tgt)
    with pytest.raises(ValueError, match="all padding"):
        model(torch.tensor([[3, 4], [PAD_ID, PAD_ID]]), torch.tensor([[BOS_ID], [BOS_ID]]))
    with pytest.raises(ValueError, match="batch size"):
        model(torch.tensor([[4, 5]]), torch.tensor([[BOS_ID], [BOS_ID]]))
    with pytest.raises(ValueError, match="max_len"):
        model.greedy_decode(torch.tensor([[3, 4]]), max_len=0)


def test_bad_constructor_and_training_arguments_raise():
    with pytest.raises(ValueError, match="hidden_dim"):
        AttentionEncoderDecoder(VOCAB, VOCAB, hidden_dim=0)
    with pytest.raises(ValueError, match="tgt_vocab_size"):
        EncoderDecoder(VOCAB, EOS_ID)
    model = _model(EncoderDecoder)
    with pytest.raises(TypeError, match="model"):
        train_seq2seq(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="max_len"):
        train_seq2seq(model, min_len=5, max_len=3)
    with pytest.raises(ValueError, match="steps"):
        train_seq2seq(model, steps=0)
    with pytest.raises(ValueError, match="vocab_size"):
        train_seq2seq(model, vocab_size=VOCAB + 5)
    with pytest.raises(ValueError, match="task"):
        train_seq2seq(model, task="shuffle", steps=1)
