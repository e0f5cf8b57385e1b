"""bench/checkpoint_spacing.py: which checkpoints each spacing averages, and the options it refuses."""

from __future__ import annotations

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import checkpoint_spacing  # noqa: E402


def test_each_spacing_picks_the_checkpoints_nearest_to_its_targets():
    minutes = [0.21 * i for i in range(1, 58)]  # a checkpoint about every 0.2 minutes, the last at 11.97
    assert checkpoint_spacing.pick(minutes, 1.0) == [37, 42, 46, 51, 56]  # 7.98, 9.03, 9.87, 10.92, 11.97
    assert checkpoint_spacing.pick(minutes, 0.21) == [52, 53, 54, 55, 56]  # the newest five
    with pytest.raises(SystemExit, match="too sparse"):
        checkpoint_spacing.pick(minutes, 0.05)  # two targets fall nearest to one checkpoint


def test_spacings_that_do_not_fit_are_refused(capsys):
    with pytest.raises(SystemExit):
        checkpoint_spacing.parse_args(["--minutes", "4", "--spacings", "1.0"])  # 4 spacings = the whole run
    assert "do not fit in --minutes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        checkpoint_spacing.parse_args(["--fine", "0.5", "--spacings", "0.4"])
    assert "at least --fine" in capsys.readouterr().err
