"""Tests for companion.data.store: token ids on disk and lazy batches identical to make_batches."""

from __future__ import annotations

import json
import os
import random
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from companion.data import SPECIAL_TOKENS, SubwordTokenizer, WordTokenizer, encode_pairs, make_batches
from companion.data.corpus import files_corpus, folder_corpus
from companion.data.store import StoredBatches, TokenStore, batch_plan, prepare_store
from companion.errors import DataError
from companion.train import Trainer

REPO = Path(__file__).resolve().parents[2]
SENTENCES = [
    "a man reads a book .",
    "two dogs play in the snow .",
    "a woman in a red coat walks her very small dog along a long and busy street .",
    "children .",
    "an old man sits on a bench and feeds the birds in the park near the lake .",
]


def write_corpus(folder: Path, num_pairs: int = 60, seed: int = 0) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    src = [" ".join(rng.choice(SENTENCES).split()[: rng.randint(1, 16)]) for _ in range(num_pairs)]
    tgt = [" ".join(reversed(s.split())) + " ." * rng.randint(0, 3) for s in src]
    (folder / "train.fr").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (folder / "train.en").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")
    return folder


@pytest.fixture()
def corpus(tmp_path):
    return folder_corpus(write_corpus(tmp_path / "data"), "fr", "en")


@pytest.fixture(scope="module")
def tokenizer():
    return SubwordTokenizer.train(SENTENCES, vocab_size=60, min_frequency=1)


def assert_same_batches(ours, reference) -> None:
    assert len(ours) == len(reference)
    for k, (a, b) in enumerate(zip(ours, reference)):
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (k, name)
            assert getattr(a, name).dtype == getattr(b, name).dtype == torch.long
        assert (a.num_src_tokens, a.num_tgt_tokens) == (b.num_src_tokens, b.num_tgt_tokens)


# -- the batch plan --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trial", range(12))
def test_batch_plan_is_make_batches(trial):
    """Random lengths (some longer than the budget): the same batches, in the same order, as make_batches."""
    rng = random.Random(trial)
    num_pairs, max_tokens = rng.randint(1, 400), rng.choice([7, 40, 100, 333, 2000])
    pairs = [([5] * rng.randint(0, 60), [6] * rng.randint(0, 60)) for _ in range(num_pairs)]
    shuffle, seed = trial % 3 != 0, rng.randint(0, 10**6)
    lengths = [np.array([len(p[side]) for p in pairs], dtype=np.int64) for side in (0, 1)]
    order, starts, batch_order = batch_plan(*lengths, max_tokens, shuffle=shuffle, seed=seed)
    assert starts[0] == 0 and starts[-1] == num_pairs and np.all(np.diff(starts) > 0)
    expected = make_batches(pairs, max_tokens, shuffle=shuffle, seed=seed)
    assert len(batch_order) == len(expected)
    for k, batch in enumerate(expected):
        chunk = order[starts[batch_order[k]] : starts[batch_order[k] + 1]]
        assert batch.src.shape[0] == len(chunk)
        assert batch.src.shape[1] == max(len(pairs[i][0]) for i in chunk) + 1
        assert [int((row != 0).sum()) for row in batch.src] == [len(pairs[i][0]) + 1 for i in chunk]
        assert [int((row != 0).sum()) for row in batch.tgt_out] == [len(pairs[i][1]) + 1 for i in chunk]


def test_stored_batches_equal_make_batches(corpus, tokenizer, tmp_path):
    store = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path / "cache", workers=1)
    assert len(store) == 60 and store.meta["sides"]["src"]["dtype"] == "uint16"
    reference = encode_pairs(list(corpus.pairs("train")), tokenizer, tokenizer)
    assert [store.pair(i) for i in range(len(store))] == [(list(s), list(t)) for s, t in reference]
    for shuffle, seed, max_tokens in ((True, 0, 64), (True, 7, 200), (False, 0, 50)):
        batches = StoredBatches(store, max_tokens, shuffle=shuffle, seed=seed)
        assert_same_batches(batches, make_batches(reference, max_tokens, shuffle=shuffle, seed=seed))
    # Negative indices and slices select what they select in a list of the same batches.
    batches, expected = StoredBatches(store, 64), make_batches(reference, 64)
    assert len(batches) == len(expected) >= 4
    assert_same_batches([batches[-1], batches[-len(batches)]], [expected[-1], expected[0]])
    assert_same_batches(batches[1:3], expected[1:3])
    assert_same_batches(batches[::-2], expected[::-2])
    assert batches[len(batches) :] == []
    with pytest.raises(
        IndexError, match=re.escape(f"batch index {len(batches)} out of range for {len(batches)} batches")
    ):
        batches[len(batches)]
    with pytest.raises(IndexError, match=re.escape(f"batch index {-len(batches) - 1} out of range")):
        batches[-len(batches) - 1]


