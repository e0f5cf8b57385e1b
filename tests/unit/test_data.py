"""Tests for companion.data: tokenizers, Multi30k loading, batching, synthetic tasks."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from companion.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
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
from companion.errors import DataUnavailableError

REPO = Path(__file__).resolve().parents[2]
ENGLISH = [
    "Two young, White males are outside near many bushes.",
    "A man's dog runs (fast) toward the T-shirt.",
    'A sign says "Come on now" in red letters.',
    "Several men in hard hats are operating a giant pulley system.",
    "A little girl climbing into a wooden playhouse.",
    "Two men are at the stove preparing food.",
]
GERMAN = [
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Ein Mann z.B. im T-Shirt läuft schnell.",
    "Mehrere Männer mit Schutzhelmen bedienen ein Antriebsradsystem.",
]


# -- tokenizers ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def word_en() -> WordTokenizer:
    return WordTokenizer.build(ENGLISH, "en")


@pytest.fixture(scope="module")
def subword() -> SubwordTokenizer:
    return SubwordTokenizer.train(ENGLISH + GERMAN, vocab_size=200)


def test_special_ids_are_fixed(word_en, subword):
    for tok in (word_en, subword):
        assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert word_en.itos[:4] == list(SPECIAL_TOKENS)


def test_word_tokenizer_round_trip_on_its_training_text(word_en):
    for sentence in ENGLISH:
        ids = word_en.encode(sentence)
        assert UNK_ID not in ids and BOS_ID not in ids and EOS_ID not in ids
        assert word_en.decode(ids) == sentence


def test_word_tokenizer_splits_like_spacy(word_en):
    assert word_en.tokenize("A man's dog runs (fast).") == ["A", "man", "'s", "dog", "runs", "(", "fast", ")", "."]


def test_word_vocabulary_min_freq_and_max_size():
    texts = ["a a a b b c", "a b d"]
    full = WordTokenizer.build(texts, "en")
    assert full.itos[4:] == ["a", "b", "c", "d"]  # by frequency, ties alphabetical
    frequent = WordTokenizer.build(texts, "en", min_freq=2)
    assert frequent.itos[4:] == ["a", "b"]
    assert frequent.encode("c d a") == [UNK_ID, UNK_ID, frequent.stoi["a"]]
    capped = WordTokenizer.build(texts, "en", max_size=5)
    assert capped.vocab_size == 5 and capped.itos[4] == "a"


def test_unknown_words_and_characters_become_unk(word_en, subword):
    ids = word_en.encode("A zebra ☃ runs.")
    assert ids[1] == UNK_ID and ids[2] == UNK_ID and ids[0] != UNK_ID
    assert word_en.decode(ids) == "A <unk> <unk> runs."
    sub_ids = subword.encode("A man ☃ 漢.")
    assert sub_ids.count(UNK_ID) == 2
    assert subword.decode(sub_ids) == "A man <unk> <unk>."


def test_empty_text_encodes_to_nothing(word_en, subword):
    for tok in (word_en, subword):
        assert tok.encode("") == [] and tok.encode("   ") == []
        assert tok.decode([]) == ""


def test_decode_stops_at_eos_and_skips_specials(word_en):
    a, b = word_en.stoi["Two"], word_en.stoi["men"]
    assert word_en.decode([BOS_ID, a, PAD_ID, b, EOS_ID, a, a]) == "Two men"
    assert word_en.decode(torch.tensor([a, b, EOS_ID])) == "Two men"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        word_en.decode([word_en.vocab_size])
    with pytest.raises(TypeError, match="integers"):
        word_en.decode([1.5])


def test_subword_round_trip_and_shared_vocabulary(subword):
    for sentence in ENGLISH + GERMAN:
        ids = subword.encode(sentence)
        assert UNK_ID not in ids
        assert subword.decode(ids) == sentence
    assert subword.vocab_size <= 200


def test_subword_itos_names_every_id(subword):
    assert len(subword.itos) == subword.vocab_size and subword.itos[:4] == list(SPECIAL_TOKENS)
    ids = subword.encode(ENGLISH[0])
    assert [subword.itos[i] for i in ids] == subword.tokenize(ENGLISH[0])


def test_unigram_model_also_round_trips():
    tok = SubwordTokenizer.train(ENGLISH, vocab_size=120, model="unigram")
    assert all(tok.decode(tok.encode(s)) == s for s in ENGLISH)
    with pytest.raises(ValueError, match="model must be 'bpe' or 'unigram'"):
        SubwordTokenizer.train(ENGLISH, model="wordpiece")


@pytest.mark.parametrize("which", ["word", "subword"])
def test_tokenizers_survive_json_round_trip(which, word_en, subword):
    tok = word_en if which == "word" else subword
    rebuilt = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert type(rebuilt) is type(tok) and rebuilt.vocab_size == tok.vocab_size
    for sentence in ENGLISH + ["A zebra ☃ runs."]:
        assert rebuilt.encode(sentence) == tok.encode(sentence)
        assert rebuilt.decode(tok.encode(sentence)) == tok.decode(tok.encode(sentence))
    assert rebuilt.to_dict() == tok.to_dict()


def test_tokenizer_bad_input():
    with pytest.raises(ValueError, match="values\\['type'\\]"):
        tokenizer_from_dict({"type": "chars"})
    with pytest.raises(TypeError, match=re.escape("values must be a dict from Tokenizer.to_dict(), got list")):
        tokenizer_from_dict([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lacks the key"):
        tokenizer_from_dict({"type": "word"})
    with pytest.raises(TypeError, match="single string"):
        WordTokenizer.build("not a list", "en")
    with pytest.raises(ValueError, match="language"):
        WordTokenizer.build(["x"], "no-such-language")
    with pytest.raises(ValueError, match="min_freq"):
        WordTokenizer.build(["x"], "en", min_freq=0)
    with pytest.raises(TypeError, match="text must be a str"):
        WordTokenizer.build(["x"], "en").encode(None)  # type: ignore[arg-type]


def test_a_word_vocabulary_starts_with_the_special_tokens_and_holds_each_token_once():
    with pytest.raises(
        ValueError,
        match=re.escape("itos must start with the special tokens ['<pad>', '<unk>', '<bos>', '<eos>'], got ['a', 'b']"),
    ):
        WordTokenizer("en", ["a", "b"])
    with pytest.raises(ValueError, match=re.escape("got ['<pad>', '<bos>', '<unk>', '<eos>']")):
        WordTokenizer("en", ["<pad>", "<bos>", "<unk>", "<eos>", "a"])  # the right tokens in the wrong order
    with pytest.raises(ValueError, match=re.escape("itos must not hold the same token twice")):
        WordTokenizer("en", [*SPECIAL_TOKENS, "dog", "cat", "dog"])
    with pytest.raises(ValueError, match=re.escape("itos must not hold the same token twice")):
        WordTokenizer("en", [*SPECIAL_TOKENS, "<unk>"])


@pytest.mark.parametrize("vocab_size", [1, 4])
def test_a_subword_vocabulary_needs_room_beyond_the_special_tokens(vocab_size):
    with pytest.raises(ValueError, match=re.escape(f"vocab_size must be larger than 4, got {vocab_size}")):
        SubwordTokenizer.train(ENGLISH, vocab_size=vocab_size)


# -- synthetic tasks and batching --------------------------------------------------------------------------------


def test_synthetic_tasks():
    for task, check in (
        ("copy", lambda s, t: t == s),
        ("reverse", lambda s, t: t == s[::-1]),
        ("sort", lambda s, t: t == sorted(s)),
    ):
        pairs = synthetic_pairs(task, 200, min_len=2, max_len=7, vocab_size=11, seed=3)
        assert len(pairs) == 200 and all(check(s, t) for s, t in pairs)
        assert all(2 <= len(s) <= 7 and all(4 <= i < 11 for i in s) for s, _ in pairs)
        assert pairs == synthetic_pairs(task, 200, min_len=2, max_len=7, vocab_size=11, seed=3)
    assert synthetic_pairs("copy", 50, seed=1) != synthetic_pairs("copy", 50, seed=2)
    with pytest.raises(ValueError, match="task"):
        synthetic_pairs("add", 5)
    with pytest.raises(ValueError, match="vocab_size"):
        synthetic_pairs("copy", 5, vocab_size=4)
    with pytest.raises(ValueError, match="min_len"):
        synthetic_pairs("copy", 5, min_len=5, max_len=3)


def _batches_as_pairs(batches: list[Batch]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Recover the (src, tgt) id pairs from batches, checking the layout of every row on the way."""
    recovered = []
    for batch in batches:
        assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
        assert batch.tgt_in.shape == batch.tgt_out.shape and len(batch) == batch.src.shape[0]
        assert batch.num_src_tokens == int((batch.src != PAD_ID).sum())
        assert batch.num_tgt_tokens == int((batch.tgt_out != PAD_ID).sum())
        for src, tgt_in, tgt_out in zip(batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()):
            n, t = src.index(EOS_ID) + 1, tgt_out.index(EOS_ID) + 1
            assert all(x == PAD_ID for x in src[n:]) and PAD_ID not in src[:n]  # pads only at the end
            assert all(x == PAD_ID for x in tgt_out[t:]) and all(x == PAD_ID for x in tgt_in[t:])
            assert tgt_in[0] == BOS_ID and tgt_in[1:t] == tgt_out[: t - 1]  # shifted by one
            recovered.append((tuple(src[: n - 1]), tuple(tgt_out[: t - 1])))
    return recovered


