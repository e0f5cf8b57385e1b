"""bench/_common: a results name is a file stem; a folder or a .json suffix is refused before anything runs."""

from __future__ import annotations

import argparse
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import _common  # noqa: E402


@pytest.mark.parametrize("name", ["", "/tmp/x", "runs/x", "x.json", ".hidden"])
def test_write_results_refuses_anything_but_a_file_stem(tmp_path, monkeypatch, name):
    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="results name must be a file stem"):
        _common.write_results(name, {"x": 1})
    assert not list(tmp_path.iterdir()), "nothing may be written"
    with pytest.raises(argparse.ArgumentTypeError, match="file stem"):
        _common.results_stem(name)


def test_a_stem_is_written_into_the_results_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    assert _common.results_stem("decode_speed_xeon") == "decode_speed_xeon"
    path = _common.write_results("decode_speed_xeon", {"x": 1})
    assert path == tmp_path / "decode_speed_xeon.json" and path.exists()
