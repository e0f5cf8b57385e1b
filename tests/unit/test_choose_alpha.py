"""Choosing the length penalty: one beam search re-ranked under several alphas (companion.decode.translate_alphas),
the choice on held-out pairs (companion.evaluate.choose_alpha) and its record in a checkpoint
(companion.checkpoint.record_decoding)."""

from __future__ import annotations

import math

import pytest
import torch
from _copy_model import random_model

import companion.evaluate as evaluate_module
from companion import Transformer, TransformerConfig
from companion.checkpoint import load_checkpoint, record_decoding, save_checkpoint
from companion.data import SPECIAL_TOKENS, WordTokenizer
from companion.decode import MAX_ALPHA, check_alphas, translate, translate_alphas, translate_ids, translate_ids_alphas
from companion.errors import CheckpointError
from companion.evaluate import ALPHA_GRID, AlphaChoice, alpha_choice, choose_alpha, corpus_bleu

pytestmark = pytest.mark.usefixtures("one_thread")

SRC_WORDS = [f"s{i}" for i in range(13)]  # random_model(): 17 source ids = 4 special + 13 words
TGT_WORDS = [f"t{i}" for i in range(15)]  # 19 target ids


def tokenizers() -> tuple[WordTokenizer, WordTokenizer]:
    return WordTokenizer("de", list(SPECIAL_TOKENS) + SRC_WORDS), WordTokenizer("en", list(SPECIAL_TOKENS) + TGT_WORDS)


def sources(count: int = 24) -> list[str]:
    generator = torch.Generator().manual_seed(5)
    lengths = torch.randint(2, 9, (count,), generator=generator).tolist()
    return [" ".join(SRC_WORDS[i] for i in torch.randint(0, 13, (n,), generator=generator).tolist()) for n in lengths]


@pytest.mark.parametrize("beam_size", [1, 3, 5])
def test_one_search_gives_what_translate_gives_at_each_alpha(beam_size):
    model, (src_tok, tgt_tok), sentences = random_model(), tokenizers(), sources()
    alphas = [0.0, 0.6, 2.0, 6.0]
    outputs = translate_alphas(model, sentences, src_tok, tgt_tok, alphas=alphas, beam_size=beam_size, batch_size=7)
    assert list(outputs) == alphas
    for alpha in alphas:
        assert outputs[alpha] == translate(
            model, sentences, src_tok, tgt_tok, beam_size=beam_size, alpha=alpha, batch_size=7
        ), alpha
    distinct = {tuple(texts) for texts in outputs.values()}
    # the re-ranking is exercised: with a beam, the alphas pick different winners for some sentences
    assert len(distinct) == 1 if beam_size == 1 else len(distinct) > 1


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_id_level_search_gives_what_translate_ids_gives_at_each_alpha(beam_size):
    model, (src_tok, _) = random_model(), tokenizers()
    ids = [src_tok.encode(sentence) + [src_tok.eos_id] for sentence in sources()]
    alphas = [0.0, 1.0, 4.0]
    outputs = translate_ids_alphas(model, ids, alphas=alphas, beam_size=beam_size, batch_size=5)
    for alpha in alphas:
        assert outputs[alpha] == translate_ids(model, ids, beam_size=beam_size, alpha=alpha, batch_size=5)
    outputs[0.0][0].append(99)  # each alpha's lists are its own, even where greedy search makes them equal
    assert outputs[1.0][0] != outputs[0.0][0]
    with pytest.raises(ValueError, match="distinct"):
        translate_ids_alphas(model, ids, alphas=[1, 1.0])


def test_alpha_choice_scores_translations_made_elsewhere():
    references = ["t1 t2 t3 t4", "t5 t6 t7 t8"]
    choice = alpha_choice({2.0: references, 0.6: ["t1 t2", "t5"]}, references, beam_size=8)
    assert choice.alpha == 2.0 and choice.bleu[2.0] == 100.0 and choice.beam_size == 8 and choice.sentences == 2
    with pytest.raises(ValueError, match="same length"):
        alpha_choice({1.0: references[:1]}, references, beam_size=4)
    with pytest.raises(ValueError, match="map each alpha"):
        alpha_choice({}, references, beam_size=4)


def test_alpha_choice_scores_a_chinese_target_with_sacrebleus_chinese_tokenizer():
    references = ["我爱他。今天天气很好", "他们在公园里跑步"]
    outputs = {0.6: ["我爱你。今天天气很好", "他们在公园"], 2.0: ["我爱你。今天天气", "他们在公园里跑"]}
    choice = alpha_choice(outputs, references, beam_size=4, language="zh")
    assert "tok:zh" in choice.bleu_signature and min(choice.bleu.values()) > 0
    assert choice.alpha == max(choice.bleu, key=lambda a: (choice.bleu[a], -a))
    # with 13a each sentence is one word, no hypothesis matches its reference, and the choice says nothing
    assert set(alpha_choice(outputs, references, beam_size=4).bleu.values()) == {0.0}


@pytest.mark.parametrize(
    "alphas, message",
    [
        ([], "non-empty"),
        ("0.6", "non-empty list"),
        ([0.6, 0.6], "distinct"),
        ([0.6, -1], r"alphas\[1\]"),
        ([MAX_ALPHA + 1], r"alphas\[0\]"),
        ([math.nan], r"alphas\[0\]"),
    ],
)
def test_bad_alphas_are_refused_by_name(alphas, message):
    with pytest.raises(ValueError, match=message):
        check_alphas(alphas)
    model, (src_tok, tgt_tok) = random_model(), tokenizers()
    with pytest.raises(ValueError, match=message):
        translate_alphas(model, ["s1 s2"], src_tok, tgt_tok, alphas=alphas)


