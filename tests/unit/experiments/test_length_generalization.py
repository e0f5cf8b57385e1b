"""Length-generalisation measurements (chapter 5): greedy exact match per length and teacher-forced accuracy
per target position. An oracle that copies perfectly, optionally stopping early, pins down what each measure
reports; a real (untrained) Transformer checks the plumbing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from companion import Transformer, TransformerConfig
from companion.attention import padding_mask
from companion.book.experiments.length_generalization import LengthResult, length_report, position_accuracy
from companion.data import EOS_ID, synthetic_pairs

VOCAB = 12


class CopyOracle(Transformer):
    """Predicts target position p as the source token at p (a perfect copier).

    From position ``stop_after`` on, ``<eos>`` gets the highest score and the right token the second highest,
    so greedy decoding stops early while the content-only teacher-forced prediction stays right.
    """

    def __init__(self, max_len: int = 40, stop_after: int | None = None) -> None:
        super().__init__(
            TransformerConfig(
                VOCAB,
                VOCAB,
                d_model=VOCAB,
                num_heads=1,
                num_encoder_layers=0,
                num_decoder_layers=0,
                d_ff=4,
                max_len=max_len,
            )
        )
        self.stop_after = stop_after

    # the two methods every entry point (encode, decode, forward, the searches) ends in
    def encode_unchecked(self, src, need_weights=False):
        return F.one_hot(src, VOCAB).float(), padding_mask(src, self.config.pad_id)

    def decode_unchecked(self, tgt, memory, src_mask=None, cache=None, need_weights=False, *, last_only=False):
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + tgt.shape[1]).clamp(max=memory.shape[1] - 1)
        logits = 10.0 * memory[:, positions]  # [batch, t, vocab]
        if self.stop_after is not None:
            late = positions >= self.stop_after
            logits[:, late, EOS_ID] = 20.0
        if cache is not None:
            cache.length += tgt.shape[1]
        return logits[:, -1:] if last_only else logits


def test_a_perfect_copier_scores_one_everywhere():
    report = length_report(CopyOracle(), "copy", [1, 5, 20], vocab_size=VOCAB, examples_per_length=30)
    assert report == [LengthResult(n, 1.0, 1.0, float(n)) for n in (1, 5, 20)]
    assert torch.equal(position_accuracy(CopyOracle(), "copy", 20, vocab_size=VOCAB, num_examples=30), torch.ones(20))


def test_stopping_early_fails_greedy_decoding_but_not_the_content_only_position_accuracy():
    oracle = CopyOracle(stop_after=6)
    report = {
        r.length: r for r in length_report(oracle, "copy", [4, 6, 8, 12], vocab_size=VOCAB, examples_per_length=25)
    }
    assert report[4].exact_match == 1.0 and report[6].exact_match == 1.0
    assert report[8].exact_match == 0.0 and report[12].exact_match == 0.0
    assert report[12].mean_output_length == 6.0
    assert report[12].token_accuracy == pytest.approx(6 / 12)
    assert torch.equal(position_accuracy(oracle, "copy", 12, vocab_size=VOCAB, num_examples=25), torch.ones(12))


def test_the_task_decides_what_is_right():
    """A copier is wrong on the reverse task except where the sequence reads the same both ways."""
    n, count = 7, 40
    report = length_report(CopyOracle(), "reverse", [1, n], vocab_size=VOCAB, examples_per_length=count, seed=3)
    assert report[0].exact_match == 1.0  # one token reversed is itself
    pairs = synthetic_pairs("reverse", count, min_len=n, max_len=n, vocab_size=VOCAB, seed=3 + n)
    expected = sum(a == b for s, t in pairs for a, b in zip(s, t)) / (n * count)
    assert report[1].token_accuracy == pytest.approx(expected) and expected < 0.5
    accuracy = position_accuracy(CopyOracle(), "reverse", n, vocab_size=VOCAB, num_examples=count, seed=3)
    assert accuracy[n // 2] == 1.0  # the middle token of an odd-length sequence stays in place
    assert float(accuracy.mean()) == pytest.approx(expected)


def test_a_real_model_is_measured_deterministically_and_left_in_its_mode():
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            VOCAB,
            VOCAB,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=32,
            max_len=16,
            positional="learned",
        )
    )
    model.train()
    first = length_report(model, "copy", [3, 9], vocab_size=VOCAB, examples_per_length=10)
    second = length_report(model, "copy", [9, 3], vocab_size=VOCAB, examples_per_length=10)
    assert first == second[::-1], "each length draws its own examples"
    for result in first:
        assert 0.0 <= result.exact_match <= result.token_accuracy <= 1.0  # an exact match has every token right
        assert 0.0 <= result.mean_output_length <= result.length + 1 + 5
    accuracy = position_accuracy(model, "copy", 9, vocab_size=VOCAB, num_examples=10)
    assert accuracy.shape == (9,) and ((accuracy >= 0) & (accuracy <= 1)).all()
    assert model.training, "the model's train/eval mode is restored"


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda m: length_report("model", "copy", [3], vocab_size=VOCAB),
            TypeError,
            "model must be a companion Transformer, got str",
        ),
        (lambda m: length_report(m, "copy", [], vocab_size=VOCAB), ValueError, "lengths must hold at least one"),
        (
            lambda m: length_report(m, "copy", [3, 40], vocab_size=VOCAB),
            ValueError,
            r"lengths\[1\] must be at most max_len - 1 = 39 .*got 40",
        ),
        (
            lambda m: length_report(m, "copy", [3, 0], vocab_size=VOCAB),
            ValueError,
            r"lengths\[1\] must be a positive integer, got 0",
        ),
        (
            lambda m: length_report(m, "copy", [3], vocab_size=VOCAB + 1),
            ValueError,
            r"vocab_size must be in \(4, 12\].*got 13",
        ),
        (
            lambda m: length_report(m, "copy", [3], vocab_size=VOCAB, examples_per_length=0),
            ValueError,
            "examples_per_length must be a positive integer, got 0",
        ),
        (lambda m: length_report(m, "shuffle", [3], vocab_size=VOCAB), ValueError, "task must be one of"),
        (
            lambda m: position_accuracy(m, "copy", 40, vocab_size=VOCAB),
            ValueError,
            r"length must be at most max_len - 1 = 39",
        ),
        (lambda m: position_accuracy(m, "copy", 5, vocab_size=4), ValueError, r"vocab_size must be in \(4, 12\]"),
        (
            lambda m: position_accuracy(m, "copy", 5, vocab_size=VOCAB, num_examples=-1),
            ValueError,
            "num_examples must be a positive integer, got -1",
        ),
    ],
)
def test_bad_input_is_reported(call, error, message):
    with pytest.raises(error, match=message):
        call(CopyOracle())
