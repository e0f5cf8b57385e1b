"""Tests for companion.evaluate: sacreBLEU BLEU and chrF, perplexity, and the translation evaluation."""

from __future__ import annotations

import math
import re

import pytest
import sacrebleu
import torch
from _copy_model import COPY_MAX_LEN, COPY_VOCAB, copy_model

from companion import Transformer, TransformerConfig
from companion.data import SPECIAL_TOKENS, WordTokenizer, make_batches, synthetic_pairs
from companion.evaluate import (
    choose_alpha,
    corpus_bleu,
    corpus_chrf,
    evaluate_translation,
    perplexity,
    tokenized_bleu,
)

HYPOTHESES = ["The cat sat on the mat.", "A dog is running in the park!", "Two people talk."]
REFERENCES = ["The cat is sitting on the mat.", "A dog runs in a park!", "Two people are talking."]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_bleu_of_identical_text_is_100_with_a_signature():
    score, signature = corpus_bleu(REFERENCES, REFERENCES)
    assert score == pytest.approx(100.0)
    assert "tok:13a" in signature and "nrefs:1" in signature and f"version:{sacrebleu.__version__}" in signature


def test_tokenized_bleu_scores_spacy_words_without_a_detokenize_warning(caplog):
    hypotheses, references = (
        ["The dog's ball is red."] * 100,
        ["The dog's ball was red."] * 100,
    )  # sacreBLEU warns at 100
    with caplog.at_level("WARNING"):
        score, signature = tokenized_bleu(hypotheses, references, "en")
    assert "detokenize" not in caplog.text  # the text is tokenized on purpose
    # by hand: spaCy's English rules split "dog's" and the final period; sacreBLEU then splits nothing
    expected = sacrebleu.corpus_bleu(
        ["The dog 's ball is red ."], [["The dog 's ball was red ."]], tokenize="none", force=True
    )
    assert score == pytest.approx(expected.score)
    assert score != pytest.approx(corpus_bleu(hypotheses, references)[0])  # 13a keeps "dog's" whole
    assert "tok:none" in signature and signature.endswith("|pretok:spacy-en")


def test_lowercased_tokenized_bleu_ignores_case_only():
    hypotheses, references = ["A Dog runs ."] * 3, ["a dog runs."] * 3
    cased, cased_signature = tokenized_bleu(hypotheses, references, "en")
    lowered, signature = tokenized_bleu(hypotheses, references, "en", lowercase=True)
    assert lowered == pytest.approx(100.0) and cased < 50  # only the case differs, and the period's spacing
    assert "case:lc" in signature and "case:mixed" in cased_signature and signature.endswith("|pretok:spacy-en")
    with pytest.raises(ValueError, match="lowercase"):
        tokenized_bleu(hypotheses, references, "en", lowercase="yes")


def test_bleu_matches_sacrebleu_and_a_hand_computation():
    score, _ = corpus_bleu(HYPOTHESES, REFERENCES)
    assert score == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert 0 < score < 100
    # n-gram precisions 5/6, 4/5, 3/4, 2/3 and no brevity penalty: BLEU = (1/3) ** (1/4).
    hand, _ = corpus_bleu(["a b c d e f"], ["a b c d e g"])
    assert hand == pytest.approx(100 * (1 / 3) ** 0.25)


# Chinese: a reference and a hypothesis that differ in one character. 13a sees each sentence as one word (BLEU 0).
CHINESE_HYPOTHESIS, CHINESE_REFERENCE = "我爱你。今天天气很好", "我爱他。今天天气很好"


@pytest.mark.parametrize("language", ["zh", "zh-Hans", "zh_CN"])
def test_chinese_is_scored_with_sacrebleus_chinese_tokenizer(language):
    score, signature = corpus_bleu([CHINESE_HYPOTHESIS], [CHINESE_REFERENCE], language=language)
    expected = sacrebleu.corpus_bleu([CHINESE_HYPOTHESIS], [[CHINESE_REFERENCE]], tokenize="zh")
    assert score == pytest.approx(expected.score) and 50 < score < 100 and "tok:zh" in signature
    assert corpus_bleu([CHINESE_HYPOTHESIS], [CHINESE_REFERENCE])[0] == 0.0  # what 13a gives: one word each


def test_thai_is_scored_over_characters_and_spaced_languages_keep_13a():
    hypothesis, reference = "สวัสดีครับ", "สวัสดีค่ะ"  # one word each for 13a
    score, signature = corpus_bleu([hypothesis], [reference], language="th")
    assert score == pytest.approx(sacrebleu.corpus_bleu([hypothesis], [[reference]], tokenize="char").score)
    assert score > 0 and "tok:char" in signature
    for language in ("de", "en", "fr", None):  # the signature and the score of every earlier result
        assert corpus_bleu(HYPOTHESES, REFERENCES, language=language) == corpus_bleu(HYPOTHESES, REFERENCES)
    with pytest.raises(TypeError, match="language must be a language code"):
        corpus_bleu(HYPOTHESES, REFERENCES, language=7)