def test_the_highest_bleu_wins_and_the_smaller_alpha_on_a_tie(monkeypatch):
    references = ["t1 t2 t3 t4 t5", "t6 t7 t8 t9", "t10 t11 t12 t13 t14"]
    short = ["t1 t2", "t6 t7", "t10 t11"]
    outputs = {0.6: short, 1.0: references, 2.0: references, 3.0: short}
    monkeypatch.setattr(evaluate_module, "translate_alphas", lambda *args, alphas, **kwargs: outputs)
    src_tok, tgt_tok = tokenizers()
    choice = choose_alpha(
        random_model(), [("s1", r) for r in references], src_tok, tgt_tok, alphas=[0.6, 1.0, 2.0, 3.0]
    )
    assert choice.alpha == 1.0  # 1.0 and 2.0 tie at 100: the smaller one
    assert choice.bleu[1.0] == choice.bleu[2.0] == 100.0 and choice.bleu[0.6] < 50
    assert choice.length_ratio[0.6] == round(6 / 14, 3) and choice.length_ratio[1.0] == 1.0
    assert choice.sentences == 3 and "tok:13a" in choice.bleu_signature
    record = choice.to_dict()
    assert record["bleu"] == {"0.6": choice.bleu[0.6], "1": 100.0, "2": 100.0, "3": choice.bleu[3.0]}
    assert record["alpha"] == 1.0 and record["beam_size"] == 4


def test_the_scores_are_those_of_translating_at_each_alpha():
    model, (src_tok, tgt_tok), sentences = random_model(), tokenizers(), sources(30)
    references = translate(model, sentences, src_tok, tgt_tok, beam_size=4, alpha=2.0)  # BLEU 100 at alpha 2.0
    choice = choose_alpha(model, list(zip(sentences, references)), src_tok, tgt_tok, alphas=ALPHA_GRID)
    assert isinstance(choice, AlphaChoice) and choice.bleu[2.0] == 100.0
    assert choice.alpha == min(alpha for alpha in ALPHA_GRID if choice.bleu[alpha] == 100.0)
    assert min(choice.bleu.values()) < 100  # some alpha picks other winners
    for alpha in ALPHA_GRID:
        expected = corpus_bleu(translate(model, sentences, src_tok, tgt_tok, alpha=alpha), references)[0]
        assert choice.bleu[alpha] == round(expected, 2)


def test_choose_alpha_refuses_empty_pairs():
    src_tok, tgt_tok = tokenizers()
    with pytest.raises(ValueError, match="pairs must not be empty"):
        choose_alpha(random_model(), [], src_tok, tgt_tok)


# -- the record in the checkpoint -------------------------------------------------------------------------
def small_checkpoint(path):
    src_tok, tgt_tok = tokenizers()
    config = TransformerConfig(17, 19, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32)
    return save_checkpoint(
        path, model=Transformer(config), step=7, tokenizers={"src": src_tok, "tgt": tgt_tok}, metrics={"loss": 1.5}
    )


def test_record_decoding_adds_the_entry_and_keeps_everything_else(tmp_path):
    path = small_checkpoint(tmp_path / "m.pt")
    before = load_checkpoint(path)
    record_decoding(path, {"beam_size": 4, "alpha": 1.5, "chosen_on": "valid", "bleu": {"1.5": 30.0}})
    after = load_checkpoint(path)  # the digest is checked: it was renewed
    assert after["decoding"] == {"beam_size": 4, "alpha": 1.5, "chosen_on": "valid", "bleu": {"1.5": 30.0}}
    assert {k: v for k, v in after.items() if k not in ("decoding", "content_sha256", "model_state")} == {
        k: v for k, v in before.items() if k not in ("content_sha256", "model_state")
    }
    assert all(torch.equal(after["model_state"][k], v) for k, v in before["model_state"].items())
    record_decoding(path, {"beam_size": 8, "alpha": 0.6})  # a later choice replaces the earlier one
    assert load_checkpoint(path)["decoding"] == {"beam_size": 8, "alpha": 0.6}


@pytest.mark.parametrize(
    "decoding, message",
    [
        ({"alpha": 1.0}, "beam_size from 1"),
        ({"beam_size": 0, "alpha": 1.0}, "beam_size from 1"),
        ({"beam_size": True, "alpha": 1.0}, "beam_size from 1"),
        ({"beam_size": 4, "alpha": MAX_ALPHA + 1}, "alpha from 0"),
        ({"beam_size": 4, "alpha": "1.0"}, "alpha from 0"),
        ({"beam_size": 4, "alpha": math.nan}, "alpha from 0"),
        ([4, 1.0], "must be a dict"),
    ],
)
def test_a_bad_decoding_entry_is_refused_and_the_file_kept(tmp_path, decoding, message):
    path = small_checkpoint(tmp_path / "m.pt")
    original = path.read_bytes()
    with pytest.raises(CheckpointError, match=message):
        record_decoding(path, decoding)
    assert path.read_bytes() == original
    if isinstance(decoding, dict):  # a file that holds one is refused on loading, naming the entry
        checkpoint = load_checkpoint(path)
        checkpoint["decoding"] = decoding
        torch.save(checkpoint, tmp_path / "bad.pt")
        with pytest.raises(CheckpointError, match="'decoding'"):
            load_checkpoint(tmp_path / "bad.pt", verify=False)