def test_make_batches_layout_budget_and_coverage():
    pairs = synthetic_pairs("reverse", 500, min_len=1, max_len=30, vocab_size=50, seed=0)
    pairs = [(s, t + t[:3]) for s, t in pairs]  # targets longer than sources
    batches = make_batches(pairs, max_tokens=200, seed=5)
    assert sorted(_batches_as_pairs(batches)) == sorted((tuple(s), tuple(t)) for s, t in pairs)  # each once
    for batch in batches:
        assert len(batch) * max(batch.src.shape[1], batch.tgt_in.shape[1]) <= 200
    widths = [max(b.src.shape[1], b.tgt_in.shape[1]) for b in make_batches(pairs, max_tokens=200, shuffle=False)]
    assert widths == sorted(widths)  # bucketing: unshuffled batches go from short to long
    real = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
    padded = sum(2 * len(b) * max(b.src.shape[1], b.tgt_in.shape[1]) for b in batches)
    assert real / padded > 0.7  # little padding


def test_make_batches_is_deterministic_under_a_seed():
    pairs = synthetic_pairs("copy", 300, max_len=12, vocab_size=30, seed=0)

    def signature(batches):
        return [tuple(b.src.flatten().tolist()) for b in batches]

    same = signature(make_batches(pairs, 120, seed=7))
    assert same == signature(make_batches(pairs, 120, seed=7))
    other = signature(make_batches(pairs, 120, seed=8))
    assert other != same
    assert sorted(_batches_as_pairs(make_batches(pairs, 120, seed=8))) == sorted(
        _batches_as_pairs(make_batches(pairs, 120, seed=7))
    )


