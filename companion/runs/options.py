"""From option declarations (:func:`companion.options.option`) to argparse flags, and back to given values."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ..options import base_type, option_fields, option_spec

__all__ = ["add_options", "given_options"]


def add_options(parser: Any, config_classes: type | Iterable[type], *, suppress_defaults: bool = False) -> None:
    """Add one argparse flag per option field of ``config_classes`` to ``parser``, grouped by ``group``.

    ``config_classes`` is one config dataclass or several (a run's sections: their field names must differ, as
    they become the parser's ``dest`` names). argparse only turns text into ``int``/``float``/``str``; the values
    are checked when the config is built. With ``suppress_defaults`` (the parser's
    ``argument_default=argparse.SUPPRESS``) flags that are not given are absent from the parsed namespace, so that
    a resumed run can tell given from default values.
    """
    classes = [config_classes] if isinstance(config_classes, type) else list(config_classes)
    groups: dict[str | None, Any] = {None: parser}
    for config_class in classes:
        for f in option_fields(config_class):
            spec = option_spec(f)
            target = groups.get(spec.group)
            if target is None:
                target = groups[spec.group] = parser.add_argument_group(spec.group)
            _add_flag(target, f, suppress_defaults)


def _add_flag(target: Any, f: dataclasses.Field, suppress_defaults: bool) -> None:
    spec = option_spec(f)
    default = None if f.default is dataclasses.MISSING else f.default
    kwargs: dict[str, Any] = {"dest": f.name}
    if not suppress_defaults and not spec.required:
        kwargs["default"] = default
    if spec.switches:  # one of them at most: --norm-first --post-ln is a contradiction, not "the last wins"
        exclusive = target.add_mutually_exclusive_group()
        for flag, (value, text) in spec.switches.items():
            exclusive.add_argument(flag, action="store_const", const=value, help=text, **kwargs)
        return
    help_text = spec.help.replace("{default}", str(default))
    flag = spec.flag or "--" + f.name.replace("_", "-")
    if spec.nargs:  # several words: a list of strings
        kwargs.update(help=help_text, metavar=spec.metavar, nargs=spec.nargs, type=str)
        target.add_argument(flag, **{k: v for k, v in kwargs.items() if v is not None})
        return
    if base_type(f) is bool:
        target.add_argument(flag, action="store_false" if default else "store_true", help=help_text, **kwargs)
        return
    kwargs.update(help=help_text, metavar=spec.metavar, required=spec.required or None)
    if spec.choices:
        kwargs["choices"] = list(spec.choices)
    else:
        kwargs["type"] = base_type(f)
    target.add_argument(flag, **{k: v for k, v in kwargs.items() if v is not None})


def given_options(args: argparse.Namespace | Mapping[str, Any], config_classes: type | Iterable[type]) -> dict:
    """The parsed values that belong to the option fields of ``config_classes``, by field name."""
    classes = [config_classes] if isinstance(config_classes, type) else list(config_classes)
    names = {f.name for config_class in classes for f in option_fields(config_class)}
    values = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    return {name: value for name, value in values.items() if name in names}
