"""What the run-layer tests (tests/unit/runs/) and the command-line tests share: a fast synthetic-task command
line, a tiny Multi30k-shaped corpus, a tiny word-level checkpoint."""

from __future__ import annotations

import gzip
from pathlib import Path

from companion import Transformer, TransformerConfig
from companion.checkpoint import save_checkpoint
from companion.cli import main
from companion.data import WordTokenizer

# `companion train` on the copy task with a tiny model: a step takes milliseconds.
COPY = [
    "train",
    "--task",
    "copy",
    "--preset",
    "tiny",
    "--num-examples",
    "300",
    "--max-tokens",
    "200",
    "--no-progress",
    "--device",
    "cpu",
    "--threads",
    "1",
]


def write_corpus(folder: Path, pairs_by_split=None, gz: bool = True) -> Path:
    """Multi30k's file layout (train/val/test_2016_flickr .en/.de, gzipped) with 40 short pairs per split."""
    folder.mkdir(parents=True, exist_ok=True)
    default = [(f"a man number {i} .", f"ein mann nummer {i} .") for i in range(40)]
    pairs_by_split = pairs_by_split or {}
    for stem in ("train", "val", "test_2016_flickr"):
        pairs = pairs_by_split.get(stem, default)
        for side, lang in ((0, "en"), (1, "de")):
            text = "".join(pair[side] + "\n" for pair in pairs).encode()
            if gz:
                (folder / f"{stem}.{lang}.gz").write_bytes(gzip.compress(text, mtime=0))
            else:
                (folder / f"{stem}.{lang}").write_bytes(text)
    return folder


def train_words(folder: Path, out: Path, steps: int, *extra: str) -> int:
    """``companion train`` with the tiny preset and the word tokenizer on the corpus in ``folder``."""
    return main(
        [
            "train",
            "--preset",
            "tiny",
            "--tokenizer",
            "word",
            "--data-dir",
            str(folder),
            "--max-steps",
            str(steps),
            "--max-tokens",
            "200",
            "--device",
            "cpu",
            "--no-progress",
            "--threads",
            "1",
            "--out",
            str(out),
            *extra,
        ]
    )


def word_checkpoint(path: Path) -> Path:
    """A tiny untrained word-level model with its tokenizers: enough to exercise ``translate``."""
    tok = WordTokenizer.build(["a man rides a bike .", "two dogs play in the snow ."], "en")
    config = TransformerConfig(
        tok.vocab_size,
        tok.vocab_size,
        d_model=16,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        dropout=0.0,
        max_len=16,
    )
    save_checkpoint(path, model=Transformer(config), step=1, tokenizers={"src": tok, "tgt": tok})
    return path