def test_make_batches_gives_an_over_long_pair_its_own_batch():
    pairs = [([5] * 40, [6] * 40), ([5], [6]), ([7, 7], [8])]
    batches = make_batches(pairs, max_tokens=10, shuffle=False)
    assert [len(b) for b in batches] == [2, 1] and batches[-1].src.shape == (1, 41)
    with pytest.raises(ValueError, match="max_tokens"):
        make_batches(pairs, max_tokens=0)
    with pytest.raises(TypeError, match="pairs\\[0\\]"):
        make_batches([[1, 2, 3]], max_tokens=10)


def test_batch_to_and_len():
    batch = make_batches([([4, 5], [6])], 100)[0]
    moved = batch.to("cpu")
    assert len(moved) == 1 and torch.equal(moved.src, batch.src) and moved.num_tgt_tokens == 2


def test_encode_pairs_truncates_to_max_len(word_en):
    pairs = [(ENGLISH[0], ENGLISH[3]), (ENGLISH[4], "")]
    encoded = encode_pairs(pairs, word_en, word_en)
    assert encoded[0] == (word_en.encode(ENGLISH[0]), word_en.encode(ENGLISH[3])) and encoded[1][1] == []
    with pytest.warns(UserWarning, match="truncated 1 of 2"):
        short = encode_pairs(pairs, word_en, word_en, max_len=10)
    assert short[0] == (encoded[0][0][:9], encoded[0][1][:9]) and short[1] == encoded[1]
    with pytest.raises(TypeError, match="src_tokenizer"):
        encode_pairs(pairs, "en", word_en)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=re.escape("pairs[0] must be a (source, target) pair of strings, got ('A man.',)")
    ):
        encode_pairs([("A man.",), ("b", "c")], word_en, word_en)  # type: ignore[list-item]
    with pytest.raises(TypeError, match=re.escape("pairs[2] must be a (source, target) pair of strings, got 'b c'")):
        encode_pairs([("a", "b"), ["c", "d"], "b c"], word_en, word_en)  # type: ignore[list-item]


