"""Data for translation: tokenizers, Multi30k loading, token-count batches and synthetic tasks.

One module per step, read in this order:

1. :mod:`companion.data.tokenizers`: special tokens with fixed ids (``<pad>=0, <unk>=1, <bos>=2, <eos>=3``),
   ``WordTokenizer`` (spaCy words) and ``SubwordTokenizer`` (trained BPE, shared by both languages as in the
   paper), both serialisable into a checkpoint.
2. :mod:`companion.data.multi30k`: ``load_multi30k`` from a local folder or the Hugging Face hub.
3. :mod:`companion.data.batching`: ``encode_pairs``, ``make_batches`` into right-padded ``Batch`` tensors of
   about ``max_tokens`` tokens, and ``pad_sequences``.
4. :mod:`companion.data.synthetic`: copy / reverse / sort tasks that need no data at all.
5. :mod:`companion.data.corpus`: any parallel corpus (folder, files, TSV), streamed; :mod:`companion.data.hub`: the
   same from a Hugging Face dataset (hub, ``save_to_disk``, local JSON).
6. :mod:`companion.data.store`: token ids on disk for corpora that do not fit in memory, and ``StoredBatches``.

Every public name is importable from ``companion.data`` directly.
"""

from .batching import Batch, encode_pairs, make_batches, pad_sequences
from .corpus import FileCorpus, HeldOutCorpus, ParallelCorpus, files_corpus, folder_corpus, tsv_corpus
from .hub import DatasetCorpus, disk_corpus, hub_corpus, json_corpus
from .multi30k import DATA_DIR_ENV, MULTI30K_HUB_NAME, MULTI30K_LANGUAGES, MULTI30K_UNSEEN_TESTS, load_multi30k
from .store import StoredBatches, TokenStore, prepare_store
from .synthetic import SYNTHETIC_TASKS, synthetic_pairs
from .tokenizers import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK,
    UNK_ID,
    SubwordTokenizer,
    Tokenizer,
    WordTokenizer,
    tokenizer_from_dict,
)

__all__ = [
    "PAD",
    "UNK",
    "BOS",
    "EOS",
    "PAD_ID",
    "UNK_ID",
    "BOS_ID",
    "EOS_ID",
    "SPECIAL_TOKENS",
    "Tokenizer",
    "WordTokenizer",
    "SubwordTokenizer",
    "tokenizer_from_dict",
    "MULTI30K_LANGUAGES",
    "MULTI30K_HUB_NAME",
    "MULTI30K_UNSEEN_TESTS",
    "DATA_DIR_ENV",
    "load_multi30k",
    "encode_pairs",
    "Batch",
    "make_batches",
    "pad_sequences",
    "SYNTHETIC_TASKS",
    "synthetic_pairs",
    "ParallelCorpus",
    "FileCorpus",
    "HeldOutCorpus",
    "DatasetCorpus",
    "folder_corpus",
    "files_corpus",
    "tsv_corpus",
    "hub_corpus",
    "disk_corpus",
    "json_corpus",
    "prepare_store",
    "TokenStore",
    "StoredBatches",
]
