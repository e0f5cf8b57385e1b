"""The vocabularies of a corpus of one's own are kept in the cache (companion.runs.identity.build_tokenizers): a
second run on the same data with the same settings reads them instead of learning them again (minutes on millions
of pairs), and gets exactly what learning would give; other data or settings never get them."""

from __future__ import annotations

import pytest
from _run_helpers import write_corpus

from companion.data import SubwordTokenizer, WordTokenizer, folder_corpus
from companion.runs import DataConfig
from companion.runs.identity import build_tokenizers


def _config(cache, **settings) -> DataConfig:
    return DataConfig(src="en", tgt="de", cache_dir=str(cache), **settings)


@pytest.mark.parametrize("settings", [dict(tokenizer="bpe", vocab_size=60), dict(tokenizer="word", min_freq=1)])
def test_a_second_run_reads_the_vocabularies_it_would_learn(settings, tmp_path, monkeypatch):
    corpus = folder_corpus(write_corpus(tmp_path / "data"), "en", "de")
    said: list[str] = []
    learned = build_tokenizers(_config(tmp_path / "cache", **settings), corpus, log=said.append)
    assert said[0].startswith("learning the vocabularies") and said[1].startswith("learned the vocabularies in")
    kept = list((tmp_path / "cache" / "vocabularies").glob("*.json"))
    assert len(kept) == 1

    def no_learning(*args, **kwargs):
        raise AssertionError("the vocabularies were learned again")

    with monkeypatch.context() as patch:
        patch.setattr(SubwordTokenizer, "train", no_learning)
        patch.setattr(WordTokenizer, "build", no_learning)
        said.clear()
        again = build_tokenizers(_config(tmp_path / "cache", **settings), corpus, log=said.append)
    assert said == [f"vocabularies from the cache: {kept[0]}"]
    assert [t.to_dict() for t in again] == [t.to_dict() for t in learned]
    # what the cache gives is what learning gives (learning is deterministic): learned afresh elsewhere
    fresh = build_tokenizers(_config(tmp_path / "other-cache", **settings), corpus)
    assert [t.to_dict() for t in fresh] == [t.to_dict() for t in learned]


def test_other_settings_or_other_data_learn_their_own(tmp_path):
    data = write_corpus(tmp_path / "data")
    corpus = folder_corpus(data, "en", "de")
    cache = tmp_path / "cache"
    build_tokenizers(_config(cache, tokenizer="bpe", vocab_size=60), corpus)
    build_tokenizers(_config(cache, tokenizer="bpe", vocab_size=70), corpus)
    other = folder_corpus(write_corpus(tmp_path / "other", {"train": [("a dog .", "ein hund .")] * 40}), "en", "de")
    small = build_tokenizers(_config(cache, tokenizer="bpe", vocab_size=60), other)[0]
    assert len(list((cache / "vocabularies").glob("*.json"))) == 3
    assert "dog" in "".join(small.itos) and "mann" not in "".join(small.itos)


def test_an_unreadable_kept_file_is_learned_again(tmp_path):
    corpus = folder_corpus(write_corpus(tmp_path / "data"), "en", "de")
    config = _config(tmp_path / "cache", tokenizer="bpe", vocab_size=60)
    learned = build_tokenizers(config, corpus)
    (kept,) = (tmp_path / "cache" / "vocabularies").glob("*.json")
    kept.write_text("{not json", encoding="utf-8")  # e.g. a disk that filled up under another tool
    said: list[str] = []
    again = build_tokenizers(config, corpus, log=said.append)
    assert said[0].startswith("learning the vocabularies")
    assert [t.to_dict() for t in again] == [t.to_dict() for t in learned]


def test_a_cache_that_cannot_be_written_warns_and_the_run_goes_on(tmp_path, monkeypatch):
    import companion.runs.identity as identity

    corpus = folder_corpus(write_corpus(tmp_path / "data"), "en", "de")

    def full_disk(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(identity, "_write_atomically", full_disk)
    with pytest.warns(UserWarning, match=r"could not be kept in the cache \(\[Errno 28\] No space left on device\)"):
        learned = build_tokenizers(_config(tmp_path / "cache", tokenizer="bpe", vocab_size=60), corpus)
    assert learned[0].vocab_size > 4