# -- Multi30k loading ------------------------------------------------------------------------------------------


def test_a_folder_is_multi30k_when_it_holds_its_validation_files(tmp_path):
    from companion.data.multi30k import is_multi30k_folder

    own, real, tests = tmp_path / "own", tmp_path / "real", tmp_path / "tests"
    for folder, names in (
        (own, ["train.en", "train.de"]),
        (real, ["train.en", "train.de", "val.en.gz", "val.de"]),
        (tests, ["test_2017_flickr.en.gz", "test_2017_flickr.de.gz"]),
    ):
        folder.mkdir()
        for name in names:
            (folder / name).write_bytes(b"")
    assert is_multi30k_folder(real, "en", "de") and is_multi30k_folder(real, "de", "en")
    assert not is_multi30k_folder(own, "en", "de")  # a corpus of one's own: only training files
    assert is_multi30k_folder(tests, "de", "en")  # later test sets to score a Multi30k model on
    (own / "val.en").write_bytes(b"")  # one of Multi30k's val files: Multi30k, whose reading names val.de missing
    assert is_multi30k_folder(own, "en", "de")
    assert not is_multi30k_folder(real, "fr", "en")  # Multi30k has en and de only
    assert is_multi30k_folder(tmp_path / "missing", "en", "de")  # reading it says where to get Multi30k


def _write_split(folder: Path, stem: str, en: list[str], de: list[str]) -> None:
    for lang, lines in (("en", en), ("de", de)):
        with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))


@pytest.fixture()
def tiny_multi30k(tmp_path: Path) -> Path:
    for stem, n in (("train", 5), ("val", 2), ("test_2016_flickr", 3)):
        _write_split(
            tmp_path, stem, [f"{stem} english {i}." for i in range(n)], [f"{stem} deutsch {i}." for i in range(n)]
        )
    return tmp_path


def test_load_local_folder_both_directions(tiny_multi30k):
    en_de = load_multi30k("en", "de", data_dir=tiny_multi30k)
    assert {k: len(v) for k, v in en_de.items()} == {"train": 5, "valid": 2, "test": 3}
    assert en_de["test"][1] == ("test_2016_flickr english 1.", "test_2016_flickr deutsch 1.")
    de_en = load_multi30k("de", "en", data_dir=str(tiny_multi30k))
    assert de_en["train"] == [(t, s) for s, t in en_de["train"]]


def test_load_uses_the_environment_variable(tiny_multi30k, monkeypatch):
    monkeypatch.setenv("COMPANION_DATA_DIR", str(tiny_multi30k))
    assert len(load_multi30k()["train"]) == 5


# -- the later test sets (test_2017_flickr, test_2018_flickr, test_2017_mscoco) ------------------------------------


def test_unseen_test_sets_are_read_from_the_folder_only_when_named(tiny_multi30k):
    _write_split(tiny_multi30k, "test_2017_flickr", ["A dog.", "A cat."], ["Ein Hund.", "Eine Katze."])
    assert set(load_multi30k(data_dir=tiny_multi30k)) == {"train", "valid", "test"}  # not loaded unless named
    data = load_multi30k("de", "en", tiny_multi30k, splits=("test", "test_2017_flickr"))
    assert list(data) == ["test", "test_2017_flickr"]
    assert data["test_2017_flickr"] == [("Ein Hund.", "A dog."), ("Eine Katze.", "A cat.")]
    assert load_multi30k("en", "de", tiny_multi30k, splits=("test_2017_flickr",))["test_2017_flickr"][1] == (
        "A cat.",
        "Eine Katze.",
    )
    with pytest.raises(ValueError, match="splits must name some of .*'test_2017_mscoco'.*got 'test_2019'"):
        load_multi30k(data_dir=tiny_multi30k, splits=("test_2019",))


