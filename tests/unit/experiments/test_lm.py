"""Tests of the decoder-only language model of chapter 3 (companion.book.experiments.lm)."""

from __future__ import annotations

import math

import pytest
import torch

from companion.book.experiments.lm import (
    CharTokenizer,
    DecoderOnlyLM,
    LanguageModelConfig,
    encode_sequences,
    left_to_right_loss,
    teacher_forced_loss,
    train_language_model,
)
from companion.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID

VOCAB = 17


def make_lm(causal: bool = True, **overrides) -> DecoderOnlyLM:
    settings = dict(vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=24, causal=causal)
    settings.update(overrides)
    return DecoderOnlyLM(LanguageModelConfig(**settings)).eval()


def random_ids(batch: int, length: int) -> torch.Tensor:
    return torch.randint(4, VOCAB, (batch, length))  # no special ids


# -- causality -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("j", [0, 3, 9])
def test_causal_model_logits_before_j_ignore_token_j(j):
    model = make_lm(causal=True)
    tokens = random_ids(3, 10)
    changed = tokens.clone()
    changed[:, j] = 4 + (changed[:, j] - 4 + 5) % (VOCAB - 4)  # a different non-special token
    before, after = model(tokens), model(changed)
    assert torch.allclose(before[:, :j], after[:, :j], atol=1e-6), "a logit before j depends on token j"
    assert not torch.allclose(before[:, j:], after[:, j:], atol=1e-4), "token j should affect positions >= j"


def test_non_causal_model_leaks_the_future():
    model = make_lm(causal=False)
    tokens = random_ids(3, 10)
    changed = tokens.clone()
    changed[:, 9] = 4 + (changed[:, 9] - 4 + 5) % (VOCAB - 4)
    before, after = model(tokens), model(changed)
    assert (before[:, :9] - after[:, :9]).abs().amax() > 1e-3, "full attention must let the last token reach position 0"


def test_attention_mask_is_causal_and_hides_padding():
    model = make_lm(causal=True)
    tokens = torch.tensor([[BOS_ID, 5, 6, PAD_ID]])
    mask = model.attention_mask(tokens)
    assert mask.shape == (1, 1, 4, 4) and mask.dtype == torch.bool
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(mask[0, 0], expected)
    full = make_lm(causal=False).attention_mask(tokens)
    assert torch.equal(full[0, 0], torch.tensor([[1, 1, 1, 0]] * 4, dtype=torch.bool))


@pytest.mark.parametrize("causal", [True, False])
def test_appending_padding_leaves_real_positions_unchanged(causal):
    model = make_lm(causal=causal)
    tokens = random_ids(2, 6)
    padded = torch.cat([tokens, torch.full((2, 4), PAD_ID)], dim=1)
    assert torch.allclose(model(tokens), model(padded)[:, :6], atol=1e-5)


def test_layers_come_from_the_companion_encoder():
    from companion.model import Encoder, EncoderLayer

    model = make_lm(num_layers=3)
    assert isinstance(model.blocks, Encoder)
    assert len(model.blocks.layers) == 3 and all(isinstance(x, EncoderLayer) for x in model.blocks.layers)


def test_need_weights_returns_lower_triangular_maps():
    model = make_lm(causal=True)
    logits, maps = model(random_ids(2, 7), need_weights=True)
    assert logits.shape == (2, 7, VOCAB) and len(maps) == 2
    for weights in maps:
        assert weights.shape == (2, 2, 7, 7)
        assert torch.all(weights.triu(1) == 0)
        assert torch.allclose(weights.sum(-1), torch.ones(2, 2, 7), atol=1e-5)


def test_left_to_right_loss_equals_teacher_forced_loss_only_for_the_causal_model():
    tokens = random_ids(4, 9)
    causal, full = make_lm(causal=True), make_lm(causal=False)
    assert math.isclose(left_to_right_loss(causal, tokens), teacher_forced_loss(causal, tokens), rel_tol=1e-5)
    assert abs(left_to_right_loss(full, tokens) - teacher_forced_loss(full, tokens)) > 1e-3


# -- generation ------------------------------------------------------------------------------------------------


def test_generate_shapes_and_prompt():
    model = make_lm()
    prompt = random_ids(3, 4)
    out = model.generate(prompt, max_new_tokens=5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 9) and out.dtype == torch.long
    assert torch.equal(out[:, :4], prompt)
    assert int(out.min()) >= 0 and int(out.max()) < VOCAB and not (out[:, 4:] == PAD_ID).any()


def test_greedy_is_deterministic_and_sampling_follows_the_generator():
    model = make_lm()
    prompt = random_ids(2, 3)
    assert torch.equal(model.generate(prompt, 6, greedy=True), model.generate(prompt, 6, greedy=True))
    a = model.generate(prompt, 6, temperature=1.5, generator=torch.Generator().manual_seed(1))
    b = model.generate(prompt, 6, temperature=1.5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


def test_greedy_generation_matches_the_argmax_of_a_full_pass():
    model = make_lm()
    out = model.generate(random_ids(2, 3), 5, greedy=True)
    logits = model(out[:, :-1])
    logits[..., PAD_ID] = float("-inf")
    assert torch.equal(logits[:, 2:].argmax(-1), out[:, 3:])


def test_generate_restores_training_mode():
    model = make_lm(dropout=0.1).train()
    model.generate(random_ids(1, 2), 2, greedy=True)
    assert model.training


# -- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tokens, error, words",
    [
        (torch.rand(2, 5), TypeError, "tokens"),
        (torch.tensor([1, 2, 3]), ValueError, "tokens"),
        (torch.tensor([[1, VOCAB]]), ValueError, "vocab"),
        (torch.tensor([[-1, 2]]), ValueError, "tokens"),
        (torch.ones(1, 25, dtype=torch.long), ValueError, "max_len"),
        ([[1, 2]], TypeError, "tokens"),
    ],
)
def test_forward_rejects_bad_tokens(tokens, error, words):
    with pytest.raises(error, match=words):
        make_lm()(tokens)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(max_new_tokens=0), ValueError, "max_new_tokens"),
        (dict(max_new_tokens=2, temperature=0.0), ValueError, "temperature"),
        (dict(max_new_tokens=2, temperature=-1.0), ValueError, "temperature"),
        (dict(max_new_tokens=30), ValueError, "max_len"),
    ],
)
def test_generate_rejects_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        make_lm().generate(random_ids(1, 3), **kwargs)


