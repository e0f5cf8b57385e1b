"""companion.load_pretrained: where the shipped model is looked for, the download path (digest checked), the
offline error, and the shipped model itself."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch

import companion
from companion import pretrained
from companion.checkpoint import save_checkpoint
from companion.data import WordTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "pretrained" / "de-en-small.pt"


@pytest.fixture
def tiny_checkpoint(tmp_path, tiny_model) -> pathlib.Path:
    src = WordTokenizer.build(["ein hund läuft", "eine katze"], "de")
    tgt = WordTokenizer.build(["a dog runs", "a cat"], "en")
    model = tiny_model(src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size)
    path = tmp_path / "shipped" / "de-en-small.pt"
    path.parent.mkdir()
    save_checkpoint(path, model=model, step=7, tokenizers={"src": src, "tgt": tgt})
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No local copy anywhere: an empty cache, no environment folder, and no repository folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(pretrained.PRETRAINED_DIR_ENV, raising=False)
    real = pretrained._candidates
    monkeypatch.setattr(pretrained, "_candidates", lambda file: [c for c in real(file) if ROOT not in c.parents])


@pytest.fixture
def shipped_as(monkeypatch):
    """Make ``path`` the shipped file: its SHA-256 becomes the one ``load_pretrained`` expects."""

    def ship(path: pathlib.Path) -> None:
        entry = dict(pretrained.PRETRAINED_MODELS["multi30k-de-en-small"], sha256=pretrained._sha256(path))
        monkeypatch.setitem(pretrained.PRETRAINED_MODELS, "multi30k-de-en-small", entry)

    return ship


def test_environment_folder_is_searched_and_loaded(tiny_checkpoint, nowhere, monkeypatch, shipped_as):
    shipped_as(tiny_checkpoint)
    monkeypatch.setenv(pretrained.PRETRAINED_DIR_ENV, str(tiny_checkpoint.parent))
    assert companion.pretrained.pretrained_path() == tiny_checkpoint
    loaded = companion.load_pretrained()
    assert loaded.path == tiny_checkpoint and loaded.info["step"] == 7
    assert not loaded.model.training
    assert isinstance(loaded.translate(["ein hund"], beam_size=1)[0], str)


def test_without_a_copy_and_without_download_the_error_says_where_to_put_it(nowhere):
    with pytest.raises(companion.PretrainedUnavailableError, match="COMPANION_PRETRAINED_DIR|looked in"):
        companion.load_pretrained(download=False)


def test_download_goes_to_the_cache_and_checks_the_digest(tiny_checkpoint, nowhere, monkeypatch, tmp_path):
    monkeypatch.setattr(pretrained, "_REPOSITORY_RAW", tiny_checkpoint.parent.as_uri())
    entry = dict(pretrained.PRETRAINED_MODELS["multi30k-de-en-small"], sha256=pretrained._sha256(tiny_checkpoint))
    monkeypatch.setitem(pretrained.PRETRAINED_MODELS, "multi30k-de-en-small", entry)
    path = pretrained.pretrained_path()
    assert path == tmp_path / "cache" / "companion" / "de-en-small.pt"
    assert path.read_bytes() == tiny_checkpoint.read_bytes()
    path.unlink()
    monkeypatch.setitem(pretrained.PRETRAINED_MODELS, "multi30k-de-en-small", dict(entry, sha256="0" * 64))
    with pytest.raises(companion.PretrainedUnavailableError, match="SHA-256"):
        pretrained.pretrained_path()
    assert not path.exists() and not list(path.parent.glob(".download-*")), "nothing half-written is left"


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_the_downloaded_file_follows_the_umask(umask, tiny_checkpoint, nowhere, monkeypatch):
    """The cache file was written with mkstemp's 0600 whatever the umask (issue 21, item 20)."""
    monkeypatch.setattr(pretrained, "_REPOSITORY_RAW", tiny_checkpoint.parent.as_uri())
    entry = dict(pretrained.PRETRAINED_MODELS["multi30k-de-en-small"], sha256=pretrained._sha256(tiny_checkpoint))
    monkeypatch.setitem(pretrained.PRETRAINED_MODELS, "multi30k-de-en-small", entry)
    before = os.umask(umask)
    try:
        path = pretrained.pretrained_path()
    finally:
        os.umask(before)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_download_is_a_clear_error(nowhere, monkeypatch, tmp_path):
    monkeypatch.setattr(pretrained, "_REPOSITORY_RAW", (tmp_path / "missing").as_uri())
    with pytest.raises(
        companion.PretrainedUnavailableError, match="downloading it from .* failed.*COMPANION_PRETRAINED_DIR"
    ):
        companion.load_pretrained()


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="name must be one of"):
        companion.load_pretrained("gpt-5")


@pytest.mark.skipif(
    not (ROOT / "pretrained" / "de-en-small.json").exists(), reason="the shipped model is not in this checkout"
)
def test_the_shipped_model_matches_its_card_and_translates():
    import json

    card = json.loads((ROOT / "pretrained" / "de-en-small.json").read_text())
    assert (
        pretrained._sha256(SHIPPED) == card["sha256"] == pretrained.PRETRAINED_MODELS["multi30k-de-en-small"]["sha256"]
    )
    loaded = companion.load_pretrained(path=SHIPPED)
    assert loaded.model.num_parameters() == card["model"]["parameters"]
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())
    english = loaded.translate(["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball."])
    assert english[0].lower().startswith("a dog") and "snow" in english[0]
    assert "soccer" in english[1] or "football" in english[1]


def test_a_string_is_one_sentence(tiny_checkpoint):
    loaded = companion.load_pretrained(path=tiny_checkpoint)
    single = loaded.translate("ein hund läuft", beam_size=1)
    assert isinstance(single, str)
    assert single == loaded.translate(["ein hund läuft"], beam_size=1)[0]


def test_a_modified_local_copy_is_refused(tiny_checkpoint, nowhere, monkeypatch, shipped_as):
    """Vocabulary entries swapped and the content digest recomputed: the file loads as a checkpoint, but it is not
    the shipped file, whose SHA-256 load_pretrained knows."""
    from companion.checkpoint.validate import _digest

    shipped_as(tiny_checkpoint)
    checkpoint = torch.load(tiny_checkpoint, weights_only=True)
    itos = checkpoint["tokenizers"]["tgt"]["itos"]
    itos[-1], itos[-2] = itos[-2], itos[-1]
    checkpoint["content_sha256"] = _digest(checkpoint)
    torch.save(checkpoint, tiny_checkpoint)
    monkeypatch.setenv(pretrained.PRETRAINED_DIR_ENV, str(tiny_checkpoint.parent))
    with pytest.raises(companion.PretrainedUnavailableError, match=r"de-en-small\.pt .*SHA-256") as caught:
        companion.load_pretrained()
    assert str(tiny_checkpoint) in str(caught.value)
    monkeypatch.delenv(pretrained.PRETRAINED_DIR_ENV)
    cached = pretrained._cache_dir() / "de-en-small.pt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(tiny_checkpoint.read_bytes())
    with pytest.raises(companion.PretrainedUnavailableError, match="SHA-256"):
        companion.load_pretrained(download=False)
    assert companion.load_pretrained(path=cached).path == cached  # a file named by the caller is loaded as it is


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_device_is_resolved_first(tiny_checkpoint):
    with pytest.raises(companion.DeviceUnavailableError, match="CUDA is not available"):
        companion.load_pretrained(path=tiny_checkpoint, device="cuda")
    with pytest.raises(companion.ConfigError, match="device must be .*'bogus'"):
        companion.load_pretrained(path=tiny_checkpoint, device="bogus")
