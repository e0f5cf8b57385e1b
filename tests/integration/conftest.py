"""Fixtures of the integration tests: a small corpus laid out like Multi30k's raw files."""

from __future__ import annotations

import gzip
import pathlib

import pytest
import torch

WORDS_EN = ["a", "man", "woman", "dog", "runs", "sits", "on", "the", "red", "blue", "street", "grass"]
WORDS_DE = ["ein", "mann", "frau", "hund", "läuft", "sitzt", "auf", "der", "roten", "blauen", "straße", "wiese"]


@pytest.fixture
def multi30k_folder(tmp_path) -> pathlib.Path:
    """A small folder laid out like Multi30k's raw files: parallel sentences made of a dozen words."""
    folder = tmp_path / "multi30k"
    folder.mkdir()
    generator = torch.Generator().manual_seed(0)
    for stem, n in (("train", 80), ("val", 10), ("test_2016_flickr", 12)):
        picks = [
            torch.randint(
                0, len(WORDS_EN), (int(torch.randint(3, 8, (1,), generator=generator)),), generator=generator
            ).tolist()
            for _ in range(n)
        ]
        for lang, words in (("en", WORDS_EN), ("de", WORDS_DE)):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as handle:
                handle.write("".join(" ".join(words[i] for i in pick).capitalize() + ".\n" for pick in picks))
    return folder
