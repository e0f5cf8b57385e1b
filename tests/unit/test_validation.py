"""companion._validation: one family of checks, each naming the value, raising the class the caller asks for."""

from __future__ import annotations

import math

import pytest
import torch

import companion.train.schedule as train
from companion._validation import (
    check_bool,
    check_choice,
    check_fraction,
    check_id_list,
    check_integer,
    check_number,
    check_positive_int,
)
from companion.errors import ConfigError
from companion.train import NoamSchedule, noam_lr


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: check_integer("n", True), "n must be an integer, got True"),
        (lambda: check_integer("n", 2.0), "n must be an integer, got 2.0"),
        (lambda: check_integer("n", -1, minimum=0), "n must be an integer >= 0, got -1"),
        (lambda: check_integer("n", 5, minimum=0, maximum=4), r"n must be an integer in \[0, 4\], got 5"),
        (lambda: check_positive_int("n", 0), "n must be a positive integer, got 0"),
        (lambda: check_positive_int("n", "3"), "n must be a positive integer, got '3'"),
        (lambda: check_number("x", "1"), "x must be a number in"),
        (lambda: check_number("x", math.nan), "x must be a finite number, got nan"),
        (lambda: check_number("x", 0, low=0, low_inclusive=False), "x must be a positive number, got 0"),
        (lambda: check_number("x", -0.5, low=0), "x must be a non-negative number, got -0.5"),
        (lambda: check_fraction("p", 1.0), r"p must be a number in \[0, 1\), got 1.0"),
        (lambda: check_bool("flag", 1), "flag must be True or False, got 1"),
        (lambda: check_choice("kind", "c", ("a", "b")), r"kind must be one of \['a', 'b'\], got 'c'"),
    ],
)
def test_a_bad_value_is_named_with_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda error: check_integer("--seed", -1, minimum=0, error=error),
        lambda error: check_positive_int("--max-steps", 0, error=error),
        lambda error: check_number("--lr-factor", 0.0, low=0, low_inclusive=False, error=error),
        lambda error: check_fraction("--dropout", 1.5, error=error),
        lambda error: check_bool("--fp16", "yes", error=error),
        lambda error: check_choice("--split", "dev", ["test", "valid"], error=error),
    ],
)
def test_every_scalar_check_raises_the_class_the_caller_asks_for(call):
    with pytest.raises(ConfigError):
        call(ConfigError)
    with pytest.raises(TypeError):
        call(TypeError)


def test_good_values_come_back_with_numbers_as_float():
    assert check_integer("n", 3, minimum=0, maximum=3) == 3
    assert check_number("x", 2, low=0) == 2.0 and isinstance(check_number("x", 2), float)
    assert check_fraction("p", 0) == 0.0
    assert check_choice("kind", "a", ["a"]) == "a"
    assert check_id_list("ids", torch.tensor([0, 4]), 5) == [0, 4]


@pytest.mark.parametrize(
    "ids, error, message",
    [
        ([1, 5], ValueError, r"ids holds 5, outside the vocabulary \[0, 5\)"),
        ([1, True], TypeError, "ids must be integers, got True of type bool"),
        (torch.zeros(1, 2, dtype=torch.long), ValueError, r"ids must be one sequence \(1-D\)"),
        ("12", TypeError, "ids must be a sequence of integer token ids, got str"),
        (torch.zeros(2, dtype=torch.long, device="meta"), ValueError, "ids is a tensor on the meta device"),
    ],
)
def test_id_lists_are_checked(ids, error, message):
    with pytest.raises(error, match=message):
        check_id_list("ids", ids, 5)


def _forbidden(*args, **kwargs):
    raise AssertionError("a check ran on the per-step path")


def test_the_noam_schedule_checks_its_settings_once(monkeypatch):
    with pytest.raises(ValueError, match="warmup must be a positive integer, got 0"):
        NoamSchedule(16, warmup=0)
    with pytest.raises(ValueError, match="factor must be a positive number"):
        NoamSchedule(16, warmup=4, factor=-1.0)
    schedule = NoamSchedule(16, warmup=4, factor=2.0)
    expected = [noam_lr(k + 1, 16, 4, 2.0) for k in range(6)]
    for name in ("check_integer", "check_positive_int", "check_number"):  # the per-step call checks nothing
        monkeypatch.setattr(train, name, _forbidden)
    assert [schedule(k) for k in range(6)] == expected