def test_max_len_truncates_as_encode_pairs_does(corpus, tokenizer, tmp_path):
    said: list[str] = []
    with pytest.warns(UserWarning, match=r"train split: truncated \d+ of 60 pairs to max_len - 1 = 4"):
        store = prepare_store(
            corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, max_len=5, workers=1, log=said.append
        )
    assert said[0] == f"tokenizing the train split into the cache (1 process(es)): {store.path}"
    assert said[1].startswith("tokenized 60 train pairs in ")
    # reused, the store warns again: the same cut applies to this run (before, only its build warned)
    with pytest.warns(UserWarning, match=f"truncated {store.meta['truncated_pairs']} of 60 pairs"):
        again = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, max_len=5, log=said.append)
    assert again.path == store.path and said[2] == f"the train split's token ids are in the cache: {store.path}"
    with pytest.warns(UserWarning, match="truncated"):
        reference = encode_pairs(list(corpus.pairs("train")), tokenizer, tokenizer, max_len=5)
    assert [store.pair(i) for i in range(len(store))] == [(list(s), list(t)) for s, t in reference]
    assert store.meta["truncated_pairs"] > 0
    assert_same_batches(StoredBatches(store, 30, seed=3), make_batches(reference, 30, seed=3))


def test_word_tokenizers_and_large_vocabularies_use_int32(corpus, tmp_path):
    words = sorted({w for s in SENTENCES for w in s.split()} | {"."})
    big = WordTokenizer("en", list(SPECIAL_TOKENS) + [f"filler{i}" for i in range(70_000)] + words)
    small = WordTokenizer.build(corpus.texts("train", "tgt"), "en")
    store = prepare_store(corpus, "train", big, small, cache_dir=tmp_path, workers=1)
    assert store.meta["sides"]["src"]["dtype"] == "int32" and store.meta["sides"]["tgt"]["dtype"] == "uint16"
    reference = encode_pairs(list(corpus.pairs("train")), big, small)
    assert max(max(s) for s, _ in reference) > 65_535
    assert_same_batches(StoredBatches(store, 100, seed=1), make_batches(reference, 100, seed=1))
    src_tokenizer, tgt_tokenizer = store.tokenizers()
    assert src_tokenizer.to_dict() == big.to_dict() and tgt_tokenizer.to_dict() == small.to_dict()


@pytest.mark.slow  # starts two worker processes (each imports torch: seconds)
def test_parallel_workers_write_the_same_store(tmp_path, tokenizer, monkeypatch):
    corpus = folder_corpus(write_corpus(tmp_path / "data", num_pairs=300), "fr", "en")
    one = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path / "a", workers=1, chunk_pairs=25)
    two = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path / "b", workers=2, chunk_pairs=25)
    assert one.path.name == two.path.name  # same data, same tokenizers: same key
    for name in ("src_ids.bin", "tgt_ids.bin", "src_offsets.npy", "tgt_offsets.npy"):
        assert (one.path / name).read_bytes() == (two.path / name).read_bytes(), name


# -- the cache ---------------------------------------------------------------------------------------------------


def test_a_store_is_reused_for_the_same_data_and_tokenizers(corpus, tokenizer, tmp_path):
    first = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, workers=1)
    stamp = (first.path / "meta.json").stat().st_mtime_ns
    again = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, workers=1)
    assert again.path == first.path and (again.path / "meta.json").stat().st_mtime_ns == stamp
    assert again.meta["data"] == corpus.identity("train")


