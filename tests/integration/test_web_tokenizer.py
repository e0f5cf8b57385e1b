"""The in-page word tokenizer (web/translator/tokenizer.js) gives exactly the ids and texts of the Python
WordTokenizer: on every German sentence of Multi30k, on edge cases and random strings, and for decoding English
ids. (The word tokenizers here are built from the validation split, or from the edge cases when the data is not
here, so the test does not depend on which tokenizer a shipped model uses; tests/integration/test_web_subword.py
checks the subword tokenizer.) Every JavaScript result comes from ONE node process (tokenize_cli.js), run once
for the whole module; Python computes the reference with spaCy itself."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest
from _node import node

from companion.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, load_multi30k
from companion.data.spacy_export import RULES_FORMAT, python_regex_to_js, spacy_tokenizer_rules
from companion.data.tokenizers import WordTokenizer

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "web" / "translator" / "tokenize_cli.js"
DATA = Path(os.environ.get("COMPANION_DATA_DIR") or REPO.parent / "shared" / "data" / "multi30k")
SPLIT_SIZES = {"test": 1000, "valid": 1014, "train": 29000}

LONG_TEXT = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt (z.B. den Hund). " * 300
EDGE_CASES = [
    # empty and whitespace only
    *["", " ", "   ", "\t", "\n", " \t\n\u00a0\u2003 ", "\u3000", "\u00a0"],
    # whitespace around and between tokens (a single " " belongs to the token before it, the rest does not)
    *[" Ein Hund läuft. ", "Ein  Hund\tläuft\n\nschnell .", "Ein Hund\u00a0läuft", "Hund\u200bKatze", "a \u00a0b"],
    # non-Latin scripts, emoji
    *["Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок.", "我爱你。你好吗？"],
    *["東京タワーは333メートルです。", "한국어 문장입니다.", "😀 Ein Hund 🐶🐕‍🦺 spielt!👍🏽", "🇩🇪🇬🇧", "(😀)"],
    *["مرحبا بالعالم، كيف حالك؟", "שלום עולם!", "Γειά σου Κόσμε!", "नमस्ते दुनिया।", "𝔄𝔟𝔠 𝟙𝟚𝟛"],
    # URLs and e-mail addresses
    *["Besuche https://www.example.com/pfad?x=1&y=2#a oder www.beispiel.de.", "(http://example.org/a_b),"],
    *["<https://t.co/xyz>", "E-Mail an max.mustermann@example.com schreiben", "ftp://192.168.0.1:8080/d.txt"],
    *["localhost:8000", "http://10.0.0.1/", "https://de.wikipedia.org/wiki/Straße_(Begriff)"],
    # numbers
    *["Er kostet 3,50 € bzw. 1.000.000 Euro.", "10-15 Stück, 3.5%, 1/2, 25°C, 2x, +49 30 123456, -5, 1990er."],
    *["Am 3. Oktober 1990 um 14:30 Uhr.", "1.", "1.2.3", "$5", "5$", "US$5", "٣٤٥"],
    # abbreviations (tokenizer exceptions)
    *["Nr. 5", "z.B.", "z. B.", "(z.B.)", "z.B.,", "„z.B.“", "usw.", "usw..", "usw.)", "Nr.5", "Mio.€"],
    *["d.h. Dr. Müller u.a. bzw. ggf. vgl. S. 3", "A.B.C. U.S.A. e.V. GmbH & Co. KG"],
    # hyphens and apostrophes
    *["Mutter-Kind-Beziehung, E-Mail, 10-jährig, --, Nord- und Südamerika, A--B, -x, x-"],
    *["Peter's Hund, geht's, 's ist gut, ’s ist gut, gibt’s, D'Artagnan, Ku'damm"],
    *["„Hallo“, sagte er. »Gut« ‚ja‘ 'nein' \"vielleicht\"", "``Zitat'' ''x''"],
    # punctuation runs and symbols
    *["Was?! Nein... Doch…… Ja!!! (((x))) [a] {b} <c>", "Wort.Wort Wort,Wort Wort;Wort Wort:Wort Wort/Wort"],
    *[":) :-( ;) <3 ¯\\_(ツ)_/¯ (ಠ_ಠ)", "\\n \\t", "&amp; #hashtag @user", "ÄÖÜäöüß Straße", "e\u0301 cafe\u0301"],
    # very long input
    *[LONG_TEXT, "Hund" * 2000, "." * 1000, "a " * 5000, "-" * 500],
    # not Unicode text: both refuse
    "Hund \ud800",
]
# pieces for random strings: characters and fragments that exercise prefixes, suffixes, infixes, exceptions
FUZZ_PIECES = list("aBäßZ09 .,;:!?'\"„“’‘-–—()[]/\\@#&*+=%€$§…\t\n\u00a0") + [
    *["z.B.", "usw.", "Nr.", "'s", "’s", "http://", "www.", ".de", ":)", "o.ä.", "Hund", "ca.", "--", "..."],
    *["10", "3,5", "e.V.", "U.S.A.", "d.h.", "x-y", "Mio.", "St.", "``", "''", "😀", "中文", "кот", " "],
]


def fuzz_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(FUZZ_PIECES, k=rng.randint(1, 14))) for _ in range(count)]


def special_case_probes(rules: dict) -> list[str]:
    """Every exception, alone and glued to affixes, to exercise both special-case passes."""
    frames = ["{}", "({})", "{}.", "{},", "x{}", "„{}“", "{}-x", "{} {}", "{}{}"]
    return [frame.format(chunk, chunk) for chunk in rules["special_cases"] for frame in frames]


def python_result(function, *args):
    """``function(*args)``, or ``"error"`` when it raises (JavaScript then must raise too)."""
    try:
        return function(*args)
    except (TypeError, ValueError):
        return "error"


def js_value(item):
    return "error" if isinstance(item, dict) and "error" in item else item


# -- fixtures: the Python side, then one node run for everything ---------------------------------------------


# every English token crafted_id_lists spells, so that the English vocabulary has them whatever it is built from
CRAFTED_ENGLISH = "a dog runs. \" hello \" says the man. a man's hat (red), a woman's bag. ! ?"


@pytest.fixture(scope="module")
def corpus():
    """Multi30k German/English sentences per split, or None when the data is not here."""
    if not (DATA / "train.de.gz").is_file() and not (DATA / "train.de").is_file():
        return None
    splits = load_multi30k(src="de", tgt="en", data_dir=DATA)
    return {name: ([de for de, _ in pairs], [en for _, en in pairs]) for name, pairs in splits.items()}


@pytest.fixture(scope="module")
def word_tokenizers(corpus):
    """A German and an English WordTokenizer: from the validation split, or from the edge cases without data."""
    german = corpus["valid"][0] if corpus else [text for text in EDGE_CASES if "\ud800" not in text]
    english = corpus["valid"][1] if corpus else ["A man in a red hat.", "Two women walk down the street."]
    return WordTokenizer.build(german, "de"), WordTokenizer.build([*english, CRAFTED_ENGLISH], "en")


@pytest.fixture(scope="module")
def rules():
    return {"de": spacy_tokenizer_rules("de"), "en": spacy_tokenizer_rules("en")}


@pytest.fixture(scope="module")
def cases(word_tokenizers, corpus, rules):
    """Every input, by name: German texts for the source tokenizer, English texts for the en rules, id lists
    and token lists for the target tokenizer."""
    src, tgt = word_tokenizers
    german = {"edge": EDGE_CASES, "fuzz": fuzz_texts(3000, seed=0), "specials": special_case_probes(rules["de"])}
    english = {"fuzz": fuzz_texts(1000, seed=1), "specials": special_case_probes(rules["en"])}
    if corpus is not None:
        german |= {split: corpus[split][0] for split in SPLIT_SIZES}
        english["test"] = corpus["test"][1]
    return {"german": german, "english": english, "decode": crafted_id_lists(tgt, corpus)}


def crafted_id_lists(tgt, corpus) -> dict[str, list]:
    def ids(*tokens: str) -> list[int]:
        return [tgt.stoi[token] for token in tokens]

    quote, dog, runs = '"', "dog", "runs"
    crafted = [
        [],
        [EOS_ID],
        [BOS_ID, *ids("a", dog, runs, "."), EOS_ID],
        [BOS_ID, *ids("a", dog), EOS_ID, *ids(runs, ".")],  # <eos> in the middle: the rest is dropped
        [PAD_ID, BOS_ID, PAD_ID, *ids("a"), PAD_ID, *ids(dog), PAD_ID, PAD_ID],
        [UNK_ID, *ids("a", dog), UNK_ID, UNK_ID, *ids(".")],
        ids(quote, "hello", quote, "says", "the", dog, ".", quote, "man"),  # an odd number of quotes
        ids(quote, quote, quote, quote),
        ids("a", "man", "'s", "hat", "(", "red", ")", ",", "a", "woman", "'s", "bag", ".", "!", "?"),
        list(range(4, len(tgt.itos))),  # the whole vocabulary
        [len(tgt.itos)],  # out of range: both must refuse
        [-1],
        [1.5],
        [True],
    ]
    references = [tgt.encode(text) + [EOS_ID, PAD_ID, PAD_ID] for text in corpus["test"][1]] if corpus else []
    token_lists = [tgt.tokenize(text) for text in (corpus["test"][1] if corpus else [])]
    token_lists += [[quote, "x", quote, "y", quote], ["never-seen", "<unk>", "'s", "n't", "."], [quote], []]
    return {"crafted": crafted, "references": references, "tokens": token_lists}


REGEX_CASES = [
    (r"\w+", ["abc äöü 中文 x_1 ٣", "--", "𝔄𝔟"]),
    (r"\d+\s\S", ["12 a", "٣٤ b", "x 1\u00a0y", "a\u2003b"]),
    (r"\bfoo\b", ["foo", "xfoo foo.", "äfoo", "foo_", "(foo)"]),
    (r"x$", ["x", "x\n", "x\n\n", "xy"]),
    (r"\Ax.\Z", ["xy", "x\n", "xy\n"]),
    (r"a.*?b", ["a12b34b", "a\nb", "ab"]),
    (r"(?s)a.b", ["a\nb", "acb"]),
    (r"(?a)\w+", ["abc äöü", "x1_"]),
    (r"(?<=[0-9])-(?=[0-9])|(?<![a-z])'", ["10-15", "a-b", "'x", "x'y"]),
    (r"[^\W\d]+|[\s\d]{2,3}", ["ab12 3c", "ä_ 45 6"]),
    (r"(?:ab|a)(c|d){1,2}x?", ["acdx", "abdd", "ac"]),
    (r"[\U0001F600-\U0001F64F]+", ["😀😃 x 🙏"]),
    (r"^\.\.+|…$", ["...", "x…", ". ."]),
]


def regex_requests() -> list[dict]:
    requests = []
    for pattern, texts in REGEX_CASES:
        spec = python_regex_to_js(re.compile(pattern))
        requests += [{**spec, "method": method, "text": t} for t in texts for method in ("search", "match", "finditer")]
    return requests


@pytest.fixture(scope="module")
def js(word_tokenizers, rules, cases):
    """All JavaScript results, from one node process."""
    src, tgt = word_tokenizers
    german_names, english_names = list(cases["german"]), list(cases["english"])
    decode = cases["decode"]
    requests = [
        {"rules": rules["de"], "tokenizer": src.to_dict(), "texts": sum(cases["german"].values(), [])},
        {"rules": rules["en"], "texts": sum(cases["english"].values(), [])},
        {
            "tokenizer": tgt.to_dict(),
            "decode": decode["crafted"] + decode["references"],
            "detokenize": decode["tokens"],
        },
        {"regexes": regex_requests()},
        {"rules": rules["de"], "tokenizer": src.to_dict(), "texts": EDGE_CASES, "classic_script": True},
    ]
    german, english, decoded, regexes, classic = run_tokenize_cli(requests)
    return {
        "german": split_by_name(german, cases["german"], german_names),
        "english": split_by_name(english, cases["english"], english_names),
        "decoded": decoded["decoded"],
        "detokenized": decoded["detokenized"],
        "regex_spans": regexes["spans"],
        "classic_script": classic,
    }


def run_tokenize_cli(requests: list[dict]) -> list[dict]:
    """tokenize_cli.js's results for ``requests``, from one node process."""
    completed = subprocess.run(
        [node("tokenizer (web/translator/tokenizer.js)"), str(CLI)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    assert completed.returncode == 0, f"tokenize_cli.js failed:\n{completed.stderr[-3000:]}"
    return json.loads(completed.stdout)


def split_by_name(result: dict, inputs: dict[str, list], names: list[str]) -> dict[str, dict[str, list]]:
    out, start = {}, 0
    for name in names:
        end = start + len(inputs[name])
        out[name] = {key: values[start:end] for key, values in result.items()}
        start = end
    return out


def mismatch_report(texts, python, javascript, limit=3) -> str:
    bad = [i for i, (p, j) in enumerate(zip(python, javascript)) if p != j]
    lines = [f"{len(bad)} of {len(texts)} differ (python gave {len(python)} results, js {len(javascript)})"]
    lines += [f"  {texts[i]!r}\n    python: {python[i]}\n    js:     {javascript[i]}" for i in bad[:limit]]
    return "\n".join(lines)


# -- tokens and ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", list(SPLIT_SIZES))
def test_multi30k_german_ids_are_identical(split, word_tokenizers, corpus, cases, js):
    if corpus is None:
        pytest.skip(f"Multi30k not found in {DATA} (set COMPANION_DATA_DIR)")
    src, _ = word_tokenizers
    texts = cases["german"][split]
    assert len(texts) == SPLIT_SIZES[split]
    python_ids = src.encode_batch(texts)
    javascript_ids = js["german"][split]["ids"]
    assert python_ids == javascript_ids, mismatch_report(texts, python_ids, javascript_ids)
    assert sum(map(len, python_ids)) > 8 * len(texts)  # real sentences, not empty lists compared


@pytest.mark.parametrize("group", ["edge", "fuzz", "specials"])
def test_german_tokens_and_ids_are_identical_on_hard_inputs(group, word_tokenizers, cases, js):
    src, _ = word_tokenizers
    texts = cases["german"][group]
    python_tokens = [python_result(src.tokenize, text) for text in texts]
    python_ids = [python_result(src.encode, text) for text in texts]
    result = js["german"][group]
    javascript_tokens = [js_value(item) for item in result["tokens"]]
    javascript_ids = [js_value(item) for item in result["ids"]]
    assert python_tokens == javascript_tokens, mismatch_report(texts, python_tokens, javascript_tokens)
    assert python_ids == javascript_ids, mismatch_report(texts, python_ids, javascript_ids)


def test_edge_cases_say_what_they_test(word_tokenizers, js):
    """A few edge cases spelled out, from Python (the reference), so that the comparison above means what it
    claims: nothing for empty or blank text, exceptions kept whole, URLs kept whole."""
    src, _ = word_tokenizers
    edge = dict(zip(EDGE_CASES, js["german"]["edge"]["tokens"], strict=True))
    assert edge[""] == edge["   "] == edge[" \t\n\u00a0\u2003 "] == src.tokenize("   ") == []
    assert "z.B." in src.tokenize("(z.B.)") and "z.B." in edge["(z.B.)"]
    url = "https://www.example.com/pfad?x=1&y=2#a"
    assert (
        url in src.tokenize(f"Besuche {url} oder www.beispiel.de.")
        and url in edge[f"Besuche {url} oder www.beispiel.de."]
    )
    assert len(edge[LONG_TEXT]) == len(src.tokenize(LONG_TEXT)) > 4000


def test_the_page_script_gives_the_same_results(js):
    """Loaded as a page loads it (a classic script setting globalThis.CompanionTokenizer), not as a module."""
    assert js["classic_script"] == js["german"]["edge"]


def test_lone_surrogates_are_refused_by_both(word_tokenizers, js):
    src, _ = word_tokenizers
    with pytest.raises(ValueError, match="lone surrogate"):
        src.encode("Hund \ud800")
    assert "lone surrogate" in js["german"]["edge"]["ids"][EDGE_CASES.index("Hund \ud800")]["error"]


@pytest.mark.parametrize("group", ["test", "fuzz", "specials"])
def test_english_rules_give_spacys_english_tokens(group, word_tokenizers, corpus, cases, js):
    """The export is not German-specific: spaCy's English rules (1,347 exceptions) run the same way."""
    if group not in cases["english"]:
        pytest.skip(f"Multi30k not found in {DATA} (set COMPANION_DATA_DIR)")
    _, tgt = word_tokenizers
    texts = cases["english"][group]
    python_tokens = [python_result(tgt.tokenize, text) for text in texts]
    javascript_tokens = [js_value(item) for item in js["english"][group]["tokens"]]
    assert python_tokens == javascript_tokens, mismatch_report(texts, python_tokens, javascript_tokens)


# -- decoding -----------------------------------------------------------------------------------------------


def test_decode_matches_python_on_the_test_references(word_tokenizers, corpus, cases, js):
    if corpus is None:
        pytest.skip(f"Multi30k not found in {DATA} (set COMPANION_DATA_DIR)")
    _, tgt = word_tokenizers
    id_lists = cases["decode"]["references"]
    python_texts = [tgt.decode(ids) for ids in id_lists]
    javascript_texts = js["decoded"][len(cases["decode"]["crafted"]) :]
    assert len(python_texts) == SPLIT_SIZES["test"]
    assert python_texts == javascript_texts, mismatch_report(id_lists, python_texts, javascript_texts)


def test_decode_matches_python_on_crafted_ids(word_tokenizers, cases, js):
    _, tgt = word_tokenizers
    id_lists = cases["decode"]["crafted"]
    python_texts = [python_result(tgt.decode, ids) for ids in id_lists]
    javascript_texts = [js_value(item) for item in js["decoded"][: len(id_lists)]]
    assert python_texts == javascript_texts, mismatch_report(id_lists, python_texts, javascript_texts)
    assert python_texts[-4:] == ["error"] * 4 and "<unk>" in python_texts[5]


def test_detokenize_matches_python(word_tokenizers, cases, js):
    _, tgt = word_tokenizers
    token_lists = cases["decode"]["tokens"]
    python_texts = [tgt.detokenize(tokens) for tokens in token_lists]
    assert python_texts == js["detokenized"], mismatch_report(token_lists, python_texts, js["detokenized"])


# -- the rules and the regex conversion ---------------------------------------------------------------------


def test_rules_are_json_and_describe_the_tokenizer(rules):
    de = rules["de"]
    assert json.loads(json.dumps(de)) == de
    assert de["format"] == RULES_FORMAT and de["language"] == "de" and de["token_match"] is None
    assert de["special_cases"]["z.B."] == ["z.B."] and de["url_match"]["flags"] == "u"
    assert all("".join(tokens) == chunk for chunk, tokens in de["special_cases"].items())


@pytest.mark.parametrize(("language", "error"), [(5, TypeError), ("xx-not-a-language", ValueError), ("", ValueError)])
def test_rules_refuse_bad_languages(language, error):
    with pytest.raises(error, match="language"):
        spacy_tokenizer_rules(language)


def test_converted_regexes_match_where_python_matches(js):
    expected = []
    for pattern, texts in REGEX_CASES:
        compiled = re.compile(pattern)
        for text in texts:
            search, match = compiled.search(text), compiled.match(text)
            expected += [[m.span() for m in [search] if m], [m.span() for m in [match] if m]]
            expected.append([m.span() for m in compiled.finditer(text)])
    javascript = [[tuple(span) for span in spans] for spans in js["regex_spans"]]
    assert javascript == expected


@pytest.mark.parametrize(
    "pattern",
    [r"(?i)hund", r"(?m)^x", r"(a)\1", r"\Bx", r"(?i:x)y", r"(?:x)++", r"(?>ab|a)", r"(a)?(?(1)b|c)"],
    ids=["ignorecase", "multiline", "backreference", "non-boundary", "scoped-flag", "possessive", "atomic", "cond"],
)
def test_regex_conversion_refuses_what_javascript_matches_differently(pattern):
    try:
        compiled = re.compile(pattern)
    except re.error:
        pytest.skip(f"this Python cannot compile {pattern!r}")
    with pytest.raises(ValueError, match="JavaScript"):
        python_regex_to_js(compiled)


def test_regex_conversion_refuses_non_patterns():
    with pytest.raises(TypeError, match="pattern"):
        python_regex_to_js(r"\w+")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pattern"):
        python_regex_to_js(re.compile(rb"\w+"))
