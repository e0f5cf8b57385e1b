"""The in-page subword tokenizer (web/translator/tokenizer.js) gives exactly the subwords, ids and texts of the
Python SubwordTokenizer (Hugging Face ``tokenizers``): for every shipped model that uses one (de-en) on every
sentence of Multi30k in both languages, and for a BPE trained here on edge cases and random strings
(whitespace of every kind, special-token texts inside the text, unseen characters, punctuation of every kind).
Every JavaScript result comes from ONE node process (tokenize_cli.js), run once for the whole module."""

from __future__ import annotations

import json
import random

import pytest
from test_web_tokenizer import (
    DATA,
    EDGE_CASES,
    FUZZ_PIECES,
    js_value,
    mismatch_report,
    python_result,
    run_tokenize_cli,
)

from companion import load_pretrained
from companion.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, load_multi30k
from companion.data.tokenizers import SubwordTokenizer

DIRECTIONS = ("de-en", "en-de")
SUBWORD_EDGE_CASES = [
    # the special tokens' texts inside a text are those tokens (the library's added vocabulary)
    *["<unk>", "a<unk>b", " <pad> Hund <eos> ", "<bos><eos>", "<unk", "unk>", "<<unk>>", "< unk >", "<UNK>"],
    # the metaspace character itself, and whitespace the normalizer folds (or does not: U+200B, U+FEFF)
    *["\u2581", "\u2581Hund", "Hund\u2581\u2581Katze", " \u2581 ", "a\u0085b", "a\u2028b\u2029c", "a\ufeffb"],
    *["a\u200bb", "a\u180eb", "\u3000Hund\u3000", "a\r\nb\x0bc\x0cd", "a\u00a0\u00a0b"],
    # punctuation: ASCII symbols count as punctuation, Unicode symbols do not
    *["$5 + 3 = 8 ^ 2 | x ~ y `z` <a>", "¿Qué? ¡Sí! «oui» ‹x› 「日本」 ‐ ‑ ‒ – — ― ⁂ ※", "€ £ ¥ © ® ™ ° ± × ÷"],
    *["a_b a-b a.b a'b a’b", "...", "?!?!", "(", "x)", "a...b", "﹏ ＿ ＂ ％"],
    # composed and decomposed letters (NFC), characters never seen in training
    *["e\u0301", "Ä", "A\u0308", "ﬁ", "Å", "Ω", "ẞ", "Ǆ", "🦜🦜", "𝔄𝔟𝔠", "\U0010fffd"],
]
# characters the trained BPE never sees (its training texts leave these out): <unk>, one per character
UNSEEN = ["\u2603", "x\u2603y", "\u2603\u2603 \u2603.", "Hund \u2603\U0001fab8"]
SPLITS = ("train", "valid", "test")


def fuzz_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pieces = FUZZ_PIECES + ["<unk>", "<pad>", "\u2581", "\u0085", "\u2028", "¿", "«", "ﬁ", "e\u0301", "  "]
    return ["".join(rng.choices(pieces, k=rng.randint(1, 14))) for _ in range(count)]


def texts_for_training() -> list[str]:
    return [t for t in EDGE_CASES + SUBWORD_EDGE_CASES + fuzz_texts(2000, seed=3) if "\ud800" not in t]


@pytest.fixture(scope="module")
def trained():
    """A BPE trained here on the hard inputs themselves, so that every merge rule is exercised on them."""
    return SubwordTokenizer.train(texts_for_training(), vocab_size=600)


@pytest.fixture(scope="module")
def shipped():
    """The shipped models' subword tokenizers by direction (None where a shipped model is not a subword one)."""
    tokenizers = {}
    for direction in DIRECTIONS:
        model = load_pretrained(direction, download=False)
        tokenizers[direction] = model.src_tokenizer if isinstance(model.src_tokenizer, SubwordTokenizer) else None
    return tokenizers