def test_other_data_or_another_tokenizer_is_never_served_from_the_cache(corpus, tokenizer, tmp_path):
    first = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path / "cache", workers=1)
    other_tokenizer = SubwordTokenizer.train(SENTENCES, vocab_size=40, min_frequency=1)
    by_tokenizer = prepare_store(corpus, "train", tokenizer, other_tokenizer, cache_dir=tmp_path / "cache", workers=1)
    assert by_tokenizer.path != first.path
    assert by_tokenizer.pair(0)[1] == other_tokenizer.encode(next(corpus.pairs("train"))[1])
    with pytest.warns(UserWarning, match="truncated 60 of 60"):
        by_max_len = prepare_store(
            corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path / "cache", max_len=3, workers=1
        )
    assert by_max_len.path not in (first.path, by_tokenizer.path)
    folder = write_corpus(tmp_path / "data", num_pairs=60, seed=1)  # the same files, rewritten with other pairs
    changed = folder_corpus(folder, "fr", "en")
    by_data = prepare_store(changed, "train", tokenizer, tokenizer, cache_dir=tmp_path / "cache", workers=1)
    assert by_data.path != first.path
    assert [by_data.pair(i) for i in range(60)] == [
        (list(s), list(t)) for s, t in encode_pairs(list(changed.pairs("train")), tokenizer, tokenizer)
    ]


def test_a_store_whose_meta_does_not_match_is_rebuilt(corpus, tokenizer, tmp_path):
    store = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, workers=1)
    meta = json.loads((store.path / "meta.json").read_text())
    (store.path / "meta.json").write_text(json.dumps(meta | {"key": "written by something else"}))
    (store.path / "src_ids.bin").write_bytes(b"\0\0" * meta["sides"]["src"]["tokens"])  # wrong ids, right size
    rebuilt = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, workers=1)
    assert rebuilt.path == store.path and rebuilt.meta["key"] != "written by something else"
    assert rebuilt.pair(0)[0] == tokenizer.encode(next(corpus.pairs("train"))[0])


def test_an_interrupted_build_leaves_nothing_that_passes_for_a_store(corpus, tokenizer, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    import companion.data.store as store_module

    real = store_module._encode_chunk
    calls = []

    def fail_on_second_chunk(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(store_module, "_encode_chunk", fail_on_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=cache, workers=1, chunk_pairs=10)
    assert not cache.exists() or list(cache.iterdir()) == []  # no half-written store, no temporary folder
    monkeypatch.setattr(store_module, "_encode_chunk", real)
    cache.mkdir(exist_ok=True)
    abandoned = cache / ".building-train-x"  # a build killed hard (its process is gone)
    abandoned.mkdir()
    (abandoned / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": 999_999_999}))
    (abandoned / "meta.json").write_text("{}")
    elsewhere = cache / ".building-train-y"  # another machine's build (a shared cache folder): left alone
    elsewhere.mkdir()
    (elsewhere / "owner.json").write_text(json.dumps({"host": "another-host", "pid": 999_999_999}))
    store = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=cache, workers=1)
    assert len(store) == 60 and not abandoned.exists() and elsewhere.exists()
    assert sorted(p.name for p in cache.iterdir()) == sorted([store.path.name, elsewhere.name])
    with pytest.raises(DataError, match="not a complete token store"):
        TokenStore(cache)
    (store.path / "tgt_ids.bin").write_bytes(b"\0")
    with pytest.raises(DataError, match="incomplete"):
        TokenStore(store.path)


def test_a_missing_split_is_reported_by_the_corpus(corpus, tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="lacks val.fr"):
        prepare_store(corpus, "valid", tokenizer, tokenizer, cache_dir=tmp_path / "cache", workers=1)
    assert not (tmp_path / "cache").exists()


# -- shares of the ranks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, 3])
def test_rank_shares_are_disjoint_cover_the_batch_and_match_the_trainer(corpus, tokenizer, tmp_path, world_size):
    store = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path, workers=1)
    batches = StoredBatches(store, 60, seed=2)
    assert any(len(b) < world_size for b in batches) and any(len(b) >= 2 * world_size for b in batches)
    for k in range(len(batches)):
        whole = batches[k]
        shares = [batches.local(k, rank, world_size) for rank in range(world_size)]
        real = [share for share, weight in shares if weight > 0]
        assert sum(len(share) for share in real) == len(whole)  # every row once: disjoint, and together the whole
        for name in ("src", "tgt_in", "tgt_out"):
            width = getattr(whole, name).shape[1]
            assert torch.equal(torch.cat([_pad_to(getattr(s, name), width) for s in real]), getattr(whole, name))
        assert sum(share.num_tgt_tokens for share in real) == whole.num_tgt_tokens
        assert batches.token_counts(k) == (whole.num_src_tokens, whole.num_tgt_tokens)
        for rank, (share, weight) in enumerate(shares):
            trainer = SimpleNamespace(world_size=world_size, rank=rank, pad_id=0)
            expected, expected_weight = Trainer._local_share(trainer, whole)
            assert weight == expected_weight
            for name in ("src", "tgt_in", "tgt_out"):
                assert torch.equal(getattr(share, name), getattr(expected, name)), (k, rank, name)
            assert (share.num_src_tokens, share.num_tgt_tokens) == (expected.num_src_tokens, expected.num_tgt_tokens)
    with pytest.raises(ValueError, match="rank"):
        batches.local(0, world_size, world_size)


def _pad_to(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))