@pytest.mark.parametrize(
    "overrides, error, words",
    [
        (dict(causal=1), TypeError, "causal"),
        (dict(pad_id=VOCAB), ValueError, "pad_id"),
        (dict(d_model=15), ValueError, "d_model"),
        (dict(num_heads=3), ValueError, "num_heads"),
        (dict(vocab_size=0), ValueError, "vocab_size"),
    ],
)
def test_config_rejects_bad_values(overrides, error, words):
    settings = dict(vocab_size=VOCAB, d_model=16, num_heads=2)
    settings.update(overrides)
    with pytest.raises(error, match=words):
        LanguageModelConfig(**settings)


def test_model_and_training_reject_wrong_types():
    with pytest.raises(TypeError, match="config"):
        DecoderOnlyLM({"vocab_size": VOCAB})
    with pytest.raises(TypeError, match="model"):
        train_language_model(torch.nn.Linear(2, 2), random_ids(2, 5), steps=1)
    with pytest.raises(ValueError, match="steps"):
        train_language_model(make_lm(), random_ids(2, 5), steps=0)
    with pytest.raises(ValueError, match="at least 2 positions"):
        teacher_forced_loss(make_lm(), random_ids(2, 1))


def test_config_round_trips_through_a_dict():
    config = LanguageModelConfig(vocab_size=VOCAB, causal=False, d_model=32)
    assert LanguageModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown"):
        LanguageModelConfig.from_dict({**config.to_dict(), "colour": "blue"})


# -- tokenizer -------------------------------------------------------------------------------------------------


def test_char_tokenizer_round_trip_and_specials():
    tokenizer = CharTokenizer.build(["a cat", "the hat"])
    assert tokenizer.itos[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert tokenizer.vocab_size == 4 + len(set("a catthe hat"))
    ids = tokenizer.encode("a hat")
    assert tokenizer.decode(ids) == "a hat"
    assert tokenizer.encode("a dog")[2] == UNK_ID
    assert tokenizer.decode([BOS_ID, *ids, EOS_ID, *ids]) == "a hat"
    assert CharTokenizer.from_dict(tokenizer.to_dict()).itos == tokenizer.itos
    with pytest.raises(TypeError, match="texts"):
        CharTokenizer.build("a single string")
    with pytest.raises(ValueError, match="single-character"):
        CharTokenizer(["ab"])


def test_encode_sequences_adds_bos_eos_and_right_pads():
    tokenizer = CharTokenizer.build(["ab", "abc"])
    rows = encode_sequences(tokenizer, ["ab", "abc"], max_len=6)
    a, b, c = tokenizer.encode("abc")
    assert rows.tolist() == [[BOS_ID, a, b, EOS_ID, PAD_ID, PAD_ID], [BOS_ID, a, b, c, EOS_ID, PAD_ID]]
    assert encode_sequences(tokenizer, ["abc"], max_len=3).tolist() == [[BOS_ID, a, b]]
    with pytest.raises(ValueError, match="max_len"):
        encode_sequences(tokenizer, ["ab"], max_len=0)


# -- learning --------------------------------------------------------------------------------------------------


def test_causal_model_learns_a_sentence_and_generates_it(one_thread):
    text = "the cat sat on the mat"
    tokenizer = CharTokenizer.build([text])
    rows = encode_sequences(tokenizer, [text] * 8, max_len=len(text) + 2)
    model = DecoderOnlyLM(
        LanguageModelConfig(tokenizer.vocab_size, d_model=32, num_heads=2, num_layers=1, d_ff=64, max_len=len(text) + 2)
    )
    history = train_language_model(model, rows, steps=80, batch_size=8, lr=1e-2)
    assert history[-1] < 0.1 * history[0]
    out = model.generate(torch.tensor([[BOS_ID]]), max_new_tokens=len(text) + 1, greedy=True)
    assert tokenizer.decode(out[0]) == text


def test_without_the_mask_the_loss_drops_below_the_entropy_of_random_text(one_thread):
    """On uniformly random tokens no honest predictor beats ln(alphabet) nats; peeking at the future does."""
    alphabet = 10
    rows = torch.randint(4, 4 + alphabet, (2000, 16), generator=torch.Generator().manual_seed(0))
    final = {}
    for causal in (True, False):
        torch.manual_seed(0)
        model = DecoderOnlyLM(
            LanguageModelConfig(4 + alphabet, d_model=32, num_heads=2, num_layers=1, d_ff=64, max_len=16, causal=causal)
        )
        history = train_language_model(model, rows, steps=150, batch_size=32, lr=1e-2)
        final[causal] = sum(history[-10:]) / 10
    assert final[True] > math.log(alphabet) - 0.05
    assert final[False] < 0.5 * math.log(alphabet)