@pytest.fixture(scope="module")
def corpus():
    """Multi30k sentences by language and split, or None when the data is not here."""
    if not (DATA / "train.de.gz").is_file() and not (DATA / "train.de").is_file():
        return None
    splits = load_multi30k(src="de", tgt="en", data_dir=DATA)
    return {
        language: {name: [pair[side] for pair in pairs] for name, pairs in splits.items()}
        for side, language in enumerate(("de", "en"))
    }


def hard_inputs() -> list[str]:
    return EDGE_CASES + SUBWORD_EDGE_CASES + UNSEEN + fuzz_texts(3000, seed=0)


def crafted_id_lists(tokenizer: SubwordTokenizer) -> list:
    dog = tokenizer.encode("Ein Hund rennt. A dog runs.")
    return [
        [],
        [EOS_ID],
        [BOS_ID, *dog, EOS_ID],
        [BOS_ID, *dog[:2], EOS_ID, *dog[2:]],  # <eos> in the middle: the rest is dropped
        [PAD_ID, BOS_ID, PAD_ID, *dog, PAD_ID],
        [UNK_ID, *dog, UNK_ID],  # <unk> first: its text starts the output
        list(range(4, tokenizer.vocab_size)),  # the whole vocabulary
        [tokenizer.vocab_size],  # out of range: both must refuse
        [-1],
        [1.5],
    ]


@pytest.fixture(scope="module")
def other_configurations(trained) -> dict[str, dict]:
    """Subword tokenizers whose pipeline the page does not implement, by what it must name when it refuses them: a
    unigram model, and the trained BPE with another normalizer."""
    unigram = SubwordTokenizer.train(texts_for_training(), vocab_size=600, model="unigram").to_dict()
    spec = json.loads(trained.to_dict()["tokenizer"])
    spec["normalizer"] = {"type": "Lowercase"}
    return {"model must have type": unigram, "normalizer": {"type": "subword", "tokenizer": json.dumps(spec)}}


@pytest.fixture(scope="module")
def js(trained, shipped, corpus, other_configurations):
    """Every JavaScript result, from one node process: the trained BPE on the hard inputs and crafted ids; each
    shipped tokenizer on the hard inputs, every Multi30k sentence of both languages and the test references."""
    requests = [
        {"tokenizer": trained.to_dict(), "texts": hard_inputs()},
        {"tokenizer": trained.to_dict(), "decode": crafted_id_lists(trained)},
        {"tokenizer": trained.to_dict(), "texts": SUBWORD_EDGE_CASES, "classic_script": True},
        {"tokenizer": trained.to_dict(), "texts": hard_inputs(), "keep_unknown": True},
        *({"tokenizer": tokenizer, "texts": ["Ein Hund."]} for tokenizer in other_configurations.values()),
    ]
    keys = []
    for direction, tokenizer in shipped.items():
        if tokenizer is None:
            continue
        texts = hard_inputs()
        if corpus is not None:
            texts = texts + [text for language in ("de", "en") for split in SPLITS for text in corpus[language][split]]
        references = reference_ids(tokenizer, corpus)
        requests.append({"tokenizer": tokenizer.to_dict(), "texts": texts, "decode": references})
        keys.append(direction)
    results = run_tokenize_cli(requests)
    named = {"trained": results[0], "trained_decoded": results[1]["decoded"], "classic_script": results[2]}
    refused = len(other_configurations)
    named |= {"kept_unknown": results[3]["tokens"], "refused": [r["tokens"][0] for r in results[4 : 4 + refused]]}
    return named | dict(zip(keys, results[4 + refused :], strict=True))


def reference_ids(tokenizer: SubwordTokenizer, corpus) -> list[list[int]]:
    """The test split's references of both languages as ids, with <eos> and padding after them."""
    if corpus is None:
        return []
    texts = corpus["de"]["test"] + corpus["en"]["test"]
    return [ids + [EOS_ID, PAD_ID] for ids in tokenizer.encode_batch(texts)]


def compare_tokens_and_ids(tokenizer, texts, result) -> None:
    python_tokens = [python_result(tokenizer.tokenize, text) for text in texts]
    python_ids = [python_result(tokenizer.encode, text) for text in texts]
    javascript_tokens = [js_value(item) for item in result["tokens"]]
    javascript_ids = [js_value(item) for item in result["ids"]]
    assert python_tokens == javascript_tokens, mismatch_report(texts, python_tokens, javascript_tokens)
    assert python_ids == javascript_ids, mismatch_report(texts, python_ids, javascript_ids)