# -- the real data ---------------------------------------------------------------------------------------------


def _real_data_dir() -> Path | None:
    for candidate in (os.environ.get("COMPANION_DATA_DIR"), REPO.parent / "shared" / "data" / "multi30k"):
        if candidate and (Path(candidate) / "train.en.gz").is_file():
            return Path(candidate)
    return None


@pytest.mark.skipif(_real_data_dir() is None, reason="Multi30k not found: set COMPANION_DATA_DIR")
def test_stored_batches_equal_make_batches_on_multi30k(tmp_path):
    """A few thousand real pairs (the validation and test splits as the training files), word tokenizers."""
    folder = _real_data_dir()
    assert folder is not None
    corpus = files_corpus("de", "en", train=(folder / "val.de.gz", folder / "val.en.gz"))
    real = folder_corpus(folder, "de", "en")
    train = list(corpus.pairs("train")) + list(real.pairs("test"))
    paths = [tmp_path / "train.de", tmp_path / "train.en"]
    for side, path in enumerate(paths):
        path.write_text("".join(pair[side] + "\n" for pair in train), encoding="utf-8")
    corpus = files_corpus("de", "en", train=(paths[0], paths[1]))
    src_tok = WordTokenizer.build(corpus.texts("train", "src"), "de")
    tgt_tok = WordTokenizer.build(corpus.texts("train", "tgt"), "en")
    with pytest.warns(UserWarning, match="truncated 170 of 2014 pairs"):
        store = prepare_store(corpus, "train", src_tok, tgt_tok, cache_dir=tmp_path / "cache", max_len=20, workers=1)
    assert len(store) == 2014
    with pytest.warns(UserWarning, match="truncated"):
        reference = encode_pairs(train, src_tok, tgt_tok, max_len=20)
    for seed, max_tokens in ((0, 1000), (5, 4096)):
        assert_same_batches(StoredBatches(store, max_tokens, seed=seed), make_batches(reference, max_tokens, seed=seed))


def test_a_dataset_corpus_goes_through_the_store_too(tmp_path, tokenizer):
    import datasets

    from companion.data.hub import disk_corpus

    rows = [{"fr": s, "en": " ".join(reversed(s.split()))} for s in SENTENCES * 4]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    corpus = disk_corpus(tmp_path / "saved", src="fr", tgt="en")
    store = prepare_store(corpus, "train", tokenizer, tokenizer, cache_dir=tmp_path / "cache", workers=1)
    assert store.meta["data"]["rows"] == 20 and store.meta["data"]["fingerprint"]
    reference = encode_pairs([(r["fr"], r["en"]) for r in rows], tokenizer, tokenizer)
    assert_same_batches(StoredBatches(store, 40, seed=4), make_batches(reference, 40, seed=4))