def _fake_sacrebleu_files(monkeypatch, tmp_path: Path, name: str, en: list[str], de: list[str]) -> list[str]:
    """Replace sacreBLEU's download of ``name`` by two local text files; returns the language pairs asked for."""
    from sacrebleu.dataset import DATASETS

    (tmp_path / "src.txt").write_text("".join(line + "\n" for line in en), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(line + "\n" for line in de), encoding="utf-8")
    asked: list[str] = []

    def get_files(langpair):
        asked.append(langpair)
        return [str(tmp_path / "src.txt"), str(tmp_path / "ref.txt")]

    monkeypatch.setattr(DATASETS[name], "get_files", get_files)
    return asked


def test_unseen_flickr_sets_come_through_sacrebleu_when_the_folder_lacks_them(tiny_multi30k, tmp_path, monkeypatch):
    """The network replaced by local files: the English source and German reference of sacreBLEU's multi30k/2018
    become pairs in either direction; the folder's own splits still come from the folder."""
    en, de = ["A dog.", "Two men."], ["Ein Hund.", "Zwei."]
    asked = _fake_sacrebleu_files(monkeypatch, tmp_path, "multi30k/2018", en, de)
    monkeypatch.setattr("companion.data.multi30k._reachable", lambda host, port: True)
    data = load_multi30k("de", "en", tiny_multi30k, splits=("valid", "test_2018_flickr"))
    assert data["test_2018_flickr"] == [("Ein Hund.", "A dog."), ("Zwei.", "Two men.")]
    assert len(data["valid"]) == 2 and asked == ["en-de"]
    monkeypatch.delenv("COMPANION_DATA_DIR", raising=False)
    assert load_multi30k("en", "de", splits=("test_2018_flickr",))["test_2018_flickr"][0] == ("A dog.", "Ein Hund.")


def test_unseen_sets_that_cannot_be_had_fail_fast_and_say_where_to_get_them(tiny_multi30k, tmp_path, monkeypatch):
    from sacrebleu.dataset import DATASETS

    def never(langpair):
        raise AssertionError("sacreBLEU was asked to download although its host is unreachable")

    monkeypatch.setattr(DATASETS["multi30k/2017"], "get_files", never)
    monkeypatch.setattr("companion.data.multi30k._reachable", lambda host, port: False)
    with pytest.raises(DataUnavailableError, match=r"lacks test_2017_flickr.*cannot be reached.*data/task1/raw"):
        load_multi30k("de", "en", tiny_multi30k, splits=("test_2017_flickr",))
    with pytest.raises(DataUnavailableError, match="has no entry for this test set.*test_2017_mscoco.en.gz"):
        load_multi30k("de", "en", tiny_multi30k, splits=("test_2017_mscoco",))
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        load_multi30k("de", "en", tmp_path / "nowhere", splits=("test_2017_flickr",))


def test_a_failed_sacrebleu_download_is_a_data_unavailable_error(tiny_multi30k, monkeypatch):
    from sacrebleu.dataset import DATASETS

    def checksum_mismatch(langpair):
        raise SystemExit(1)  # what sacreBLEU does when a download's MD5 differs

    monkeypatch.setattr(DATASETS["multi30k/2017"], "get_files", checksum_mismatch)
    monkeypatch.setattr("companion.data.multi30k._reachable", lambda host, port: True)
    with pytest.raises(DataUnavailableError, match="sacreBLEU's download of multi30k/2017 failed"):
        load_multi30k("en", "de", tiny_multi30k, splits=("test_2017_flickr",))


