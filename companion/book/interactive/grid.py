"""The website's values of each control (:func:`site_controls`) and their grid of states (:func:`site_states`,
:func:`state_key`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._validation import check_integer, check_number, check_positive_int

__all__ = ["SiteControl", "site_controls", "site_states", "state_key", "MAX_FULL_RANGE", "MAX_STATES"]

#: A numeric or range slider with at most this many values offers all of them on the website without a ``site``
#: list; a longer one needs ``site={"name": [...]}``.
MAX_FULL_RANGE = 16
#: Default cap on the number of website states of one :func:`interact` (``max_states`` changes it).
MAX_STATES = 64

_SELECTION = ("Dropdown", "Select", "ToggleButtons", "RadioButtons", "SelectionSlider")
_BOOLEAN = ("Checkbox", "ToggleButton")
_NUMERIC = ("IntSlider", "FloatSlider")
_RANGE = ("IntRangeSlider", "FloatRangeSlider")
_SUPPORTED = _SELECTION + _BOOLEAN + _NUMERIC + _RANGE
_HTML_KIND = {"Dropdown": "select", "Select": "select", "ToggleButtons": "radio", "RadioButtons": "radio"}


@dataclass(frozen=True)
class SiteControl:
    """One control as the website offers it.

    Args:
        name: the function's argument the control sets.
        label: what the control is called on the page (the widget's ``description``, else ``name``).
        kind: the HTML control: ``"range"`` (a slider stepping through ``values``), ``"select"``, ``"radio"``,
            ``"checkbox"``, or ``"fixed"`` (no control: one value).
        values: the values the website offers, in the control's order.
        labels: how each value is shown (``str`` per value, same length as ``values``).
        initial: the index in ``values`` of the control's current value: the state the page shows first.
        live_count: how many values the live widget can take (``None``: more than can be counted, a float range).
    """

    name: str
    label: str
    kind: str
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    initial: int
    live_count: int | None

    @property
    def coarser(self) -> bool:
        """True when the website offers fewer values than the live widget."""
        return self.live_count is None or len(self.values) < self.live_count


def site_controls(controls: Mapping[str, Any], site: Mapping[str, Sequence[Any]] | None = None) -> list[SiteControl]:
    """The website's values of every control, in the order of ``controls`` (see the module's table).

    Args:
        controls: ``{argument name: ipywidgets control or ipywidgets.fixed(value)}``.
        site: ``{argument name: [values]}``: the values the website offers for that control, instead of all of them
            (required for a numeric or range slider with more than ``MAX_FULL_RANGE`` values).

    Raises:
        TypeError: a control of an unsupported type, or ``site`` not a mapping of lists.
        ValueError: a ``site`` key that names no control, a ``site`` list with a value the control cannot take,
            without the control's current value, with duplicates, or a long slider without a ``site`` list.
    """
    import ipywidgets

    site = {} if site is None else site
    if not isinstance(site, Mapping):
        raise TypeError(f"site must be a dict {{argument name: [values]}}, got {type(site).__name__}")
    unknown = sorted(set(site) - set(controls))
    if unknown:
        raise ValueError(f"site names {unknown}, which are not controls of this interact (controls: {list(controls)})")
    result = []
    for name, control in controls.items():
        values = site.get(name)
        if values is not None and (isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence)):
            raise TypeError(f"site[{name!r}] must be a list of values, got {type(values).__name__}")
        if isinstance(control, ipywidgets.fixed):
            if values is not None:
                raise ValueError(f"site[{name!r}]: {name!r} is fixed(...), it has no values to choose from")
            result.append(SiteControl(name, name, "fixed", (control.value,), (str(control.value),), 0, 1))
            continue
        kind = type(control).__name__
        if not isinstance(control, ipywidgets.Widget) or kind not in _SUPPORTED:
            raise TypeError(
                f"control {name!r} is a {kind}; interact supports ipywidgets {', '.join(_SUPPORTED)} and fixed(...)"
            )
        label = getattr(control, "description", "") or name
        if kind in _SELECTION:
            result.append(_selection_control(name, label, control, values))
        elif kind in _BOOLEAN:
            result.append(_boolean_control(name, label, control, values))
        elif kind in _NUMERIC:
            result.append(_numeric_control(name, label, control, values))
        else:
            result.append(_range_control(name, label, control, values))
    return result


def _initial_index(name: str, values: Sequence[Any], current: Any, shown: str) -> int:
    for i, value in enumerate(values):
        if value == current:
            return i
    raise ValueError(
        f"site[{name!r}] must include the control's current value {shown} (the state the page shows first), "
        f"got {list(values)}"
    )


def _no_duplicates(name: str, values: Sequence[Any]) -> None:
    for i, value in enumerate(values):
        if any(value == other for other in values[:i]):
            raise ValueError(f"site[{name!r}] lists {value!r} twice")


def _option_pairs(options: Any) -> list[tuple[str, Any]]:
    """``(label, value)`` of each option, read from the public ``options`` as ipywidgets documents it: a mapping
    label -> value, a sequence of ``(label, value)`` pairs, or a sequence of values (labelled ``str(value)``)."""
    items = list(options.items() if isinstance(options, Mapping) else options)
    if all(isinstance(item, (list, tuple)) and len(item) == 2 for item in items):
        return [(str(text), value) for text, value in items]
    return [(str(value), value) for value in items]


def _selection_control(name: str, label: str, control: Any, chosen: Sequence[Any] | None) -> SiteControl:
    options = _option_pairs(control.options)
    if chosen is None:
        picked = options
    else:
        _no_duplicates(name, chosen)
        for value in chosen:
            if not any(value == v for _, v in options):
                raise ValueError(
                    f"site[{name!r}] lists {value!r}, which is not an option of the {type(control).__name__} "
                    f"(option values: {[v for _, v in options]})"
                )
        picked = [(text, v) for text, v in options if any(v == value for value in chosen)]
    values = tuple(v for _, v in picked)
    current = options[control.index][1] if control.index is not None else None
    initial = _initial_index(name, values, current, repr(current))
    kind = _HTML_KIND.get(type(control).__name__, "range")
    return SiteControl(name, label, kind, values, tuple(text for text, _ in picked), initial, len(options))


def _boolean_control(name: str, label: str, control: Any, chosen: Sequence[Any] | None) -> SiteControl:
    if chosen is None:
        values: tuple[bool, ...] = (False, True)
    else:
        _no_duplicates(name, chosen)
        if not chosen or any(not isinstance(v, bool) for v in chosen):
            raise ValueError(f"site[{name!r}] must list True and/or False for a {type(control).__name__}, got {chosen}")
        values = tuple(sorted(chosen))
    initial = _initial_index(name, values, bool(control.value), repr(bool(control.value)))
    return SiteControl(name, label, "checkbox", values, tuple(str(v) for v in values), initial, 2)


def _readout(control: Any, value: float) -> str:
    fmt = getattr(control, "readout_format", "") or ("d" if isinstance(value, int) else ".2f")
    try:
        return format(value, fmt)
    except (TypeError, ValueError):
        return str(value)


def _steps(control: Any) -> tuple[float, float, float, bool]:
    """(min, max, step, integer?) of a numeric or range slider."""
    integer = type(control).__name__.startswith("Int")
    step = control.step if control.step else (1 if integer else 0.1)
    return control.min, control.max, step, integer


def _full_range(control: Any) -> list[Any]:
    low, high, step, integer = _steps(control)
    count = int(math.floor((high - low) / step + 1e-9)) + 1
    if integer:
        return [low + i * step for i in range(count)]
    return [round(low + i * step, 12) for i in range(count)]


def _check_on_grid(name: str, control: Any, value: Any) -> None:
    low, high, step, integer = _steps(control)
    kind = type(control).__name__
    listed = f"a value listed in site[{name!r}] for a {kind}"
    if integer:
        check_integer(listed, value)
    else:
        check_number(listed, value)
    if not low <= value <= high:
        raise ValueError(f"site[{name!r}] lists {value!r}, outside the {kind}'s range [{low}, {high}]")
    steps = (value - low) / step
    if abs(steps - round(steps)) > 1e-9 * max(1.0, abs(steps)):
        raise ValueError(f"site[{name!r}] lists {value!r}, which the {kind} cannot take (min {low}, step {step})")


def _numeric_control(name: str, label: str, control: Any, chosen: Sequence[Any] | None) -> SiteControl:
    every = _full_range(control)
    if chosen is None:
        if len(every) > MAX_FULL_RANGE:
            raise ValueError(
                f"control {name!r} ({type(control).__name__} from {control.min} to {control.max}) has {len(every)} "
                f"values, more than the website's {MAX_FULL_RANGE}: pass site={{{name!r}: [...]}} with the values "
                "the website should offer"
            )
        values = every
    else:
        _no_duplicates(name, chosen)
        for value in chosen:
            _check_on_grid(name, control, value)
        values = sorted(chosen)
    initial = _initial_index(name, values, control.value, _readout(control, control.value))
    labels = tuple(_readout(control, v) for v in values)
    return SiteControl(name, label, "range", tuple(values), labels, initial, len(every))


def _range_control(name: str, label: str, control: Any, chosen: Sequence[Any] | None) -> SiteControl:
    every = _full_range(control)
    pairs = len(every) * (len(every) + 1) // 2
    if chosen is None:
        if pairs > MAX_FULL_RANGE:
            raise ValueError(
                f"control {name!r} ({type(control).__name__} from {control.min} to {control.max}) has {pairs} "
                f"(low, high) pairs, more than the website's {MAX_FULL_RANGE}: pass site={{{name!r}: [(low, high), "
                "...]}} with the pairs the website should offer"
            )
        values = [(a, b) for i, a in enumerate(every) for b in every[i:]]
    else:
        _no_duplicates(name, [tuple(v) if isinstance(v, (list, tuple)) else v for v in chosen])
        values = []
        for pair in chosen:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"site[{name!r}] lists {pair!r}; the {type(control).__name__} takes (low, high) pairs")
            _check_on_grid(name, control, pair[0])
            _check_on_grid(name, control, pair[1])
            if pair[0] > pair[1]:
                raise ValueError(f"site[{name!r}] lists {tuple(pair)!r}, whose low end is above its high end")
            values.append(tuple(pair))
        values.sort()
    current = tuple(control.value)
    shown = f"({_readout(control, current[0])}, {_readout(control, current[1])})"
    initial = _initial_index(name, values, current, shown)
    labels = tuple(f"{_readout(control, a)}\u2013{_readout(control, b)}" for a, b in values)
    return SiteControl(name, label, "range", tuple(values), labels, initial, pairs)


def site_states(controls: Sequence[SiteControl], max_states: int = MAX_STATES) -> list[tuple[int, ...]]:
    """Every website state: one index into each control's ``values``, in ``itertools.product`` order.

    Raises:
        ValueError: more than ``max_states`` states (the message gives each control's count).
    """
    check_positive_int("max_states", max_states)
    count = math.prod(len(c.values) for c in controls)
    if count > max_states:
        sizes = " x ".join(f"{c.name}: {len(c.values)}" for c in controls if len(c.values) > 1)
        raise ValueError(
            f"the website grid has {count} states ({sizes}), more than max_states={max_states}: give coarser lists "
            "in site={...} (each precomputed state is stored in the notebook), or raise max_states"
        )
    return list(itertools.product(*(range(len(c.values)) for c in controls)))


def state_key(controls: Sequence[SiteControl], indices: Sequence[int]) -> str:
    """The key of a state in the HTML (``data-key``): the index of each shown control's value, joined by ``-``
    (``fixed`` values have no control on the page and are left out), e.g. ``"3-0"``."""
    return "-".join(str(i) for c, i in zip(controls, indices) if c.kind != "fixed")


def describe_state(controls: Sequence[SiteControl], indices: Sequence[int], *, labels: bool = False) -> str:
    """``"length = 30, example = 0"`` (argument names; with ``labels``, the controls' labels as the page shows them)."""
    return ", ".join(
        f"{c.label if labels else c.name} = {c.labels[i]}" for c, i in zip(controls, indices) if c.kind != "fixed"
    )
