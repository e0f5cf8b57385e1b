"""Token ids on disk, for corpora that do not fit in memory: tokenize once, in parallel, then batch lazily.

:func:`prepare_store` streams the pairs of one split of a :class:`~companion.data.corpus.ParallelCorpus`
through the tokenizers in ``workers`` processes and writes the ids to a folder of memory-mapped arrays: per
side the ids of all pairs concatenated (``uint16`` when the vocabulary fits, else ``int32``) and ``int64``
offsets, plus ``meta.json``. The folder's name is a digest of the data's identity (files and their SHA-256),
both tokenizers' serialized form and the truncation rule, so a store written from other data or with another
tokenizer is never reused: it is built anew. A store is built in a temporary folder and renamed into place
when complete, so an interrupted build leaves nothing that is later taken for a finished store.

:class:`StoredBatches` is a ``Sequence[Batch]`` over a :class:`TokenStore` holding exactly the batches
``make_batches(encode_pairs(pairs, ...), max_tokens, shuffle=..., seed=...)`` gives for the same pairs, in the
same order; only the batch boundaries are computed up front (numpy index arrays), each batch's tensors are
collated when it is indexed. :meth:`StoredBatches.local` collates only one rank's rows of a batch.
"""

from __future__ import annotations

import array
import hashlib
import itertools
import json
import multiprocessing
import os
import random
import shutil
import socket
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch

from .._validation import check_encoding_options, check_positive_int
from ..errors import DataError
from .batching import Batch
from .corpus import ParallelCorpus
from .tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer, tokenizer_from_dict

__all__ = ["STORE_FORMAT", "CACHE_DIR_ENV", "default_cache_dir", "prepare_store", "TokenStore", "StoredBatches"]

STORE_FORMAT = 1  # bump when the layout of a store changes: older stores are then rebuilt
CACHE_DIR_ENV = "COMPANION_CACHE_DIR"
_SIDES = ("src", "tgt")


def default_cache_dir() -> Path:
    """``$COMPANION_CACHE_DIR``, else ``$XDG_CACHE_HOME/companion`` (``~/.cache/companion``), + ``token-stores``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]) / "token-stores"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "companion" / "token-stores"


# -- the store on disk -------------------------------------------------------------------------------------


class TokenStore:
    """The token ids of one split, memory-mapped from a folder written by :func:`prepare_store`.

    Attributes:
        path: the folder.
        meta: the contents of ``meta.json`` (data identity, tokenizer digests, counts, build statistics).
        src_lengths, tgt_lengths: ``[num_pairs]`` int64 numpy arrays, ids per pair (no ``<bos>``/``<eos>``).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        """Open a complete store; a :class:`~companion.errors.DataError` if the folder is not one."""
        self.path = Path(path)
        self.meta = _read_meta(self.path)
        self._ids: dict[str, np.ndarray] = {}
        self._offsets: dict[str, np.ndarray] = {}
        for side in _SIDES:
            info = self.meta["sides"][side]
            ids_path, offsets_path = self.path / f"{side}_ids.bin", self.path / f"{side}_offsets.npy"
            dtype = np.dtype(info["dtype"])
            if not ids_path.is_file() or ids_path.stat().st_size != info["tokens"] * dtype.itemsize:
                raise DataError(
                    f"token store {self.path} is incomplete: {ids_path.name} does not hold {info['tokens']} ids"
                )
            offsets = np.load(offsets_path, mmap_mode="r")
            if offsets.shape != (self.num_pairs + 1,) or (self.num_pairs and int(offsets[-1]) != info["tokens"]):
                raise DataError(
                    f"token store {self.path} is inconsistent: {offsets_path.name} does not match meta.json"
                )
            self._offsets[side] = offsets
            self._ids[side] = (
                np.memmap(ids_path, dtype=dtype, mode="r", shape=(info["tokens"],))
                if info["tokens"]
                else np.zeros(0, dtype=dtype)
            )
        self.src_lengths = np.diff(self._offsets["src"]).astype(np.int64)
        self.tgt_lengths = np.diff(self._offsets["tgt"]).astype(np.int64)

    @property
    def num_pairs(self) -> int:
        return int(self.meta["pairs"])

    def __len__(self) -> int:
        return self.num_pairs

    def ids(self, side: str, index: int) -> np.ndarray:
        """The ids of pair ``index`` on ``side`` ("src" or "tgt"), a numpy view of the memory map."""
        offsets = self._offsets[side]
        return self._ids[side][int(offsets[index]) : int(offsets[index + 1])]

    def pair(self, index: int) -> tuple[list[int], list[int]]:
        """Pair ``index`` as ``(src_ids, tgt_ids)`` lists, as :func:`~companion.data.batching.encode_pairs` gives it."""
        if not -self.num_pairs <= index < self.num_pairs:
            raise IndexError(f"pair index {index} out of range for a store of {self.num_pairs} pairs")
        index %= self.num_pairs
        return self.ids("src", index).tolist(), self.ids("tgt", index).tolist()

    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """The source and target tokenizers the store was written with (rebuilt from ``tokenizers.json``)."""
        values = json.loads((self.path / "tokenizers.json").read_text(encoding="utf-8"))
        return tokenizer_from_dict(values["src"]), tokenizer_from_dict(values["tgt"])

    def __repr__(self) -> str:
        return f"TokenStore({str(self.path)!r}, pairs={self.num_pairs})"


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{path} is not a complete token store (meta.json unreadable: {error})") from None
    if not isinstance(meta, dict) or meta.get("format") != STORE_FORMAT or not meta.get("complete"):
        raise DataError(f"{path} is not a complete token store of format {STORE_FORMAT}")
    return meta


