"""companion.load_pretrained: where the shipped models (de-en and en-de) are looked for, the download path (digest
checked), the offline error, a bad direction, the shipped models and their cards, and the tool that makes them."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import companion
from companion import pretrained
from companion.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint, tokenizers_from_checkpoint
from companion.data import WordTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "pretrained" / "de-en-small.pt"
DIRECTIONS = ("de-en", "en-de")
# two test sentences per direction, and words their translations must contain
SENTENCES = {
    "de-en": (["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball."], [("dog", "snow"), ("soccer",)]),
    "en-de": (["A dog runs through the snow.", "Two men are playing soccer."], [("hund", "schnee"), ("fußball",)]),
}


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

    def ship(path: pathlib.Path, direction: str = "de-en") -> None:
        name = pretrained.DIRECTIONS[direction]
        entry = dict(pretrained.PRETRAINED_MODELS[name], sha256=pretrained._sha256(path))
        monkeypatch.setitem(pretrained.PRETRAINED_MODELS, name, entry)

    return ship


def tiny_run_checkpoint(path: pathlib.Path, direction: str, tiny_model) -> pathlib.Path:
    """A tiny checkpoint for ``direction`` (word tokenizers that record their languages) at ``path``."""
    src, tgt = direction.split("-")
    texts = {"de": ["ein hund läuft", "eine katze"], "en": ["a dog runs", "a cat"]}
    src_tok, tgt_tok = WordTokenizer.build(texts[src], src), WordTokenizer.build(texts[tgt], tgt)
    model = tiny_model(src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(path, model=model, step=7, tokenizers={"src": src_tok, "tgt": tgt_tok})
    return path


def test_environment_folder_is_searched_and_loaded(tiny_checkpoint, nowhere, monkeypatch, shipped_as):
    shipped_as(tiny_checkpoint)
    monkeypatch.setenv(pretrained.PRETRAINED_DIR_ENV, str(tiny_checkpoint.parent))
    assert companion.pretrained.pretrained_path() == tiny_checkpoint
    loaded = companion.load_pretrained()
    assert loaded.path == tiny_checkpoint and loaded.info["step"] == 7
    assert not loaded.model.training
    # It translates with that file's model and vocabularies, rebuilt here from the file on their own.
    model = model_from_checkpoint(tiny_checkpoint)
    src_tokenizer, tgt_tokenizer = tokenizers_from_checkpoint(load_checkpoint(tiny_checkpoint))
    sentences = ["ein hund", "eine katze läuft"]
    expected = companion.decode.translate(model, sentences, src_tokenizer, tgt_tokenizer, beam_size=1)
    assert loaded.translate(sentences, beam_size=1) == expected and expected[0]  # a translation, not ""


def test_without_a_copy_and_without_download_the_error_says_where_to_put_it(nowhere, tmp_path, monkeypatch):
    name = pretrained.DIRECTIONS["de-en"]
    cache = tmp_path / "cache" / "companion"  # the download cache under $XDG_CACHE_HOME, the one place looked in
    message = (
        f"the pretrained model {name!r} (de-en-small.pt) is not on this machine; looked in {cache}. Put the file "
        f"into a folder and set {pretrained.PRETRAINED_DIR_ENV}=FOLDER, pass path=..., or allow the download "
        "(download=True)"
    )
    with pytest.raises(companion.PretrainedUnavailableError, match=f"^{re.escape(message)}$"):
        companion.load_pretrained(download=False)
    # The folder of $COMPANION_PRETRAINED_DIR is looked in first, and named first.
    monkeypatch.setenv(pretrained.PRETRAINED_DIR_ENV, str(tmp_path / "mine"))
    message = f"is not on this machine; looked in {tmp_path / 'mine'}, {cache}. Put the file"
    with pytest.raises(companion.PretrainedUnavailableError, match=re.escape(message)):
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


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_each_direction_is_found_under_its_own_file(direction, tmp_path, tiny_model, nowhere, monkeypatch, shipped_as):
    path = tiny_run_checkpoint(tmp_path / "shipped" / f"{direction}-small.pt", direction, tiny_model)
    shipped_as(path, direction)
    monkeypatch.setenv(pretrained.PRETRAINED_DIR_ENV, str(path.parent))
    assert pretrained.pretrained_path(direction) == path
    assert pretrained.pretrained_path(pretrained.DIRECTIONS[direction]) == path  # the model's name works too
    loaded = companion.load_pretrained(direction=direction)
    assert loaded.path == path
    assert loaded.languages == tuple(direction.split("-"))
    other = next(d for d in DIRECTIONS if d != direction)
    with pytest.raises(companion.PretrainedUnavailableError, match=f"{other}-small.pt"):
        companion.load_pretrained(direction=other, download=False)  # the other direction's file is not there


def test_the_default_direction_is_de_en(tmp_path, tiny_model, nowhere, monkeypatch, shipped_as):
    path = tiny_run_checkpoint(tmp_path / "shipped" / "de-en-small.pt", "de-en", tiny_model)
    shipped_as(path, "de-en")
    monkeypatch.setenv(pretrained.PRETRAINED_DIR_ENV, str(path.parent))
    assert companion.load_pretrained().path == pretrained.pretrained_path() == path


@pytest.mark.parametrize("bad", ["fr-en", "de_en", "DE-EN", "gpt-5", "", None, 3])
def test_a_bad_direction_names_the_argument_and_the_choices(bad, tiny_checkpoint):
    expected = r"direction must be one of \['de-en', 'en-de'\].*got " + re.escape(repr(bad))
    with pytest.raises(ValueError, match=expected):
        companion.load_pretrained(bad)
    with pytest.raises(ValueError, match=expected):
        pretrained.pretrained_path(bad)
    with pytest.raises(ValueError, match=expected):  # also when a path is given: the argument is still wrong
        companion.load_pretrained(bad, path=tiny_checkpoint)


def test_the_registry_has_one_model_per_direction():
    assert sorted(pretrained.DIRECTIONS) == list(DIRECTIONS)
    for direction, name in pretrained.DIRECTIONS.items():
        entry = pretrained.PRETRAINED_MODELS[name]
        assert name == f"multi30k-{direction}-small" and entry["file"] == f"{direction}-small.pt"
        assert re.fullmatch(r"[0-9a-f]{64}|", entry["sha256"])


def shipped_files(direction: str) -> tuple[pathlib.Path, pathlib.Path]:
    return ROOT / "pretrained" / f"{direction}-small.pt", ROOT / "pretrained" / f"{direction}-small.json"


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_shipped_model_matches_its_card_and_translates(direction):
    weights, card_path = shipped_files(direction)
    if not (weights.exists() and card_path.exists()):
        pytest.skip(f"the shipped {direction} model is not in this checkout")
    card = json.loads(card_path.read_text())
    entry = pretrained.PRETRAINED_MODELS[pretrained.DIRECTIONS[direction]]
    assert pretrained._sha256(weights) == card["sha256"] == entry["sha256"]
    loaded = companion.load_pretrained(direction, download=False)
    assert loaded.path == weights
    assert loaded.model.num_parameters() == card["model"]["parameters"]
    assert loaded.languages == tuple(direction.split("-"))
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())
    sentences, expected_words = SENTENCES[direction]
    for translation, words in zip(loaded.translate(sentences), expected_words):
        assert all(word in translation.lower() for word in words), (translation, words)
    outside = card["outside_the_data"]["examples"]  # the card shows what this very file translates
    assert loaded.translate([e["source"] for e in outside]) == [e["translation"] for e in outside]


def check_card(card: dict, direction: str) -> None:
    """The fields every model card must have (tools/make_pretrained.py writes them)."""
    assert card["direction"] == direction and card["name"] == f"multi30k-{direction}-small"
    for key in ("task", "data", "training_command", "history", "hardware", "terms", "tokenized_lowercased_bleu_method"):
        assert isinstance(card[key], str if key != "hardware" else dict) and card[key], key
    assert f"--src {direction[:2]} --tgt {direction[3:]}" in card["training_command"]
    assert card["model"]["parameters"] > 0 and card["steps"] > 0 and card["file_bytes"] > 0
    assert re.fullmatch(r"[0-9a-f]{64}", card["sha256"])
    assert "load_average_1_5_15_min" in card["hardware"] and card["hardware"]["cpu_cores"] > 0
    assert card["training"]["train_seconds"] >= 0
    assert set(card["scores"]) == {"test_2016_flickr", "validation"}
    assert card["test"] == card["scores"]["test_2016_flickr"]
    assert (card["decoding"]["beam_size"], card["decoding"]["alpha"]) == (
        pretrained.SHIPPED_BEAM_SIZE,
        pretrained.SHIPPED_ALPHA,
    )
    searches = [*card["scores"]["test_2016_flickr"].items(), *card["scores"]["validation"].items()]
    assert {"beam4", "greedy"} <= set(card["scores"]["test_2016_flickr"]) and "beam4" in card["scores"]["validation"]
    for search, scores in searches:
        assert scores["beam_size"] == (pretrained.SHIPPED_BEAM_SIZE if search == "beam4" else 1)
        assert scores["alpha"] == pretrained.SHIPPED_ALPHA  # the beam searches use the shipped decoding setting
        assert "tok:13a" in scores["bleu_signature"] and "case:mixed" in scores["bleu_signature"]
        assert "nc:6" in scores["chrf_signature"]
        lc = scores["tokenized_lowercased_bleu_signature"]
        assert "case:lc" in lc and "tok:none" in lc and lc.endswith(f"pretok:spacy-{direction[3:]}")
        for metric in ("bleu", "chrf", "tokenized_lowercased_bleu", "tokenized_cased_bleu"):
            assert 0 <= scores[metric] <= 100, (search, metric)
        assert scores["sentences"] > 0
    check_limitations(card, direction)


def check_limitations(card: dict, direction: str) -> None:
    """The card's limitations and its shipped model's translations of the sentences unlike the captions."""
    tool = _make_pretrained_tool()
    assert card["limitations"] == tool.LIMITATIONS and "29,000 image captions" in card["limitations"]
    outside = card["outside_the_data"]
    assert (outside["beam_size"], outside["alpha"]) == (pretrained.SHIPPED_BEAM_SIZE, pretrained.SHIPPED_ALPHA)
    assert [e["source"] for e in outside["examples"]] == list(tool.OUTSIDE_THE_DATA[direction])
    assert all(isinstance(e["translation"], str) for e in outside["examples"])


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_the_shipped_card_has_every_field(direction):
    card_path = shipped_files(direction)[1]
    if not card_path.exists():
        pytest.skip(f"the shipped {direction} card is not in this checkout")
    card = json.loads(card_path.read_text())
    if "direction" not in card:
        pytest.skip(f"{card_path.name} was written by an older tools/make_pretrained.py: run it again")
    check_card(card, direction)
    bpe = "--tokenizer bpe" in card["training_command"]
    assert ("byte-pair" in card["data"]) == bpe and ("word vocabularies" in card["data"]) == (not bpe)


def _make_pretrained_tool():
    spec = importlib.util.spec_from_file_location("make_pretrained", ROOT / "tools" / "make_pretrained.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_make_pretrained_ships_a_run_with_a_complete_card(direction, tmp_path, tiny_model):
    pytest.importorskip("sacrebleu")
    pytest.importorskip("spacy")
    tool = _make_pretrained_tool()
    assert (
        tool.parse_args([]).direction == "both" and tool.parse_args(["--direction", direction]).direction == direction
    )
    assert f"--src {direction[:2]} --tgt {direction[3:]}" in tool.TRAIN_COMMANDS[direction]
    run = tmp_path / "run"
    averaged = tiny_run_checkpoint(run / "averaged.pt", direction, tiny_model)
    (run / "metrics.jsonl").write_text(
        json.dumps({"kind": "train", "step": 7, "epoch": 0.1, "nll": 2.0, "tokens_per_s": 10.0, "train_seconds": 3})
        + "\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    lines = {"de": "ein hund läuft\neine katze\n", "en": "a dog runs\na cat\n"}
    for stem in ("train", "val", "test_2016_flickr"):
        for language, text in lines.items():
            (data / f"{stem}.{language}").write_text(text)
    registry = tmp_path / "registry.py"
    registry.write_text((ROOT / "companion" / "pretrained.py").read_text())
    out = tmp_path / "pretrained"
    card = tool.package(direction, str(data), run=run, out=out, registry=registry)
    shipped = out / f"{direction}-small.pt"
    assert card == json.loads((out / f"{direction}-small.json").read_text())
    check_card(card, direction)
    assert card["steps"] == 7 and card["scores"]["test_2016_flickr"]["beam4"]["sentences"] == 2
    assert f'"file": "{direction}-small.pt",\n        "sha256": "{card["sha256"]}"' in registry.read_text()
    assert pretrained._sha256(shipped) == card["sha256"] != pretrained._sha256(averaged)  # no optimizer state
    assert companion.load_pretrained(direction, path=shipped).info["step"] == 7
    assert card["history"] == tool.UNRECORDED_HISTORY and card["training_seconds"] is None  # no training record


def test_rescore_scores_the_shipped_file_again_and_keeps_the_rest_of_its_card(tmp_path, tiny_model, monkeypatch):
    pytest.importorskip("sacrebleu")
    pytest.importorskip("spacy")
    tool = _make_pretrained_tool()
    out = tmp_path / "pretrained"
    out.mkdir()
    shipped = tiny_run_checkpoint(out / "de-en-small.pt", "de-en", tiny_model)
    old_scores = {"test_2016_flickr": {"beam4": {"alpha": 0.6}}, "validation": {}}
    card = {"name": "kept", "sha256": pretrained._sha256(shipped), "hardware": {"cpu": "the packaging machine"},
            "scores": old_scores, "test": old_scores["test_2016_flickr"]}  # fmt: skip
    (out / "de-en-small.json").write_text(json.dumps(card))
    fresh = {"test_2016_flickr": {"beam4": {"alpha": pretrained.SHIPPED_ALPHA}}, "validation": {}}
    scored = []
    monkeypatch.setattr(tool, "score", lambda path, direction, data_dir: scored.append((path, direction)) or fresh)
    rescored = tool.rescore("de-en", "data", out=out)
    assert scored == [(shipped, "de-en")] and rescored == json.loads((out / "de-en-small.json").read_text())
    assert rescored["scores"] == fresh and rescored["test"] == fresh["test_2016_flickr"]
    assert (
        rescored["decoding"]["alpha"] == pretrained.SHIPPED_ALPHA
        and "decoding_select" in rescored["decoding"]["chosen_by"]
    )
    assert rescored["name"] == "kept" and rescored["hardware"] == {"cpu": "the packaging machine"}
    assert rescored["scoring_hardware"]["cpu_cores"] > 0 and rescored["scoring_command"].startswith("python tools/")
    assert rescored["limitations"] == tool.LIMITATIONS
    assert rescored["outside_the_data"] == tool.outside_the_data(shipped, "de-en")
    shipped.write_bytes(shipped.read_bytes() + b"\0")  # no longer the file its card describes
    with pytest.raises(SystemExit, match="SHA-256 differs"):
        tool.rescore("de-en", "data", out=out)
    with pytest.raises(SystemExit):
        tool.parse_args(["--rescore", "--train"])


def test_limitations_rewrites_only_its_two_fields_of_the_shipped_card(tmp_path, tiny_model):
    tool = _make_pretrained_tool()
    out = tmp_path / "pretrained"
    out.mkdir()
    shipped = tiny_run_checkpoint(out / "de-en-small.pt", "de-en", tiny_model)
    card = {"name": "kept", "sha256": pretrained._sha256(shipped), "scores": {"test_2016_flickr": {}}}
    (out / "de-en-small.json").write_text(json.dumps(card))
    refreshed = tool.refresh_limitations("de-en", out=out)
    assert refreshed == json.loads((out / "de-en-small.json").read_text())
    assert {k: v for k, v in refreshed.items() if k not in ("limitations", "outside_the_data")} == card
    examples = refreshed["outside_the_data"]["examples"]
    loaded = companion.load_pretrained("de-en", path=shipped)
    setting = {"beam_size": pretrained.SHIPPED_BEAM_SIZE, "alpha": pretrained.SHIPPED_ALPHA}
    assert [e["translation"] for e in examples] == loaded.translate(list(tool.OUTSIDE_THE_DATA["de-en"]), **setting)
    shipped.write_bytes(shipped.read_bytes() + b"\0")
    with pytest.raises(SystemExit, match="SHA-256 differs"):
        tool.refresh_limitations("de-en", out=out)
    for clash in (["--limitations", "--rescore"], ["--limitations", "--train"]):
        with pytest.raises(SystemExit):
            tool.parse_args(clash)


def test_the_shipped_decoding_setting_is_the_one_chosen_on_validation():
    record = json.loads((ROOT / "bench" / "results" / "decoding_select_2026-12-06.json").read_text())
    assert record["split"] == "valid" and record["beam_size"] == pretrained.SHIPPED_BEAM_SIZE
    assert record["chosen_alpha"] == pretrained.SHIPPED_ALPHA
    best = max(record["mean_bleu"].values())
    assert record["mean_bleu"][f"{pretrained.SHIPPED_ALPHA:g}"] == best
    assert "decoding_select_2026-12-06.json" in _make_pretrained_tool().decoding()["chosen_by"]


def test_the_cards_name_the_vocabulary_each_run_used():
    tool = _make_pretrained_tool()
    bpe = tool.vocabulary_description({"tokenizer": "bpe", "vocab_size": 8000})
    assert "8,000 tokens shared by both languages" in bpe and "--vocab-size 8000" in bpe
    assert "--min-freq 2" in tool.vocabulary_description({"tokenizer": "word", "min_freq": 2})
    for direction, setting in tool.SETTINGS.items():  # each direction trains with its own chosen setting
        assert f"--preset small {setting} " in tool.TRAIN_COMMANDS[direction]


class _FakeClock:
    """Stands in for the tool's ``time`` and ``subprocess`` modules and ``os.getloadavg``: processes that end after
    a set number of seconds on a clock that only moves when the tool waits, so nothing depends on the machine's
    speed or load. Each load sample reads 1.0, 2.0, 3.0, ... in turn."""

    TimeoutExpired = subprocess.TimeoutExpired
    EPOCH = 1_750_000_000.0  # time.time() at the start

    def __init__(self, durations: dict[str, float]) -> None:
        self.now, self.durations, self.samples, self.started = 0.0, durations, 0, []

    # time
    def time(self) -> float:
        return self.EPOCH + self.now

    def monotonic(self) -> float:
        return 1000.0 + self.now

    # os.getloadavg
    def getloadavg(self) -> tuple[float, float, float]:
        self.samples += 1
        return (float(self.samples), 0.0, 0.0)

    # subprocess.Popen
    def Popen(self, command: list[str], cwd: pathlib.Path):  # noqa: N802  (stands in for subprocess.Popen)
        self.started.append((command, cwd))
        clock, ends_at = self, self.now + self.durations[command[-1]]

        class Process:
            returncode = None

            def wait(self, timeout: float) -> int:
                if clock.now + timeout < ends_at:
                    clock.now += timeout
                    raise subprocess.TimeoutExpired(command, timeout)
                clock.now = max(clock.now, ends_at)
                self.returncode = 0
                return 0

        return Process()


def test_make_pretrained_records_when_and_under_what_load_each_run_trained(tmp_path, monkeypatch):
    tool = _make_pretrained_tool()
    # stand-ins for the training commands: the first ends within the first sample, the second after 4.5 s
    monkeypatch.setattr(tool, "TRAIN_COMMANDS", {"de-en": "python quick", "en-de": "python slow"})
    clock = _FakeClock({"quick": 0.5, "slow": 4.5})
    monkeypatch.setattr(tool, "time", clock)
    monkeypatch.setattr(tool, "subprocess", clock)
    monkeypatch.setattr(tool.os, "getloadavg", clock.getloadavg)
    for direction in tool.DIRECTIONS:
        (tmp_path / tool.run_dir(direction)).mkdir(parents=True)
    records = tool.train(tool.DIRECTIONS, None, root=tmp_path, sample_every=1.0)
    # both ran side by side, from the root, with this interpreter
    assert clock.started == [([sys.executable, "quick"], tmp_path), ([sys.executable, "slow"], tmp_path)]
    for direction, record in records.items():
        assert json.loads((tmp_path / tool.run_dir(direction) / tool.TRAINING_LOG).read_text()) == record
        assert record["side_by_side"] == list(tool.DIRECTIONS) and record["command"] == tool.TRAIN_COMMANDS[direction]
        assert record["started"] == tool._utc(clock.EPOCH) and record["cpu_cores"] == os.cpu_count()
        assert record["load_average_1min_every_seconds"] == 1.0
    quick, slow = records["de-en"], records["en-de"]
    assert quick["ended"] == tool._utc(clock.EPOCH + 0.5) and slow["ended"] == tool._utc(clock.EPOCH + 4.5)
    assert (quick["wall_seconds"], slow["wall_seconds"]) == (round(0.5), round(4.5))
    # A sample at 0, 1, 2, 3 and 4 s: the quick run saw the first, the slow run all five.
    assert clock.samples == 5
    assert quick["load_average_1min_samples"] == [1.0]
    assert slow["load_average_1min_samples"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    history = tool.training_history(slow)
    assert f"from {slow['started']} to {slow['ended']} UTC" in history and "de-en and en-de side by side" in history
    assert "median 3.00, max 5.00 (5 samples, every 1 s)" in history


def test_make_pretrained_stops_the_other_runs_when_one_fails(tmp_path, monkeypatch):
    tool = _make_pretrained_tool()
    monkeypatch.setattr(
        tool,
        "TRAIN_COMMANDS",
        {"de-en": "python -c 'raise SystemExit(3)'", "en-de": "python -c 'import time; time.sleep(60)'"},
    )
    with pytest.raises(SystemExit, match="training de-en failed with exit status 3"):
        tool.train(tool.DIRECTIONS, None, root=tmp_path, sample_every=0.1)
    assert not list(tmp_path.rglob(tool.TRAINING_LOG))  # nothing recorded for a failed training


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


def test_a_registered_but_unshipped_model_says_how_to_make_it(monkeypatch):
    """A registry entry without a SHA-256 has no shipped file: the error names the tool and the training command."""
    from companion import pretrained
    from companion.errors import PretrainedUnavailableError

    entry = dict(pretrained.PRETRAINED_MODELS["multi30k-en-de-small"], sha256="")
    monkeypatch.setitem(pretrained.PRETRAINED_MODELS, "multi30k-en-de-small", entry)
    with pytest.raises(PretrainedUnavailableError, match=r"not shipped.*make_pretrained.py --direction en-de"):
        pretrained.load_pretrained("en-de", download=False)


def test_a_loaded_model_prints_as_one_line_and_checks_its_sentences(tiny_checkpoint):
    loaded = companion.load_pretrained(path=tiny_checkpoint)
    shown = repr(loaded)
    assert "\n" not in shown and len(shown) < 200  # not the module tree and model card
    parameters = f"{loaded.model.num_parameters() / 1e6:.2f}M parameters"
    assert shown.startswith("PretrainedModel(de->en, ") and str(tiny_checkpoint) in shown and parameters in shown
    with pytest.raises(TypeError, match="sentences must be a string or a list of strings, got int"):
        loaded.translate(5)  # type: ignore[call-overload]
    assert loaded.translate(("ein hund",), beam_size=1) == [loaded.translate("ein hund", beam_size=1)]


def test_translate_decodes_with_the_recorded_setting_else_the_shipped_one_for_a_shipped_file_else_the_papers(
    tiny_checkpoint, tmp_path, monkeypatch, shipped_as
):
    from companion.checkpoint.load import record_decoding

    searches = []
    real_translate = pretrained.translate

    def spy(*args, **kwargs):
        searches.append((kwargs["beam_size"], kwargs["alpha"]))
        return real_translate(*args, **kwargs)

    monkeypatch.setattr(pretrained, "translate", spy)
    paper = {"beam_size": 4, "alpha": 0.6}
    assert (pretrained.PAPER_BEAM_SIZE, pretrained.PAPER_ALPHA) == (4, 0.6)
    own = companion.load_pretrained(path=tiny_checkpoint)  # a file of the user's: no record, not shipped
    assert own.decoding == paper and pretrained.default_decoding({}, tiny_checkpoint) == (paper, "the paper's")
    own.translate("ein hund")
    copy = tmp_path / "elsewhere" / "model.pt"  # a shipped model's file under another name: the shipped setting
    copy.parent.mkdir()
    copy.write_bytes(tiny_checkpoint.read_bytes())
    shipped_as(tiny_checkpoint)
    shipped = companion.load_pretrained(path=copy)
    assert shipped.decoding == {"beam_size": pretrained.SHIPPED_BEAM_SIZE, "alpha": pretrained.SHIPPED_ALPHA}
    assert pretrained.default_decoding({}, copy)[1] == "the shipped models' setting"
    shipped.translate("ein hund")
    record_decoding(tiny_checkpoint, {"beam_size": 3, "alpha": 1.5, "chosen_on": "the validation split"})
    chosen = companion.load_pretrained(path=tiny_checkpoint)  # what `companion train` leaves in a run's averaged.pt
    assert chosen.decoding["beam_size"] == 3 and chosen.decoding["alpha"] == 1.5
    assert "beam 3 alpha 1.5" in repr(chosen)
    chosen.translate("ein hund")
    chosen.translate("ein hund", beam_size=1, alpha=0.6)  # given values win
    assert searches == [(4, 0.6), (pretrained.SHIPPED_BEAM_SIZE, pretrained.SHIPPED_ALPHA), (3, 1.5), (1, 0.6)]


def test_a_run_folder_loads_as_translate_reads_it(tiny_checkpoint, tmp_path):
    """``path=RUN_FOLDER``: its averaged.pt when at least as new as its latest step checkpoint, else that
    checkpoint (``companion.runs.resolve_checkpoint``); a folder holding neither is named."""
    import os

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    step = run / "checkpoints" / "step_00000007.pt"
    step.write_bytes(tiny_checkpoint.read_bytes())
    assert companion.load_pretrained(path=run).path == step
    averaged = run / "averaged.pt"
    averaged.write_bytes(tiny_checkpoint.read_bytes())
    assert companion.load_pretrained(path=run).path == averaged
    stat = step.stat()
    os.utime(averaged, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))  # older than the latest step
    with pytest.warns(UserWarning, match=r"averaged\.pt is older than"):
        assert companion.load_pretrained(path=run).path == step
    (tmp_path / "empty").mkdir()
    with pytest.raises(companion.RunError, match=r"path .*empty is a folder without averaged\.pt or checkpoints"):
        companion.load_pretrained(path=tmp_path / "empty")


def test_languages_come_from_the_run_record_or_word_tokenizers(tiny_checkpoint):
    loaded = companion.load_pretrained(path=tiny_checkpoint)
    assert loaded.languages == ("de", "en")
    from_tokenizers = pretrained.PretrainedModel(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, loaded.path)
    assert from_tokenizers.languages == (loaded.src_tokenizer.language, loaded.tgt_tokenizer.language)
    from companion.data.tokenizers import SubwordTokenizer

    shared = SubwordTokenizer.train(["ein hund", "a dog"], vocab_size=40)
    unnamed = pretrained.PretrainedModel(loaded.model, shared, shared, loaded.path)
    with pytest.raises(ValueError, match="name the two languages"):
        unnamed.languages