def test_japanese_without_sacrebleus_extra_warns_and_scores_characters():
    try:
        import MeCab  # noqa: F401 (sacrebleu[ja]'s tokenizer)

        pytest.skip("sacrebleu[ja] is installed here: ja-mecab is used")
    except ImportError:
        pass
    hypothesis, reference = "今日はいい天気", "今日はいい天気です"
    with pytest.warns(UserWarning, match=r"pip install \"sacrebleu\[ja\]\".*over characters"):
        score, signature = corpus_bleu([hypothesis], [reference], language="ja")
    assert "tok:char" in signature
    assert score == pytest.approx(sacrebleu.corpus_bleu([hypothesis], [[reference]], tokenize="char").score)


def test_chrf_matches_sacrebleu():
    score, signature = corpus_chrf(HYPOTHESES, REFERENCES)
    assert score == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert corpus_chrf(REFERENCES, REFERENCES)[0] == pytest.approx(100.0)
    assert "nc:6" in signature


def test_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="same length, got 3 and 2"):
        corpus_bleu(HYPOTHESES, REFERENCES[:2])
    with pytest.raises(TypeError, match="references must be a list of strings"):
        corpus_chrf(HYPOTHESES, "The cat.")
    with pytest.raises(TypeError, match=r"hypotheses\[1\] must be a str"):
        corpus_bleu(["a", 3, "c"], REFERENCES)
    with pytest.raises(ValueError, match="must not be empty"):
        corpus_bleu([], [])


def _uniform_model(vocab: int) -> Transformer:
    """Every next-token distribution is uniform: the output projection is all zeros."""
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            src_vocab_size=vocab,
            tgt_vocab_size=vocab,
            d_model=16,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            d_ff=32,
            max_len=32,
        )
    )
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.zero_()
    return model


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size():
    batches = make_batches(synthetic_pairs("reverse", 40, vocab_size=23, seed=0), 60, seed=0)
    assert perplexity(_uniform_model(23), batches) == pytest.approx(23.0, rel=1e-5)


def test_perplexity_ignores_padding():
    model = copy_model()
    pairs = synthetic_pairs("reverse", 30, max_len=COPY_MAX_LEN, vocab_size=COPY_VOCAB, seed=5)
    padded = make_batches(pairs, 10**6)  # one batch, lots of padding
    one_by_one = make_batches(pairs, 1)  # one pair per batch, no padding at all
    assert len(padded) == 1 and len(one_by_one) == 30
    value = perplexity(model, padded)
    assert value == pytest.approx(perplexity(model, one_by_one), rel=1e-4)
    # The copy model has not learnt to reverse: its perplexity is far above 1 (and finite).
    assert 1.5 < value < math.inf


def test_perplexity_bad_input():
    with pytest.raises(TypeError, match="batches must hold companion Batch"):
        perplexity(copy_model(), [("src", "tgt")])
    with pytest.raises(TypeError, match="model"):
        perplexity(None, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("batches hold no target tokens: perplexity is undefined")):
        perplexity(copy_model(), [])


def test_perplexity_in_train_mode_runs_without_dropout_and_restores_the_mode():
    torch.manual_seed(0)
    config = TransformerConfig(
        23, 23, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, max_len=32,
        dropout=0.3, attention_dropout=0.3, ffn_dropout=0.3,
    )  # fmt: skip
    model = Transformer(config).eval()
    batches = make_batches(synthetic_pairs("reverse", 40, vocab_size=23, seed=1), 60, seed=0)
    in_eval = perplexity(model, batches)
    model.train()
    assert perplexity(model, batches) == perplexity(model, batches) == in_eval  # no dropout masks drawn
    assert model.training


def test_evaluate_translation_and_choose_alpha_need_pairs():
    tokenizer = WordTokenizer("en", list(SPECIAL_TOKENS) + ["apple", "bear", "cat", "dog", "egg", "fox"])
    with pytest.raises(ValueError, match=re.escape("pairs must not be empty")):
        evaluate_translation(copy_model(), [], tokenizer, tokenizer)
    with pytest.raises(ValueError, match=re.escape("pairs must not be empty")):
        choose_alpha(copy_model(), iter([]), tokenizer, tokenizer)


def test_evaluate_translation_on_the_copy_task():
    words = ["apple", "bear", "cat", "dog", "egg", "fox"]
    tokenizer = WordTokenizer("en", list(SPECIAL_TOKENS) + words)
    pairs = [
        (" ".join(words[i - 4] for i in src), " ".join(words[i - 4] for i in tgt))
        for src, tgt in synthetic_pairs("copy", 40, max_len=COPY_MAX_LEN, vocab_size=COPY_VOCAB, seed=7)
    ]
    result = evaluate_translation(copy_model(), pairs, tokenizer, tokenizer, beam_size=4, batch_size=16)
    assert set(result) == {"bleu", "bleu_signature", "chrf", "chrf_signature", "hypotheses"}
    assert result["hypotheses"] == [source for source, _ in pairs]
    assert result["bleu"] == pytest.approx(100.0) and result["chrf"] == pytest.approx(100.0)
    # Against wrong references the scores drop.
    shuffled = [(source, pairs[(i + 1) % len(pairs)][1]) for i, (source, _) in enumerate(pairs)]
    worse = evaluate_translation(copy_model(), shuffled, tokenizer, tokenizer, beam_size=1)
    assert worse["bleu"] < 50 and worse["chrf"] < result["chrf"]
