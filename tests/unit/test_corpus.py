"""Tests for companion.data.corpus: parallel corpora from folders, explicit files, TSV and Hugging Face datasets,
streamed, for any language pair; and the tokenizers for any language."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from companion.data import SubwordTokenizer, WordTokenizer
from companion.data.corpus import HeldOutCorpus, files_corpus, folder_corpus, read_lines, tsv_corpus
from companion.data.hub import DatasetCorpus, disk_corpus, hub_corpus, json_corpus
from companion.errors import DataError, DataUnavailableError

PAIRS = {
    ("fr", "en"): [("Un homme lit un livre.", "A man reads a book."), ("Deux chiens jouent.", "Two dogs play.")],
    ("ru", "en"): [("Мужчина читает книгу.", "A man reads a book."), ("Две собаки играют.", "Two dogs play.")],
    ("zh", "en"): [("一个男人在看书。", "A man reads a book."), ("两只狗在玩。", "Two dogs play.")],
    ("el", "en"): [
        ("Ένας άντρας διαβάζει ένα βιβλίο.", "A man reads a book."),
        ("Δύο σκύλοι παίζουν.", "Two dogs play."),
    ],
}


def write_lines(path: Path, lines: list[str], *, gz: bool | None = None, raw: bytes | None = None) -> Path:
    data = raw if raw is not None else "".join(line + "\n" for line in lines).encode("utf-8")
    if gz if gz is not None else path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def write_split(folder: Path, stem: str, src: str, tgt: str, pairs, gz: bool = False) -> None:
    suffix = ".gz" if gz else ""
    write_lines(folder / f"{stem}.{src}{suffix}", [s for s, _ in pairs])
    write_lines(folder / f"{stem}.{tgt}{suffix}", [t for _, t in pairs])


# -- folders, files, TSV ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("languages", list(PAIRS))
def test_folder_corpus_for_any_language_codes(languages, tmp_path):
    src, tgt = languages
    write_split(tmp_path, "train", src, tgt, PAIRS[languages], gz=True)
    write_split(tmp_path, "val", src, tgt, PAIRS[languages][:1])
    corpus = folder_corpus(tmp_path, src, tgt)
    assert (corpus.src, corpus.tgt) == languages
    assert corpus.splits == ("train", "valid")  # no test files: the split is simply absent
    assert list(corpus.pairs("train")) == PAIRS[languages]
    assert list(corpus.pairs("valid")) == PAIRS[languages][:1]
    reverse = folder_corpus(tmp_path, tgt, src)
    assert list(reverse.pairs("train")) == [(t, s) for s, t in PAIRS[languages]]


def test_pairs_is_a_lazy_stream(tmp_path):
    write_split(tmp_path, "train", "fr", "en", PAIRS[("fr", "en")])
    stream = folder_corpus(tmp_path, "fr", "en").pairs("train")
    assert iter(stream) is stream and not isinstance(stream, (list, tuple))
    assert next(stream) == PAIRS[("fr", "en")][0]


def test_a_missing_split_is_an_error_only_when_read(tmp_path):
    write_split(tmp_path, "train", "fr", "en", PAIRS[("fr", "en")])
    corpus = folder_corpus(tmp_path, "fr", "en")
    assert corpus.splits == ("train",)
    with pytest.raises(FileNotFoundError, match=r"lacks test_2016_flickr\.fr .*test_2016_flickr\.en .*'test'"):
        list(corpus.pairs("test"))
    with pytest.raises(FileNotFoundError, match="identity|lacks"):
        corpus.identity("valid")


def test_folder_corpus_with_split_names_of_your_own(tmp_path):
    write_split(tmp_path, "europarl.train", "fr", "en", PAIRS[("fr", "en")])
    corpus = folder_corpus(tmp_path, "fr", "en", splits={"train": "europarl.train"})
    assert list(corpus.pairs("train")) == PAIRS[("fr", "en")]
    with pytest.raises(DataError, match="no split 'valid'"):
        list(corpus.pairs("valid"))


def test_files_corpus_and_tsv_corpus(tmp_path):
    pairs = PAIRS[("el", "en")]
    src_file = write_lines(tmp_path / "a.txt.gz", [s for s, _ in pairs])
    tgt_file = write_lines(tmp_path / "b.txt", [t for _, t in pairs])
    corpus = files_corpus("el", "en", train=(src_file, tgt_file), test=(str(src_file), str(tgt_file)))
    assert corpus.splits == ("train", "test")
    assert list(corpus.pairs("test")) == pairs
    tsv = write_lines(tmp_path / "train.tsv", [f"{s}\t{t}" for s, t in pairs])
    assert list(tsv_corpus("el", "en", train=tsv).pairs("train")) == pairs
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        files_corpus("el", "en", train=(src_file, tmp_path / "nowhere.txt"))
    with pytest.raises(ValueError, match="at least one"):
        tsv_corpus("el", "en")


def ten_pair_corpus(tmp_path: Path, **splits):
    pairs = [(f"phrase {i}", f"phrase {i} en") for i in range(10)]
    write_lines(tmp_path / "train.fr", [s for s, _ in pairs])
    write_lines(tmp_path / "train.en", [t for _, t in pairs])
    files = {name: (write_lines(tmp_path / f"{name}.fr", ["x"]), write_lines(tmp_path / f"{name}.en", ["y"]))
             for name in splits}  # fmt: skip
    return pairs, files_corpus("fr", "en", train=(tmp_path / "train.fr", tmp_path / "train.en"), **files)


def test_held_out_pairs_are_spread_evenly_and_never_trained_on(tmp_path):
    pairs, corpus = ten_pair_corpus(tmp_path, test=True)
    held = HeldOutCorpus(corpus, 3)
    assert held.splits == ("train", "test", "valid")
    assert held.held_out_positions() == {1, 5, 8}  # (2j + 1) * 10 // 6 for j = 0, 1, 2
    assert list(held.pairs("valid")) == [pairs[1], pairs[5], pairs[8]]
    assert list(held.pairs("train")) == [pair for i, pair in enumerate(pairs) if i not in (1, 5, 8)]
    assert "phrase 5" not in list(held.texts("train", "src"))  # tokenizers learn from the training part only
    assert list(held.pairs("test")) == list(corpus.pairs("test")) and held.identity("test") == corpus.identity("test")
    identities = [held.identity("train"), held.identity("valid"), corpus.identity("train")]
    assert len({json.dumps(i, sort_keys=True, default=str) for i in identities}) == 3  # three different stores
    assert list(HeldOutCorpus(corpus, 3).pairs("valid")) == list(held.pairs("valid"))  # the same every time
    assert "3 pairs held out from" in held.describe("valid") and "without the 3 pairs" in held.describe("train")
    assert [len(list(HeldOutCorpus(corpus, n).pairs("valid"))) for n in (1, 5, 9)] == [1, 5, 9]


def test_holding_out_is_refused_with_a_validation_split_or_too_few_pairs(tmp_path):
    _, corpus = ten_pair_corpus(tmp_path, valid=True)
    with pytest.raises(DataError, match="has a validation split already"):
        HeldOutCorpus(corpus, 2)
    _, corpus = ten_pair_corpus(tmp_path)
    with pytest.raises(DataError, match="cannot hold out 10 pairs .* has 10 training pairs"):
        list(HeldOutCorpus(corpus, 10).pairs("valid"))
    for count in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="count must be a positive integer"):
            HeldOutCorpus(corpus, count)
    with pytest.raises(TypeError, match="corpus must be a ParallelCorpus"):
        HeldOutCorpus([("a", "b")], 1)


def test_tsv_line_without_exactly_one_tab(tmp_path):
    tsv = write_lines(tmp_path / "train.tsv", ["ein\tone", "zwei two", "drei\tthree\textra"])
    with pytest.raises(DataError, match=r"train\.tsv, line 2: expected source TAB target .*found 0 tab"):
        list(tsv_corpus("de", "en", train=tsv).pairs("train"))


def test_mismatched_line_counts_name_both_files_and_the_first_line(tmp_path):
    write_lines(tmp_path / "train.fr", ["un", "deux", "trois"])
    write_lines(tmp_path / "train.en.gz", ["one", "two"])
    stream = folder_corpus(tmp_path, "fr", "en").pairs("train")
    assert [next(stream), next(stream)] == [("un", "one"), ("deux", "two")]  # detected while streaming
    with pytest.raises(DataError, match=r"train\.fr has a line 3 but .*train\.en\.gz ends after 2 line"):
        next(stream)
    longer_target = write_lines(tmp_path / "x.fr", ["1", "2", "3", "4"])
    corpus = files_corpus("en", "fr", train=(tmp_path / "train.en.gz", longer_target))
    with pytest.raises(DataError, match=r"x\.fr has a line 3 but .*train\.en\.gz ends after 2 line"):
        list(corpus.pairs("train"))


def test_empty_corpus_names_the_files(tmp_path):
    write_lines(tmp_path / "train.fr", ["", "  "])
    write_lines(tmp_path / "train.en", ["one", ""])
    with pytest.warns(UserWarning, match="dropped 2 pair"):
        with pytest.raises(DataError, match=r"train\.fr and .*train\.en hold\(s\) no sentence pair"):
            list(folder_corpus(tmp_path, "fr", "en").pairs("train"))
    write_lines(tmp_path / "valid.tsv", [])
    with pytest.raises(DataError, match=r"valid\.tsv hold\(s\) no sentence pair"):
        list(tsv_corpus("fr", "en", valid=tmp_path / "valid.tsv").pairs("valid"))


def test_reading_rules_match_multi30k(tmp_path):
    """gzip, BOM dropped, lines end at \\n only (\\r dropped, other separators kept), sentences stripped, pairs
    with an empty side dropped with one warning, undecodable bytes named by file and line."""
    raw = "\ufeffa b\r\nc\u2028d\n  \ne f \n".encode()
    write_lines(tmp_path / "train.fr.gz", [], raw=raw)
    write_lines(tmp_path / "train.en", ["A", "B", "C", "D"])
    assert list(read_lines(tmp_path / "train.fr.gz")) == ["a b", "c\u2028d", "  ", "e f "]
    with pytest.warns(UserWarning, match="dropped 1 pair"):
        assert list(folder_corpus(tmp_path, "fr", "en").pairs("train")) == [
            ("a b", "A"),
            ("c\u2028d", "B"),
            ("e f", "D"),
        ]
    write_lines(tmp_path / "bad.txt", [], raw=b"ok\nok\nein M\xe4nner\n")
    with pytest.raises(DataError, match=r"bad\.txt, line 3: not UTF-8 text \(byte\(s\) b'\\xe4' at byte offset 11"):
        list(read_lines(tmp_path / "bad.txt"))
    (tmp_path / "trunc.gz").write_bytes(gzip.compress(b"x\n" * 1000)[:30])
    with pytest.raises(DataError, match=r"trunc\.gz is truncated"):
        list(read_lines(tmp_path / "trunc.gz"))
    write_lines(tmp_path / "plain.gz", ["not gzip"], gz=False)
    with pytest.raises(DataError, match=r"plain\.gz is not gzip-compressed"):
        list(read_lines(tmp_path / "plain.gz"))


def test_identity_changes_with_the_content(tmp_path):
    write_split(tmp_path, "train", "fr", "en", PAIRS[("fr", "en")])
    corpus = folder_corpus(tmp_path, "fr", "en")
    first = corpus.identity("train")
    assert json.loads(json.dumps(first)) == first  # JSON-able
    assert first["src_file"]["path"] == str((tmp_path / "train.fr").resolve()) and first["src_file"]["bytes"] > 0
    assert corpus.identity("train") == first
    write_split(tmp_path, "train", "fr", "en", PAIRS[("fr", "en")][::-1])  # same size, other content
    second = folder_corpus(tmp_path, "fr", "en").identity("train")
    assert second["src_file"]["bytes"] == first["src_file"]["bytes"]
    assert second["src_file"]["sha256"] != first["src_file"]["sha256"]


@pytest.mark.parametrize("src,tgt", [("en", "en"), ("e n", "fr"), ("", "fr"), ("../x", "fr")])
def test_bad_language_codes(src, tgt, tmp_path):
    with pytest.raises(ValueError, match="src|tgt"):
        folder_corpus(tmp_path, src, tgt)


# -- Hugging Face datasets (offline) ---------------------------------------------------------------------------


def _translation_dataset():
    import datasets

    rows = lambda pairs: {"translation": [{"de": s, "en": t} for s, t in pairs]}  # noqa: E731
    return datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows([("Ein Hund.", "A dog."), ("Eine Katze.", "A cat.")])),
            "validation": datasets.Dataset.from_dict(rows([("Hallo.", "Hello."), (" ", "Empty.")])),
        }
    )


def test_dataset_saved_to_disk_with_a_translation_column(tmp_path):
    _translation_dataset().save_to_disk(str(tmp_path / "saved"))
    corpus = disk_corpus(tmp_path / "saved", src="en", tgt="de")
    assert isinstance(corpus, DatasetCorpus) and corpus.splits == ("train", "valid")
    assert list(corpus.pairs("train")) == [("A dog.", "Ein Hund."), ("A cat.", "Eine Katze.")]
    with pytest.warns(UserWarning, match="dropped 1 pair"):
        assert list(corpus.pairs("valid")) == [("Hello.", "Hallo.")]
    identity = corpus.identity("train")
    assert identity["rows"] == 2 and identity["dataset_split"] == "train" and identity["files"]
    assert json.loads(json.dumps(identity)) == identity
    with pytest.raises(DataError, match="no split 'test'"):
        list(corpus.pairs("test"))


def test_dataset_without_the_languages_names_those_it_has(tmp_path):
    _translation_dataset().save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(DataError, match=r"no 'fr'.*translation column holds the languages \['de', 'en'\]"):
        disk_corpus(tmp_path / "saved", src="fr", tgt="en")
    import datasets

    columns = datasets.Dataset.from_dict({"en": ["A dog."], "de": ["Ein Hund."], "id": ["1"]})
    columns.save_to_disk(str(tmp_path / "columns"))  # a single Dataset: the train split
    assert list(disk_corpus(tmp_path / "columns", src="de", tgt="en").pairs("train")) == [("Ein Hund.", "A dog.")]
    with pytest.raises(DataError, match=r"no 'ru' and no 'zh': its columns are \['en', 'de', 'id'\]"):
        disk_corpus(tmp_path / "columns", src="ru", tgt="zh")


def test_local_json_files_both_layouts(tmp_path):
    lines = [json.dumps({"translation": {"ru": s, "en": t}}, ensure_ascii=False) for s, t in PAIRS[("ru", "en")]]
    write_lines(tmp_path / "train.jsonl", lines)
    write_lines(tmp_path / "valid.jsonl", [json.dumps({"ru": "Да.", "en": "Yes."}, ensure_ascii=False)])
    corpus = json_corpus(
        "ru", "en", train=tmp_path / "train.jsonl", valid=[tmp_path / "valid.jsonl"], cache_dir=tmp_path / "hf"
    )
    assert corpus.splits == ("train", "valid")
    assert list(corpus.pairs("train")) == PAIRS[("ru", "en")]
    assert list(corpus.pairs("valid")) == [("Да.", "Yes.")]
    assert corpus.identity("train")["files"][0]["sha256"]


def test_hub_corpus_maps_split_names(monkeypatch):
    import datasets

    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("companion.data.hub._reachable", lambda host, port: True)
    requested = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: requested.append(a) or _translation_dataset())
    corpus = hub_corpus("wmt14", "de-en", src="de", tgt="en")
    assert requested == [("wmt14", "de-en")]
    assert corpus.splits == ("train", "valid")
    assert next(corpus.pairs("train")) == ("Ein Hund.", "A dog.")
    assert corpus.identity("train")["dataset"] == {"kind": "hub", "name": "wmt14", "config": "de-en"}
    with pytest.raises(DataError, match="has none of the splits"):
        hub_corpus("wmt14", "de-en", src="de", tgt="en", splits={"train": "nope"})


def test_hub_unreachable_fails_fast(monkeypatch, tmp_path):
    import datasets

    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there

    def never(*args, **kwargs):
        raise AssertionError("load_dataset was called although the hub is unreachable")

    monkeypatch.setattr(datasets, "load_dataset", never)
    with pytest.raises(DataUnavailableError, match=r"wmt14 \(de-en\).*cannot be reached.*HF_DATASETS_OFFLINE"):
        hub_corpus("wmt14", "de-en", src="de", tgt="en")
    # a mistyped save_to_disk folder reads as a hub name: the message names the folder looked for, too
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataUnavailableError, match=f"there is no folder {re.escape(repr(str(tmp_path / 'corp/hf')))}"):
        hub_corpus("corp/hf", src="de", tgt="en")


def test_hub_offline_without_a_cached_copy(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    code = (
        "from companion.data.hub import hub_corpus\nfrom companion.errors import DataUnavailableError\n"
        "try:\n    hub_corpus('wmt14', 'de-en', src='de', tgt='en')\nexcept DataUnavailableError as e:\n"
        "    print('ERROR', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.stdout.startswith("ERROR") and "offline mode" in result.stdout, result.stdout + result.stderr


def test_missing_datasets_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(ImportError, match=r'pip install "attention-executed\[data\]"'):
        disk_corpus(tmp_path, src="de", tgt="en")


# -- tokenizers for any language -------------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["fr", "ru", "el", "zh", "uk", "xx"])
def test_word_tokenizer_for_languages_spacy_knows(language):
    texts = [s for (src, _), pairs in PAIRS.items() for s, _ in pairs if src == language] or ["un deux trois."]
    tokenizer = WordTokenizer.build(iter(texts), language)  # a stream works as well as a list
    assert tokenizer.vocab_size > 4 and tokenizer.language == language
    assert all(1 not in tokenizer.encode(text) for text in texts)


def test_word_tokenizer_names_a_code_spacy_does_not_know():
    with pytest.raises(ValueError, match="'qq' is not a language code spaCy knows"):
        WordTokenizer.build(["x"], "qq")


@pytest.mark.parametrize(
    "language,package", [("ja", "sudachipy"), ("ko", "natto-py"), ("th", "pythainlp"), ("vi", "pyvi")]
)
def test_word_tokenizer_names_the_package_a_language_needs(language, package):
    import importlib.util

    module = {"natto-py": "natto"}.get(package, package)
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{package} is installed here")
    with pytest.raises(ImportError, match=package):
        WordTokenizer.build(["x"], language)


def test_subword_tokenizer_for_any_script():
    texts = (text for pairs in PAIRS.values() for pair in pairs for text in pair)  # a generator, not a list
    tokenizer = SubwordTokenizer.train(texts, vocab_size=300, min_frequency=1)
    for pairs in PAIRS.values():
        for text in (s for s, _ in pairs):
            ids = tokenizer.encode(text)
            assert 1 not in ids and tokenizer.decode(ids) == text
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        SubwordTokenizer.train(iter(["ok", 3]), vocab_size=50)
