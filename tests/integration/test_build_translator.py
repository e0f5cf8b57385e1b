"""tools/build_translator.py's choices for a checkpoint of the reader's own (``--checkpoint DIRECTION=PATH``): the
model.json it writes for a file without a model card, the decoding limits it takes from companion.decode, and the
refusals that keep the page from offering a setting it cannot run. (The whole build, with the shipped models, runs
in `make site` and the browser tests.)"""

from __future__ import annotations

import importlib.util
import pathlib
import shutil

import pytest

from companion import load_pretrained
from companion.decode import MAX_ALPHA
from companion.decode.limits import _MAX_EXTRA_LEN
from companion.errors import PretrainedUnavailableError
from companion.pretrained import default_decoding

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def builder():
    spec = importlib.util.spec_from_file_location("build_translator", ROOT / "tools" / "build_translator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def own_copy(tmp_path_factory):
    """The shipped en->de model copied to a folder of its own, without the model card beside it."""
    try:
        shipped = load_pretrained("en-de", download=False).path
    except PretrainedUnavailableError as error:
        pytest.skip(f"no shipped en-de model here: {error}")
    copy = tmp_path_factory.mktemp("own") / "model.pt"
    shutil.copyfile(shipped, copy)
    return load_pretrained("en-de", path=copy)


def test_a_checkpoint_without_a_card_gets_its_facts_and_no_scores(builder, own_copy):
    record = builder.model_json(own_copy, {"encoder": 10, "decoder": 20}, ["A dog runs."], "en-de")
    card = record["card"]
    assert "test" not in card  # no scores are claimed for a file that has none recorded
    assert card["name"] == "model.pt" and card["task"] == "translation, en -> de"
    assert card["parameters"] == own_copy.model.num_parameters()
    assert card["checkpoint_bytes"] == own_copy.path.stat().st_size
    assert card["checkpoint_file"] == str(own_copy.path.resolve())
    assert card["onnx_bytes"] == {"encoder": 10, "decoder": 20}
    assert record["direction"]["source_name"] == "English" and record["examples"] == ["A dog runs."]


def test_the_decoding_entry_is_the_librarys(builder, own_copy):
    decoding = builder.model_json(own_copy, {}, [], "en-de")["decoding"]
    expected, _ = default_decoding({}, own_copy.path)  # a byte copy of a shipped model decodes as shipped
    assert (decoding["beam_size"], decoding["alpha"]) == (expected["beam_size"], expected["alpha"])
    assert decoding["max_extra_len"] == _MAX_EXTRA_LEN and decoding["max_alpha"] == MAX_ALPHA
    assert decoding["max_beam_size"] == builder.MAX_BEAM_SIZE


def test_a_beam_wider_than_the_page_offers_is_refused(builder):
    builder.check_decoding({"beam_size": builder.MAX_BEAM_SIZE, "alpha": 0.6}, "en-de")  # the widest is fine
    with pytest.raises(SystemExit, match=f"beam size {builder.MAX_BEAM_SIZE + 1}, wider than the page's widest"):
        builder.check_decoding({"beam_size": builder.MAX_BEAM_SIZE + 1, "alpha": 0.6}, "en-de")


def test_checkpoint_arguments_take_files_and_run_folders(builder, tmp_path):
    file, folder = tmp_path / "averaged.pt", tmp_path / "run"
    file.write_bytes(b"")
    folder.mkdir()
    assert builder.parse_checkpoints([f"en-de={file}", f"de-en={folder}"]) == {"en-de": file, "de-en": folder}
    with pytest.raises(SystemExit, match="no checkpoint file or run folder at"):
        builder.parse_checkpoints([f"en-de={tmp_path / 'missing'}"])
    with pytest.raises(SystemExit, match="must be DIRECTION=PATH"):
        builder.parse_checkpoints([f"fr-en={file}"])