def test_the_real_sacrebleu_path_reads_its_cache_without_the_network(tmp_path):
    """sacreBLEU's own code, not a stand-in: its cache (``$SACREBLEU``) laid out as after a download of
    multi30k/2017 (the tarball, here a placeholder, and the two extracted files); a fresh process with every socket
    refused reads the pairs from it in both directions."""
    raw = tmp_path / "sacrebleu" / "multi30k" / "2017" / "raw"
    raw.mkdir(parents=True)
    (raw / "multi30k_2017.multi30k_test_sets_d3ec2a38.tar.gz").write_bytes(b"already downloaded")
    (raw / "test_2017_flickr.en").write_text("A dog runs.\nTwo men talk.\n", encoding="utf-8")
    (raw / "test_2017_flickr.de").write_text("Ein Hund rennt.\nZwei Männer reden.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "COMPANION_DATA_DIR"}
    env.update(SACREBLEU=str(tmp_path / "sacrebleu"), OMP_NUM_THREADS="1")
    code = (
        "import socket\n"
        "def refuse(*args, **kwargs):\n    raise OSError('no network in this test')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\nsocket.getaddrinfo = refuse\n"
        "import companion.data.multi30k as m\nm._reachable = lambda host, port: True\n"
        "print(m.load_multi30k('de', 'en', splits=('test_2017_flickr',)))\n"
        "print(m.load_multi30k('en', 'de', splits=('test_2017_flickr',)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "{'test_2017_flickr': [('Ein Hund rennt.', 'A dog runs.'), ('Zwei Männer reden.', 'Two men talk.')]}",
        "{'test_2017_flickr': [('A dog runs.', 'Ein Hund rennt.'), ('Two men talk.', 'Zwei Männer reden.')]}",
    ]


def test_sacrebleu_still_describes_the_flickr_test_sets_as_we_read_them():
    """What the sacreBLEU path relies on: English source and German reference, in that order, of these two sets."""
    from sacrebleu.dataset import DATASETS

    for name, stem in (("multi30k/2017", "test_2017_flickr"), ("multi30k/2018", "test_2018_flickr")):
        assert DATASETS[name].fieldnames("en-de") == ["src", "ref"]
        english, german = DATASETS[name].langpairs["en-de"]
        assert english == f"{stem}.en" and german.removesuffix(".gz").endswith(f"{stem}.de")


def test_load_reports_mismatched_line_counts(tiny_multi30k):
    _write_split(tiny_multi30k, "val", ["one.", "two.", "three."], ["eins.", "zwei."])
    with pytest.raises(ValueError, match=r"val\.en\.gz has 3 lines but .*val\.de\.gz has 2"):
        load_multi30k(data_dir=tiny_multi30k)


def test_load_reports_missing_files(tiny_multi30k, tmp_path):
    (tiny_multi30k / "test_2016_flickr.de.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks test_2016_flickr\.de\.gz.*--data-dir"):
        load_multi30k(data_dir=tiny_multi30k)
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        load_multi30k(data_dir=tmp_path / "nowhere")


def test_load_drops_empty_pairs_with_a_warning(tiny_multi30k):
    _write_split(tiny_multi30k, "train", ["a.", "", "c.", "d."], ["A.", "B.", "  ", "D."])
    with pytest.warns(UserWarning, match="dropped 2 pair"):
        train = load_multi30k(data_dir=tiny_multi30k)["train"]
    assert train == [("a.", "A."), ("d.", "D.")]


@pytest.mark.parametrize(
    "src, tgt, message",
    [
        ("en", "fr", "tgt must be one of ['en', 'de'] for Multi30k, got 'fr'"),
        ("cs", "de", "src must be one of ['en', 'de'] for Multi30k, got 'cs'"),
        ("cs", "fr", "src must be one of ['en', 'de'] for Multi30k, got 'cs'"),  # the first bad one is named
        ("en", "en", "src and tgt must be different languages, got 'en' for both"),
    ],
)
def test_load_rejects_unsupported_language_pairs(src, tgt, message, tiny_multi30k):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        load_multi30k(src, tgt, data_dir=tiny_multi30k)


def test_unreachable_hub_fails_fast_with_instructions(monkeypatch):
    monkeypatch.delenv("COMPANION_DATA_DIR", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: connection refused
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("datasets.load_dataset was called although the hub is unreachable (it would retry)")

    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(DataUnavailableError, match="cannot be reached.*--data-dir.*COMPANION_DATA_DIR"):
        load_multi30k()


def test_hub_splits_are_mapped_to_train_valid_test(monkeypatch):
    """The hub path (network replaced by an in-memory dataset with the hub's split and field names)."""
    import datasets

    fake = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"en": ["A dog.", "A cat."], "de": ["Ein Hund.", "Eine Katze."]}),
            "validation": datasets.Dataset.from_dict({"en": ["Hi."], "de": ["Hallo."]}),
            "test": datasets.Dataset.from_dict({"en": ["Yes.", "No.", " "], "de": ["Ja.", "Nein.", "Leer."]}),
        }
    )
    requested = []
    monkeypatch.delenv("COMPANION_DATA_DIR", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("companion.data.multi30k._reachable", lambda host, port: True)
    monkeypatch.setattr(datasets, "load_dataset", lambda name: requested.append(name) or fake)
    with pytest.warns(UserWarning, match="dropped 1 pair"):
        data = load_multi30k("de", "en")
    assert requested == ["bentrevett/multi30k"]
    assert data == {
        "train": [("Ein Hund.", "A dog."), ("Eine Katze.", "A cat.")],
        "valid": [("Hallo.", "Hi.")],
        "test": [("Ja.", "Yes."), ("Nein.", "No.")],
    }


def test_offline_mode_fails_without_touching_the_network_and_with_instructions(tmp_path):
    """A fresh process with HF_DATASETS_OFFLINE=1, an empty Hugging Face cache and no local folder: the error comes
    without a single connection attempt (so without network timeouts or retries), and says what to do."""
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANION_DATA_DIR", "HF_HUB_OFFLINE")}
    env.update(HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    code = (
        "import socket\nattempts = []\n"
        "def refuse(*args, **kwargs):\n    attempts.append(args)\n    raise OSError('no network in this test')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\nsocket.getaddrinfo = refuse\n"
        "import companion.data as d\nfrom companion.errors import DataUnavailableError\n"
        "try:\n    d.load_multi30k()\nexcept DataUnavailableError as e:\n"
        "    print('ERROR', len(attempts), e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.stdout.startswith("ERROR"), result.stdout + result.stderr
    assert result.stdout.split()[1] == "0", "the offline path tried to open a connection"
    assert "offline mode" in result.stdout and "--data-dir" in result.stdout


# -- the real data ---------------------------------------------------------------------------------------------


def _real_data_dir() -> Path | None:
    candidates = [os.environ.get("COMPANION_DATA_DIR"), REPO.parent / "shared" / "data" / "multi30k"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "train.en.gz").is_file():
            return Path(candidate)
    return None


@pytest.mark.skipif(
    _real_data_dir() is None, reason="Multi30k not found: set COMPANION_DATA_DIR or place it in ../shared/data/multi30k"
)
def test_real_multi30k_loads_tokenizes_and_batches():
    data = load_multi30k("de", "en", data_dir=_real_data_dir())
    assert {k: len(v) for k, v in data.items()} == {"train": 29000, "valid": 1014, "test": 1000}
    assert all(s and t for split in data.values() for s, t in split)  # never empty pairs
    assert data["train"][0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )
    train_de = [s for s, _ in data["train"]]
    src_tok = WordTokenizer.build(train_de, "de", min_freq=2)
    assert 6000 < src_tok.vocab_size < 12000
    # Detokenization: the validation sentences without unknown words come back exactly (measured: 100%).
    valid_de = [s for s, _ in data["valid"]]
    encoded = src_tok.encode_batch(valid_de)
    known = [(ids, text) for ids, text in zip(encoded, valid_de) if UNK_ID not in ids]
    exact = sum(src_tok.decode(ids) == text for ids, text in known) / len(known)
    assert len(known) > 500 and exact >= 0.98, exact
    # A vocabulary from the training split only: some validation words are unknown.
    assert 0 < sum(ids.count(UNK_ID) for ids in encoded) < 0.05 * sum(map(len, encoded))
    # The paper's option: one BPE vocabulary shared by both languages, lossless on unseen sentences.
    shared = SubwordTokenizer.train(train_de + [t for _, t in data["train"]], vocab_size=8000)
    assert shared.vocab_size == 8000
    valid_all = [text for pair in data["valid"] for text in pair]
    assert sum(shared.decode(shared.encode(text)) == text for text in valid_all) / len(valid_all) >= 0.99
    tgt_tok = WordTokenizer.build([t for _, t in data["train"][:5000]], "en")
    pairs = encode_pairs(data["valid"], src_tok, tgt_tok, max_len=256)
    batches = make_batches(pairs, max_tokens=2000, seed=0)
    assert sum(len(b) for b in batches) == 1014
    assert all(len(b) * max(b.src.shape[1], b.tgt_in.shape[1]) <= 2000 for b in batches)


def test_tokenizer_base_class_is_abstract():
    with pytest.raises(NotImplementedError):
        Tokenizer().encode("x")


# -- moved from test_reliability.py: corrupt files name the file and the problem ------------------------------
def _multi30k_corpus(folder: Path, pairs_by_split=None) -> Path:
    """40 short pairs per split in Multi30k's gzipped layout (``pairs_by_split`` replaces a split's pairs)."""
    default = [(f"a man number {i} .", f"ein mann nummer {i} .") for i in range(40)]
    folder.mkdir(parents=True, exist_ok=True)
    for stem in ("train", "val", "test_2016_flickr"):
        pairs = (pairs_by_split or {}).get(stem, default)
        for side, lang in ((0, "en"), (1, "de")):
            text = "".join(pair[side] + "\n" for pair in pairs).encode()
            (folder / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text, mtime=0))
    return folder


def _train_one_step(data_dir: Path, out: Path) -> int:
    from companion.cli import main

    flags = ["--preset", "tiny", "--data-dir", str(data_dir), "--max-steps", "1", "--device", "cpu", "--out", str(out)]
    return main(["train", *flags, "--no-progress", "--threads", "1"])


CORRUPTIONS = {
    "truncated": (lambda data: data[: len(data) // 2], r"train\.de\.gz is truncated"),
    "bad CRC": (
        lambda data: data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:],
        r"train\.de\.gz is a corrupt gzip file \(CRC check failed",
    ),
    "not gzip": (lambda data: b"a man rides a bike .\n" * 40, r"train\.de\.gz is not gzip-compressed"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_gzip_files_name_the_file_and_the_problem(case, tmp_path, capsys):
    from companion.errors import DataError

    corrupt, message = CORRUPTIONS[case]
    folder = _multi30k_corpus(tmp_path / "data")
    target = folder / "train.de.gz"
    target.write_bytes(corrupt(target.read_bytes()))
    with pytest.raises(DataError, match=message):
        load_multi30k("en", "de", folder)
    assert _train_one_step(folder, tmp_path / "run") == 2
    assert str(target) in capsys.readouterr().err


def test_bytes_that_are_not_utf8_in_data_name_the_file_and_line(tmp_path):
    from companion.errors import DataError

    folder = _multi30k_corpus(tmp_path / "data")
    lines = [f"ein mann {i} .".encode() for i in range(40)]
    lines[2] = b"ein M\xe4nner ."
    (folder / "val.de.gz").write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    with pytest.raises(DataError, match=r"val\.de\.gz, line 3: not UTF-8 text \(byte\(s\) b'\\xe4"):
        load_multi30k("en", "de", folder)


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    folder = _multi30k_corpus(tmp_path / "data")
    (folder / "train.en.gz").write_bytes(
        gzip.compress("\ufeff".encode() + gzip.decompress((folder / "train.en.gz").read_bytes()))
    )
    assert load_multi30k("en", "de", folder)["train"][0][0] == "a man number 0 ."


def test_all_empty_data_names_the_files(tmp_path, capsys):
    folder = _multi30k_corpus(tmp_path / "data", {"train": [("", "ein mann ."), ("   ", "")]})
    with pytest.warns(UserWarning, match="dropped 2 pair"):
        assert _train_one_step(folder, tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert f"{folder / 'train.en.gz'} and {folder / 'train.de.gz'} hold no sentence pair" in err


def test_a_subword_tokenizer_without_its_library_names_the_extra(subword, monkeypatch):
    """A shipped model's tokenizer needs `tokenizers`; without it the error says which extra installs it."""
    values = subword.to_dict()
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"attention-executed\[data\]"):
        SubwordTokenizer.from_dict(values)