def store_key(identity: dict[str, Any], src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, max_len: int | None) -> str:
    """The SHA-256 that names a store: the data's identity, both tokenizers' ``to_dict()`` and ``max_len``."""
    description = {
        "format": STORE_FORMAT,
        "data": identity,
        "src_tokenizer": src_tokenizer.to_dict(),
        "tgt_tokenizer": tgt_tokenizer.to_dict(),
        "max_len": max_len,
    }
    return hashlib.sha256(json.dumps(description, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def prepare_store(
    corpus: ParallelCorpus,
    split: str,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    cache_dir: str | os.PathLike | None = None,
    max_len: int | None = None,
    workers: int | None = None,
    chunk_pairs: int = 20_000,
    log: Callable[[str], None] | None = None,
) -> TokenStore:
    """The token store of ``corpus``'s ``split``: reused if this data was stored with these tokenizers and this
    ``max_len`` before, else built (tokenization in ``workers`` processes; default: the CPU count; 1 tokenizes
    in this process; each worker task is ``chunk_pairs`` pairs, and a corpus of one chunk is tokenized here).

    The ids are those of :func:`~companion.data.batching.encode_pairs` with the same ``max_len`` (each side truncated to
    ``max_len - 1`` ids, with one warning giving the count). The store lives in
    ``cache_dir/{split}-{digest}`` (default :func:`default_cache_dir`). A reused store warns about truncation as
    its build did. ``log`` (e.g. ``print``) hears which of the two happens, and how long a build took: tokenizing a
    corpus of millions of pairs takes minutes.
    """
    if not isinstance(corpus, ParallelCorpus):
        raise TypeError(f"corpus must be a companion.data.corpus.ParallelCorpus, got {type(corpus).__name__}")
    check_encoding_options(src_tokenizer, tgt_tokenizer, max_len)
    workers = (os.cpu_count() or 1) if workers is None else check_positive_int("workers", workers)
    check_positive_int("chunk_pairs", chunk_pairs)
    identity = corpus.identity(split)  # raises the corpus's own error for a missing file or an unknown split
    key = store_key(identity, src_tokenizer, tgt_tokenizer, max_len)
    root = Path(default_cache_dir() if cache_dir is None else cache_dir)
    final = root / f"{split}-{key[:32]}"
    if final.is_dir():
        try:
            store = TokenStore(final)
            if store.meta.get("key") == key:
                if log is not None:
                    log(f"the {split} split's token ids are in the cache: {final}")
                _warn_truncated(split, store.meta.get("truncated_pairs", 0), store.num_pairs, max_len)
                return store
        except DataError:
            pass
        shutil.rmtree(final, ignore_errors=True)  # not this data or not complete: never reused
    root.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(root)
    building = Path(tempfile.mkdtemp(prefix=f".building-{split}-", dir=root))
    if log is not None:
        log(f"tokenizing the {split} split into the cache ({workers} process(es)): {final}")
    try:
        _write_json(building / "owner.json", {"host": socket.gethostname(), "pid": os.getpid()})
        chunks = _chunks(corpus.pairs(split), chunk_pairs)
        meta = _write_store(building, chunks, (src_tokenizer, tgt_tokenizer), max_len, workers)
        _warn_truncated(split, meta["truncated_pairs"], meta["pairs"], max_len)
        if log is not None:
            log(f"tokenized {meta['pairs']:,} {split} pairs in {meta['build_seconds']:.1f} s")
        meta |= {"key": key, "data": identity, "split": split}
        _write_json(building / "meta.json", meta | {"complete": True})
        try:
            os.rename(building, final)
        except OSError:  # another process finished the same store first
            if not (final / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return TokenStore(final)


def _remove_abandoned_builds(root: Path) -> None:
    """Delete temporary build folders of this machine whose process is gone (a build killed before its rename).

    Each build folder names its owner in ``owner.json`` (host and process id); folders of other hosts (a cache
    on a shared file system) and of live processes are left alone.
    """
    for folder in root.glob(".building-*"):
        try:
            owner = json.loads((folder / "owner.json").read_text(encoding="utf-8"))
            if owner["host"] != socket.gethostname():
                continue
            os.kill(int(owner["pid"]), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError, KeyError, TypeError):
            continue


def _write_json(path: Path, values: dict[str, Any]) -> None:
    path.write_text(json.dumps(values, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _ids_dtype(tokenizer: Tokenizer) -> np.dtype:
    return np.dtype(np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32)


def _write_store(
    folder: Path,
    chunks: Iterator[list[tuple[str, str]]],
    tokenizers: tuple[Tokenizer, Tokenizer],
    max_len: int | None,
    workers: int,
) -> dict[str, Any]:
    """Tokenize the split into ``folder`` (ids files, offsets, tokenizers.json); returns meta.json's fields."""
    start = time.perf_counter()
    dtypes = {side: _ids_dtype(tok) for side, tok in zip(_SIDES, tokenizers)}
    dicts = [tok.to_dict() for tok in tokenizers]
    _write_json(folder / "tokenizers.json", {"src": dicts[0], "tgt": dicts[1]})
    lengths: dict[str, list[np.ndarray]] = {side: [] for side in _SIDES}
    truncated = 0
    handles = {side: open(folder / f"{side}_ids.bin", "wb") for side in _SIDES}
    try:
        for encoded in _encode_chunks(chunks, dicts, tokenizers, max_len, workers):
            for side, (flat, lens) in zip(_SIDES, encoded["sides"]):
                handles[side].write(flat.astype(dtypes[side], copy=False).tobytes())
                lengths[side].append(lens)
            truncated += encoded["truncated"]
    finally:
        for handle in handles.values():
            handle.close()
    sides = {}
    for side in _SIDES:
        lens = np.concatenate(lengths[side]) if lengths[side] else np.zeros(0, dtype=np.int64)
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        np.save(folder / f"{side}_offsets.npy", offsets)
        sides[side] = {"dtype": dtypes[side].name, "tokens": int(offsets[-1]), "max_length": int(lens.max(initial=0))}
        num_pairs = len(lens)
    return {
        "format": STORE_FORMAT,
        "pairs": num_pairs,
        "sides": sides,
        "max_len": max_len,
        "truncated_pairs": truncated,
        "tokenizer_sha256": {
            side: hashlib.sha256(json.dumps(d, sort_keys=True).encode("utf-8")).hexdigest()
            for side, d in zip(_SIDES, dicts)
        },
        "build_seconds": round(time.perf_counter() - start, 3),
        "workers": workers,
    }


def _warn_truncated(split: str, truncated: int, pairs: int, max_len: int | None) -> None:
    """The truncation warning of a store (built now, or reused: the same cut applies to every run that reads it)."""
    if truncated and max_len is not None:
        warnings.warn(
            f"prepare_store: {split} split: truncated {truncated} of {pairs} pairs to max_len - 1 = {max_len - 1} "
            "tokens per side (max_len is the model's: --max-len on the command line)",
            stacklevel=4,
        )


def _chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    chunk: list[tuple[str, str]] = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _encode_chunks(
    chunks: Iterable[list[tuple[str, str]]],
    dicts: list[dict[str, Any]],
    tokenizers: tuple[Tokenizer, Tokenizer],
    max_len: int | None,
    workers: int,
) -> Iterator[dict[str, Any]]:
    """The encoded chunks, in order; with ``workers > 1`` and more than one chunk from a process pool, at most
    ``2 * workers`` chunks in flight (so memory stays bounded however long the corpus)."""
    rest = iter(chunks)
    head = list(itertools.islice(rest, 2))
    if workers == 1 or len(head) < 2:  # one chunk: starting processes would cost more than it saves
        for chunk in itertools.chain(head, rest):
            yield _encode_chunk(chunk, tokenizers, max_len)
        return
    context = multiprocessing.get_context("spawn")  # safe with threads, CUDA and HF tokenizers
    with context.Pool(workers, initializer=_init_worker, initargs=(dicts,)) as pool:
        pending: deque = deque()
        for chunk in itertools.chain(head, rest):
            pending.append(pool.apply_async(_encode_in_worker, (chunk, max_len)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


_WORKER_TOKENIZERS: tuple[Tokenizer, Tokenizer] | None = None


def _init_worker(dicts: list[dict[str, Any]]) -> None:
    """Rebuild the tokenizers in a worker process (one thread each: the processes are the parallelism)."""
    global _WORKER_TOKENIZERS
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(1)
    _WORKER_TOKENIZERS = (tokenizer_from_dict(dicts[0]), tokenizer_from_dict(dicts[1]))


def _encode_in_worker(chunk: list[tuple[str, str]], max_len: int | None) -> dict[str, Any]:
    assert _WORKER_TOKENIZERS is not None
    return _encode_chunk(chunk, _WORKER_TOKENIZERS, max_len)


def _encode_chunk(
    chunk: list[tuple[str, str]], tokenizers: tuple[Tokenizer, Tokenizer], max_len: int | None
) -> dict[str, Any]:
    """Ids of a chunk of pairs per side as (flat int64 ids, int64 lengths), truncated as encode_pairs does."""
    encoded = [tok.encode_batch([pair[i] for pair in chunk]) for i, tok in enumerate(tokenizers)]
    truncated = 0
    if max_len is not None:
        limit = max_len - 1
        truncated = sum(len(s) > limit or len(t) > limit for s, t in zip(*encoded))
        encoded = [[ids[:limit] for ids in side] for side in encoded]
    sides = []
    for side in encoded:
        lens = np.fromiter((len(ids) for ids in side), dtype=np.int64, count=len(side))
        flat = np.fromiter(itertools.chain.from_iterable(side), dtype=np.int64, count=int(lens.sum()))
        sides.append((flat, lens))
    return {"sides": sides, "truncated": truncated}


# -- batches from the store --------------------------------------------------------------------------------


def batch_plan(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, *, shuffle: bool = True, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batches of :func:`~companion.data.make_batches` as index arrays, from the pairs' lengths alone.

    Returns ``(order, starts, batch_order)``: ``order`` the pair indices sorted as make_batches sorts them,
    chunk ``c`` is ``order[starts[c]:starts[c + 1]]`` (with ``starts`` ending in ``len(order)``), and batch
    ``k`` is chunk ``batch_order[k]``. Same random draws as make_batches (``random.Random(seed)``: a shuffle of
    the pair indices, then a shuffle of the batches), so the result is identical.
    """
    num_pairs = len(src_lengths)
    rng = random.Random(seed)
    if shuffle:
        shuffled = array.array("q", range(num_pairs))  # compact (8 bytes per index) and exact: random.shuffle
        rng.shuffle(shuffled)
        order = np.frombuffer(shuffled, dtype=np.int64)
    else:
        order = np.arange(num_pairs, dtype=np.int64)
    longer = np.maximum(src_lengths, tgt_lengths)
    order = order[np.lexsort((src_lengths[order], longer[order]))]  # stable: by longer side, then source
    starts = _chunk_starts(longer[order] + 1, max_tokens)  # + <eos>/<bos>
    batch_order = list(range(len(starts) - 1))
    if shuffle:
        rng.shuffle(batch_order)
    return order, starts, np.asarray(batch_order, dtype=np.int64)


def _chunk_starts(lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where make_batches' greedy cut starts each chunk, given the sorted (non-decreasing) padded lengths.

    The greedy rule adds a pair to a non-empty chunk only while ``(count + 1) * length <= max_tokens``; since
    the lengths never decrease, each run of equal lengths ``L`` fills the current chunk up to
    ``max_tokens // L`` pairs, then cuts chunks of ``max(1, max_tokens // L)`` pairs.
    """
    values, counts = np.unique(lengths, return_counts=True)
    starts: list[np.ndarray] = []
    position = carried = 0  # pairs placed so far; pairs in the chunk being filled
    for length, count in zip(values.tolist(), counts.tolist()):
        fit = max_tokens // length
        taken = min(max(fit - carried, 0), count) if carried else 0
        carried += taken
        position += taken
        remaining = count - taken
        if remaining == 0:
            continue
        capacity = max(1, fit)
        new_chunks = -(-remaining // capacity)
        starts.append(position + capacity * np.arange(new_chunks, dtype=np.int64))
        carried = remaining - capacity * (new_chunks - 1)
        position += remaining
    starts.append(np.array([position], dtype=np.int64))
    return np.concatenate(starts)


class StoredBatches(Sequence[Batch]):
    """The training batches of a :class:`TokenStore`, collated lazily: ``batches[k]`` equals
    ``make_batches(pairs, max_tokens, shuffle=shuffle, seed=seed, ...)[k]`` for the store's pairs.

    Memory: the sorted pair order and the batch boundaries (numpy, 8 bytes per pair); ids stay on disk until a
    batch is indexed. Use it as the ``train_batches`` of a :class:`~companion.train.Trainer`.
    """

    def __init__(
        self,
        store: TokenStore,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        pad_id: int = PAD_ID,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
    ) -> None:
        if not isinstance(store, TokenStore):
            raise TypeError(f"store must be a TokenStore (from prepare_store), got {type(store).__name__}")
        self.store = store
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self.shuffle, self.seed = shuffle, seed
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self._order, self._starts, self._batch_order = batch_plan(
            store.src_lengths, store.tgt_lengths, max_tokens, shuffle=shuffle, seed=seed
        )

    def __len__(self) -> int:
        return len(self._batch_order)

    @overload
    def __getitem__(self, index: int) -> Batch: ...

    @overload
    def __getitem__(self, index: slice) -> list[Batch]: ...

    def __getitem__(self, index: int | slice) -> Batch | list[Batch]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._collate(self.pair_indices(index))

    def pair_indices(self, index: int) -> np.ndarray:
        """The store's pair indices in batch ``index``, in row order."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"batch index must be an integer, got {type(index).__name__}")
        if not -len(self) <= index < len(self):
            raise IndexError(f"batch index {index} out of range for {len(self)} batches")
        chunk = int(self._batch_order[index])
        return self._order[self._starts[chunk] : self._starts[chunk + 1]]

    def token_counts(self, index: int) -> tuple[int, int]:
        """``(num_src_tokens, num_tgt_tokens)`` of batch ``index`` (with ``<eos>``), from the lengths alone:
        what a rank that collates only its share needs to weigh the global batch."""
        pairs = self.pair_indices(index)
        return int(self.store.src_lengths[pairs].sum()) + len(pairs), int(self.store.tgt_lengths[pairs].sum()) + len(
            pairs
        )

    def local(self, index: int, rank: int, world_size: int) -> tuple[Batch, float]:
        """This rank's share of batch ``index`` and its weight, exactly as ``Trainer._local_share`` cuts the
        whole batch: rows ``torch.tensor_split(range(rows), world_size)[rank]``, padding columns trimmed; a rank
        left without rows gets the batch's first row with weight 0 (it joins the all-reduce, counts nothing).
        Only this share's ids are read from disk."""
        check_positive_int("world_size", world_size)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
        pairs = self.pair_indices(index)
        rows = np.array_split(np.arange(len(pairs)), world_size)[rank]  # same cut as torch.tensor_split
        if len(rows) == 0:
            return self._collate(pairs[:1]), 0.0
        return self._collate(pairs[rows]), 1.0

    def _collate(self, pairs: np.ndarray) -> Batch:
        """Right-padded ``src`` [rows, max_src + 1], ``tgt_in``/``tgt_out`` [rows, max_tgt + 1] long tensors."""
        src_ids = [self.store.ids("src", int(i)) for i in pairs]
        tgt_ids = [self.store.ids("tgt", int(i)) for i in pairs]
        src = _padded(src_ids, self.pad_id, self.eos_id, at_start=False)
        tgt_in = _padded(tgt_ids, self.pad_id, self.bos_id, at_start=True)
        tgt_out = _padded(tgt_ids, self.pad_id, self.eos_id, at_start=False)
        return Batch(
            torch.from_numpy(src),
            torch.from_numpy(tgt_in),
            torch.from_numpy(tgt_out),
            int((src != self.pad_id).sum()),
            int((tgt_out != self.pad_id).sum()),
        )

    def __repr__(self) -> str:
        return (
            f"StoredBatches({len(self)} batches of <= {self.max_tokens} tokens from {self.store.num_pairs} pairs, "
            f"shuffle={self.shuffle}, seed={self.seed})"
        )


def _padded(rows: list[np.ndarray], pad_id: int, marker: int, *, at_start: bool) -> np.ndarray:
    """``[len(rows), longest + 1]`` int64: each row with ``marker`` prepended (``at_start``) or appended, then pads."""
    width = max(len(row) for row in rows) + 1
    out = np.full((len(rows), width), pad_id, dtype=np.int64)
    for r, row in enumerate(rows):
        if at_start:
            out[r, 0] = marker
            out[r, 1 : len(row) + 1] = row
        else:
            out[r, : len(row)] = row
            out[r, len(row)] = marker
    return out
