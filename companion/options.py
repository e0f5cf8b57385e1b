"""Declaring a config field that is also a command-line option: :func:`option`, and reading the declarations back.

A config dataclass (:class:`companion.train.TrainConfig`, the run configs of :mod:`companion.runs`) declares
each of its options once, as a dataclass field made by :func:`option`: the field's annotation and default are its
type and default, and its metadata holds the help text, the flag, the help section, the allowed choices and
whether the value may change when a run is resumed. From these declarations

* ``companion train``'s argument parser is built (:func:`companion.runs.add_options`),
* the run record is written and read back, and ``--resume`` tells which options may change,
* error messages name the option as the user wrote it (:func:`label`: ``"lr_factor (--lr-factor)"``).

This module only declares and reads declarations (no argparse), so that the core (``train.py``) can declare its
options without importing the run layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from ._validation import check_bool, check_choice
from .errors import ConfigError

__all__ = ["OptionSpec", "option", "option_fields", "option_spec", "flag_of", "label", "base_type", "check_declared"]


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """What :func:`option` records about a field (see there)."""

    help: str
    flag: str | None = None
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    group: str | None = None
    resumable: bool = False
    switches: Mapping[str, tuple[Any, str]] | None = None
    required: bool = False
    nargs: str | None = None


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: Sequence[Any] | None = None,
    group: str | None = None,
    resumable: bool = False,
    switches: Mapping[str, tuple[Any, str]] | None = None,
    required: bool = False,
    nargs: str | None = None,
) -> Any:
    """A dataclass field that is also a command-line option.

    Args:
        default: the value when the option is not given (``dataclasses.MISSING`` with ``required=True``).
        help: the help text; ``{default}`` in it is replaced by the default.
        flag: the flag (default: ``--`` + the field name with ``-`` for ``_``). For a bool whose default is
            False the flag switches it on; for a bool whose default is True give e.g. ``flag="--no-bf16"``
            and the flag switches it off.
        metavar, choices: as in :meth:`argparse.ArgumentParser.add_argument`.
        group: the help section the flag is listed in.
        resumable: whether the value may change when a run is continued with ``--resume`` (limits, device,
            logging); every other option must match the recorded run.
        switches: instead of one flag, several flags that each set a fixed value:
            ``{"--norm-first": (True, help), "--post-ln": (False, help)}`` (``help`` is then unused).
        required: the option has no default and must be given.
        nargs: as in argparse (``"+"``: one or more words, recorded as a list of strings).
    """
    spec = OptionSpec(
        help=help,
        flag=flag,
        metavar=metavar,
        choices=tuple(choices) if choices else None,
        group=group,
        resumable=resumable,
        switches=dict(switches) if switches else None,
        required=required,
        nargs=nargs,
    )
    if required:
        return field(metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


def option_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are command-line options, in declaration order."""
    return [f for f in dataclasses.fields(config_class) if "option" in f.metadata]


def option_spec(f: dataclasses.Field) -> OptionSpec:
    """The declaration of an option field (a KeyError for a field that is not an option)."""
    return f.metadata["option"]


def _field(config_class: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(config_class) if f.name == name)


def flag_of(config_class: type, name: str) -> str:
    """The command-line flag of the field ``name`` (the first one, for a field set by several switches)."""
    spec = option_spec(_field(config_class, name))
    if spec.switches:
        return next(iter(spec.switches))
    return spec.flag or "--" + name.replace("_", "-")


def label(config_class: type, name: str) -> str:
    """How error messages name an option: the field and its flag, ``"lr_factor (--lr-factor)"``, so that both a
    library caller (who wrote the field) and a command-line user (who typed the flag) recognise it."""
    return f"{name} ({flag_of(config_class, name)})"


def base_type(f: dataclasses.Field) -> type:
    """``int``, ``float``, ``bool`` or ``str`` from the field's annotation (``"int | None"`` -> int; a list, the
    type of an option with ``nargs``, -> its items' type)."""
    names = {part.strip().removeprefix("list[").removesuffix("]") for part in str(f.type).split("|")} - {"None"}
    for candidate in (bool, int, float, str):
        if candidate.__name__ in names:
            return candidate
    raise TypeError(f"option field {f.name} has an unsupported type {f.type!r}")


def check_declared(config: Any) -> None:
    """Check what the declarations alone say: a choice field holds one of its choices, a bool field a bool.

    Raises :class:`~companion.errors.ConfigError` naming the option (:func:`label`). Numbers and their ranges
    are checked by the config itself, which knows them.
    """
    cls = type(config)
    for f in option_fields(cls):
        spec, value = option_spec(f), getattr(config, f.name)
        if value is None and f.default is None:
            continue
        if spec.choices:
            check_choice(label(cls, f.name), value, spec.choices, error=ConfigError)
        elif base_type(f) is bool:
            check_bool(label(cls, f.name), value, error=ConfigError)