def test_subwords_and_ids_are_identical_on_hard_inputs(trained, js):
    compare_tokens_and_ids(trained, hard_inputs(), js["trained"])


def test_the_hard_inputs_reach_what_they_are_for(trained):
    """Spelled out from Python (the reference), so that the comparison above means what it claims."""
    assert trained.tokenize("a<unk>b")[1] == "<unk>" and trained.encode("<unk>") == [UNK_ID]
    assert trained.tokenize("a\u0085b") == trained.tokenize("a b")  # NEL is White_Space for the normalizer
    assert trained.tokenize("a\u200bb") != trained.tokenize("a b")  # a zero-width space is not
    assert "¿" in trained.tokenize("¿Qué?") and trained.tokenize("$5")[:2] == ["\u2581", "$"]
    assert trained.encode("x\u2603\u2603y")[1:3] == [UNK_ID, UNK_ID]  # unseen characters, not fused
    assert trained.tokenize("e\u0301") == trained.tokenize("\u00e9")  # NFC


def test_the_page_shows_unknown_characters_as_themselves(trained, js):
    """The page's tokens (keepUnknown): Python's subwords, except that each <unk> of an unseen character is that
    character (so that the page can show and mark it); the ids stay <unk>'s."""
    texts, vocabulary = hard_inputs(), set(trained.itos)
    shown = 0
    for text, kept in zip(texts, js["kept_unknown"], strict=True):
        expected = python_result(trained.tokenize, text)
        if expected == "error":
            assert js_value(kept) == "error"
            continue
        assert len(kept) == len(expected), (text, kept, expected)
        for page_token, python_token in zip(kept, expected):
            if page_token != python_token:
                assert python_token == "<unk>" and len(page_token) == 1 and page_token not in vocabulary
                shown += 1
    assert shown >= len(UNSEEN)


def test_other_configurations_are_refused_by_name(other_configurations, js):
    """A pipeline the page does not implement is an error naming the setting, never a silently different result."""
    for expected, result in zip(other_configurations, js["refused"], strict=True):
        assert "error" in result and expected in result["error"], result


def test_decode_matches_python_on_crafted_ids(trained, js):
    id_lists = crafted_id_lists(trained)
    python_texts = [python_result(trained.decode, ids) for ids in id_lists]
    javascript_texts = [js_value(item) for item in js["trained_decoded"]]
    assert python_texts == javascript_texts, mismatch_report(id_lists, python_texts, javascript_texts)
    assert python_texts[-3:] == ["error"] * 3 and python_texts[5].startswith("<unk>")


def test_the_page_script_gives_the_same_results(js):
    """Loaded as a page loads it (a classic script setting globalThis.CompanionTokenizer), not as a module."""
    start = len(EDGE_CASES)
    assert js["classic_script"]["ids"] == js["trained"]["ids"][start : start + len(SUBWORD_EDGE_CASES)]


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_shipped_tokenizer_is_identical_on_multi30k(direction, shipped, corpus, js):
    tokenizer = shipped[direction]
    if tokenizer is None:
        pytest.skip(f"the shipped {direction} model does not use a subword tokenizer")
    texts = hard_inputs()
    if corpus is not None:
        texts = texts + [text for language in ("de", "en") for split in SPLITS for text in corpus[language][split]]
    compare_tokens_and_ids(tokenizer, texts, js[direction])
    references = reference_ids(tokenizer, corpus)
    python_texts = [tokenizer.decode(ids) for ids in references]
    assert python_texts == js[direction]["decoded"], mismatch_report(references, python_texts, js[direction]["decoded"])
    if corpus is None:
        pytest.skip(f"Multi30k not found in {DATA}: only the hard inputs were compared")
    assert len(texts) - len(hard_inputs()) == 2 * (29000 + 1014 + 1000)
