"""Declaring options: :func:`option` (a dataclass field that is also a command-line flag) and the argparse
flags built from such fields (:func:`add_options`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from .._validation import check_integer, check_number
from ..train import OPTION_LIMITS


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
    """
    metadata = {
        "option": dict(
            help=help,
            flag=flag,
            metavar=metavar,
            choices=tuple(choices) if choices else None,
            group=group,
            resumable=resumable,
            switches=dict(switches) if switches else None,
            required=required,
        )
    }
    if required:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


def option_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are command-line options, in declaration order."""
    return [f for f in dataclasses.fields(config_class) if "option" in f.metadata]


def flag_of(config_class: type, name: str) -> str:
    """The command-line flag of the field ``name`` (the first one, for a field set by several switches)."""
    spec = next(f for f in dataclasses.fields(config_class) if f.name == name).metadata["option"]
    if spec["switches"]:
        return next(iter(spec["switches"]))
    return spec["flag"] or "--" + name.replace("_", "-")


def add_options(parser: Any, config_class: type, *, suppress_defaults: bool = False) -> None:
    """Add one argparse flag per option field of ``config_class`` to ``parser``, grouped by ``group``.

    argparse only turns text into ``int``/``float``/``str``; the values are checked when the config is built.
    With ``suppress_defaults`` (the parser's ``argument_default=argparse.SUPPRESS``) flags that are not given
    are absent from the parsed namespace, so that a resumed run can tell given from default values.
    """
    groups: dict[str | None, Any] = {None: parser}
    for f in option_fields(config_class):
        spec = f.metadata["option"]
        target = groups.get(spec["group"])
        if target is None:
            target = groups[spec["group"]] = parser.add_argument_group(spec["group"])
        default = None if f.default is dataclasses.MISSING else f.default
        kwargs: dict[str, Any] = {"dest": f.name}
        if not suppress_defaults and not spec["required"]:
            kwargs["default"] = default
        if spec["switches"]:
            for flag, (value, text) in spec["switches"].items():
                target.add_argument(flag, action="store_const", const=value, help=text, **kwargs)
            continue
        help_text = spec["help"].replace("{default}", str(default))
        flag = spec["flag"] or "--" + f.name.replace("_", "-")
        if _base_type(f) is bool:
            action = "store_false" if default else "store_true"
            target.add_argument(flag, action=action, help=help_text, **kwargs)
            continue
        kwargs.update(help=help_text, metavar=spec["metavar"], required=spec["required"] or None)
        if spec["choices"]:
            kwargs["choices"] = list(spec["choices"])
        else:
            kwargs["type"] = _base_type(f)
        target.add_argument(flag, **{k: v for k, v in kwargs.items() if v is not None})


def _base_type(f: dataclasses.Field) -> type:
    """``int``, ``float``, ``bool`` or ``str`` from the field's annotation (``"int | None"`` -> int)."""
    names = {part.strip() for part in str(f.type).split("|")} - {"None"}
    for candidate in (bool, int, float, str):
        if candidate.__name__ in names:
            return candidate
    raise TypeError(f"option field {f.name} has an unsupported type {f.type!r}")


def _positive(config: Any, *names: str, allow_none: bool = False) -> None:
    for name in names:
        value = getattr(config, name)
        if value is None and allow_none:
            continue
        check_integer(flag_of(type(config), name), value, minimum=1)


def _positive_number(config: Any, *names: str, allow_none: bool = False) -> None:
    """Finite, positive and at most :data:`companion.train.OPTION_LIMITS` (where a limit is set)."""
    for name in names:
        value = getattr(config, name)
        if value is None and allow_none:
            continue
        setattr(
            config,
            name,
            check_number(flag_of(type(config), name), value, low=0, low_inclusive=False, high=OPTION_LIMITS.get(name)),
        )


def _fraction(config: Any, name: str) -> None:
    value = check_number(flag_of(type(config), name), getattr(config, name), low=0, high=1, high_inclusive=False)
    setattr(config, name, value)
