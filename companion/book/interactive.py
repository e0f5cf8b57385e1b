"""Widgets that respond in Jupyter, in Colab and on the book's static website: :func:`interact`.

On a static website no Python runs, so an ordinary ``ipywidgets.interact`` there shows its last state only: the
slider moves, the figure under it does not. :func:`interact` keeps the live widget for Jupyter and Colab and, when
the cell runs, also computes the output of the function for every state a reader can pick on the website. It then
emits **one** output whose mimebundle holds

* ``application/vnd.jupyter.widget-view+json``: the live ``ipywidgets.interactive`` widget (Jupyter, JupyterLab,
  VS Code, Colab), which re-runs the function on every change, exactly as ``ipywidgets.interact`` does;
* ``text/html``: plain HTML controls labelled like the widget (a range input stepping through the website's
  values with the value shown, a select, radio buttons, a checkbox) followed by every state's precomputed output,
  keyed by state, only the current one visible (the others carry the ``hidden`` attribute). The book's script
  ``book/_vendor/explorable/explorable.js`` wires the controls to show the state they select; the book's
  configuration (``nb_mime_priority_overrides`` in ``_config.yml``) makes the website prefer this HTML to the
  widget view.

Which states the website offers, control by control (:func:`site_controls`):

========================================================  ==========================================================
control                                                   website values
========================================================  ==========================================================
``Dropdown``, ``Select``, ``ToggleButtons``,              every option, or the option values listed in
``RadioButtons``, ``SelectionSlider``                     ``site={"name": [...]}``
``Checkbox``, ``ToggleButton``                            ``False`` and ``True`` (or the subset in ``site``)
``IntSlider``, ``FloatSlider``                            every step from ``min`` to ``max`` when there are at
                                                          most :data:`MAX_FULL_RANGE` of them; otherwise the
                                                          coarser list ``site={"name": [...]}`` (required)
``IntRangeSlider``, ``FloatRangeSlider``                  every (low, high) pair when there are at most
                                                          :data:`MAX_FULL_RANGE`; otherwise ``site`` (required)
``ipywidgets.fixed(value)``                               the value (no control)
========================================================  ==========================================================

The website's grid is the product of these lists; it must hold the control's current value (the state shown
first) and at most ``max_states`` states. Each state's output is captured in order: printed text (stdout and
stderr), matplotlib figures shown with ``plt.show()`` or left open (PNG at :data:`FIGURE_DPI` dpi; the figures are
closed afterwards), rich objects passed to ``IPython.display.display`` and the function's return value when it is
not ``None`` (as ``ipywidgets.interact`` displays it).

In Colab (``google.colab`` imported) nothing is precomputed: the reader has a kernel, and the widget is all they
need. Bad input raises ``TypeError``/``ValueError`` naming the argument; a function that raises for one of the
website's states raises ``RuntimeError`` naming the state, chained to the original exception.

Example (the pattern of the chapters)::

    import ipywidgets as widgets
    from companion.book.interactive import interact

    def show(pair=4, positions=(0, 40)):
        ...  # print, plot, plt.show()

    interact(show, pair=widgets.IntSlider(value=4, min=0, max=63),
             positions=widgets.IntRangeSlider(value=(0, 40), min=0, max=999),
             site={"pair": [0, 4, 16, 63], "positions": [(0, 40), (0, 999)]})
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import inspect
import io
import itertools
import json
import math
import struct
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import check_integer, check_number, check_positive_int

__all__ = [
    "interact",
    "SiteControl",
    "site_controls",
    "site_states",
    "capture_outputs",
    "state_key",
    "explorable_html",
    "FIGURE_DPI",
    "MAX_FULL_RANGE",
    "MAX_STATES",
]

#: Resolution of the figures precomputed for the website (the chapters' own figures use matplotlib's 100 dpi).
FIGURE_DPI = 72
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


# ----------------------------------------------------------------------------------------------------------------
# The website's values of each control
# ----------------------------------------------------------------------------------------------------------------


def site_controls(controls: Mapping[str, Any], site: Mapping[str, Sequence[Any]] | None = None) -> list[SiteControl]:
    """The website's values of every control, in the order of ``controls`` (see the module's table).

    Args:
        controls: ``{argument name: ipywidgets control or ipywidgets.fixed(value)}``.
        site: ``{argument name: [values]}``: the values the website offers for that control, instead of all of them
            (required for a numeric or range slider with more than :data:`MAX_FULL_RANGE` values).

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


def _describe(controls: Sequence[SiteControl], indices: Sequence[int], *, labels: bool = False) -> str:
    """``"length = 30, example = 0"`` (argument names; with ``labels``, the controls' labels as the page shows them)."""
    return ", ".join(
        f"{c.label if labels else c.name} = {c.labels[i]}" for c, i in zip(controls, indices) if c.kind != "fixed"
    )


# ----------------------------------------------------------------------------------------------------------------
# Capturing what the function prints, draws and displays
# ----------------------------------------------------------------------------------------------------------------


class _Recorder:
    """Outputs in the order they happen, as nbformat output dicts (streams merged like Jupyter merges them)."""

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []

    def text(self, stream: str, text: str) -> None:
        if not text:
            return
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == stream:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": stream, "text": text})

    def display(self, data: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> None:
        self.outputs.append({"output_type": "display_data", "data": dict(data), "metadata": dict(metadata or {})})

    def clear(self) -> None:
        self.outputs.clear()


class _StreamWriter(io.TextIOBase):
    def __init__(self, recorder: _Recorder, name: str) -> None:
        self._recorder, self._name = recorder, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._recorder.text(self._name, text)
        return len(text)


class _DisplayPublisher:
    """Stands in for IPython's display publisher while a state runs (as ``IPython.utils.capture`` does): displays
    and clears go to the recorder, anything else (``set_parent``, which ipywidgets' Output calls in a kernel) to the
    shell's own publisher."""

    def __init__(self, recorder: _Recorder, original: Any) -> None:
        self._recorder, self._original = recorder, original

    def publish(self, data, metadata=None, *args, **kwargs) -> None:
        self._recorder.display(data, metadata)

    def clear_output(self, wait: bool = False) -> None:
        self._recorder.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def _figure_output(figure: Any) -> dict[str, Any]:
    """A matplotlib figure as a display_data output: PNG at FIGURE_DPI, text/plain naming its titles."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    png = buffer.getvalue()
    titles = [t for t in [getattr(figure, "_suptitle", None)] if t is not None and t.get_text()]
    names = [t.get_text() for t in titles] + [ax.get_title() for ax in figure.axes if ax.get_title()]
    plain = "Figure" + (": " + "; ".join(names) if names else "")
    width, height = _png_size(png)
    return {
        "output_type": "display_data",
        "data": {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": plain},
        "metadata": {"image/png": {"width": width, "height": height}},
    }


@contextlib.contextmanager
def _captured(recorder: _Recorder) -> Iterator[None]:
    """Route stdout, stderr, IPython displays and ``plt.show()`` of the new figures into ``recorder``."""
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())

    def flush_figures() -> None:
        for number in sorted(set(plt.get_fignums()) - before):
            figure = plt.figure(number)
            recorder.outputs.append(_figure_output(figure))
            plt.close(figure)

    def show(*args: Any, **kwargs: Any) -> None:
        flush_figures()

    shell = _ipython()
    publisher = getattr(shell, "display_pub", None)
    original_show = plt.show
    try:
        plt.show = show
        if shell is not None:
            shell.display_pub = _DisplayPublisher(recorder, publisher)
        with (
            contextlib.redirect_stdout(_StreamWriter(recorder, "stdout")),
            contextlib.redirect_stderr(_StreamWriter(recorder, "stderr")),
        ):
            yield
            flush_figures()  # figures the function left open, as the inline backend would show them
    finally:
        plt.show = original_show
        if shell is not None:
            shell.display_pub = publisher
        for number in set(plt.get_fignums()) - before:
            plt.close(number)


def _ipython() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return None
    return get_ipython()


def capture_outputs(function: Callable[..., Any], kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Call ``function(**kwargs)`` and return what it printed, drew and displayed, as nbformat output dicts.

    Streams become ``{"output_type": "stream", "name": "stdout" | "stderr", "text": ...}``; figures (shown with
    ``plt.show()`` or left open; closed afterwards) and displayed objects become
    ``{"output_type": "display_data", "data": {mime type: content}, "metadata": {...}}``, figures as base64 PNG at
    :data:`FIGURE_DPI`. A return value other than ``None`` is displayed last, as ``ipywidgets.interact`` does.
    Exceptions propagate (figures the call opened are closed).
    """
    from IPython.display import display

    recorder = _Recorder()
    with _captured(recorder):
        result = function(**kwargs)
        if result is not None:
            display(result)
    return recorder.outputs


# ----------------------------------------------------------------------------------------------------------------
# The HTML the website shows
# ----------------------------------------------------------------------------------------------------------------


def _attr(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _output_html(output: Mapping[str, Any], alt: str) -> str:
    if output["output_type"] == "stream":
        classes = "explorable-stream" + (" explorable-stderr" if output["name"] == "stderr" else "")
        return f'<pre class="{classes}">{html.escape(output["text"])}</pre>'
    data = output.get("data", {})
    if "text/html" in data:
        return f'<div class="explorable-html">{_joined(data["text/html"])}</div>'
    if "image/svg+xml" in data:
        return f'<div class="explorable-svg">{_joined(data["image/svg+xml"])}</div>'
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            encoded = _joined(data[mime]).replace("\n", "")
            size = output.get("metadata", {}).get(mime, {})
            dims = "".join(f' {k}="{int(size[k])}"' for k in ("width", "height") if k in size)
            plain = _joined(data.get("text/plain", ""))
            titles = plain[len("Figure: ") :] if plain.startswith("Figure: ") else ""
            description = alt + (f": {titles}" if titles else "")
            return f'<img src="data:{mime};base64,{encoded}" alt="{_attr(description)}"{dims}>'
    for mime in ("text/markdown", "text/latex", "text/plain"):
        if mime in data:
            return f'<pre class="explorable-stream">{html.escape(_joined(data[mime]))}</pre>'
    return ""


def _joined(value: str | Sequence[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def _flag(name: str, on: bool) -> str:
    """A boolean attribute written ``name="name"``: sanitizers (JupyterLab's, for an untrusted notebook) drop
    attributes without a value, and a ``hidden`` that went missing would show every state at once."""
    return f' {name}="{name}"' if on else ""


def _control_html(control: SiteControl, uid: str, position: int) -> str:
    label = html.escape(control.label)
    common = f'class="explorable-control" data-explorable-kind="{control.kind}" data-name="{_attr(control.name)}"'
    if control.kind == "range":
        last = len(control.values) - 1
        shown = html.escape(control.labels[control.initial])
        disabled = _flag("disabled", last == 0)
        return (
            f'<div {common}><label><span class="explorable-label">{label}</span> '
            f'<input type="range" min="0" max="{last}" step="1" value="{control.initial}" autocomplete="off"'
            f' data-labels="{_attr(json.dumps(list(control.labels)))}" aria-valuetext="{_attr(shown)}"{disabled}> '
            f'<output class="explorable-readout">{shown}</output></label></div>'
        )
    if control.kind == "select":
        options = "".join(
            f'<option value="{i}"{_flag("selected", i == control.initial)}>{html.escape(text)}</option>'
            for i, text in enumerate(control.labels)
        )
        return (
            f'<div {common}><label><span class="explorable-label">{label}</span> '
            f'<select autocomplete="off">{options}</select></label></div>'
        )
    if control.kind == "radio":
        group = f"explorable-{uid}-{position}"
        buttons = "".join(
            f'<label class="explorable-option"><input type="radio" name="{group}" value="{i}" autocomplete="off"'
            f"{_flag('checked', i == control.initial)}> <span>{html.escape(text)}</span></label>"
            for i, text in enumerate(control.labels)
        )
        return (
            f'<fieldset {common}><legend class="explorable-label">{label}</legend>'
            f'<span class="explorable-options">{buttons}</span></fieldset>'
        )
    # checkbox: values are a sorted subset of (False, True)
    index = {value: i for i, value in enumerate(control.values)}
    checked = _flag("checked", bool(control.values[control.initial]))
    disabled = _flag("disabled", len(control.values) == 1)
    return (
        f'<div {common}><label><input type="checkbox" autocomplete="off"{checked}{disabled}'
        f' data-checked-index="{index.get(True, -1)}" data-unchecked-index="{index.get(False, -1)}"> '
        f'<span class="explorable-label">{label}</span></label></div>'
    )


def _note(controls: Sequence[SiteControl]) -> str:
    """The caption saying which controls offer fewer values on the website than live, e.g. "On the website
    “length” steps through 5 precomputed values and “example” through 4; ..."."""
    coarse = [c for c in controls if c.kind != "fixed" and c.coarser]
    if not coarse:
        return ""
    parts = []
    for number, control in enumerate(coarse):
        label = f"\u201c{html.escape(control.label)}\u201d"
        if control.kind == "range":
            verb = "steps through" if number == 0 else "through"
            noun = f" precomputed value{'s' if len(control.values) != 1 else ''}" if number == 0 else ""
            parts.append(f"{label} {verb} {len(control.values)}{noun}")
        else:
            parts.append(f"{label} offers {len(control.values)} of its {control.live_count} options")
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f'<p class="explorable-note">On the website {listed}; in Jupyter or Colab every value is computed live.</p>'


def explorable_html(
    controls: Sequence[SiteControl],
    outputs: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    name: str = "interact",
) -> str:
    """The website's HTML: the controls, then one ``<div class="explorable-state" data-key=...>`` per state.

    Args:
        controls: the website's controls (:func:`site_controls`).
        outputs: ``{state key: nbformat output dicts}`` for every state of :func:`site_states` (keys from
            :func:`state_key`).
        name: a name for the explorable (the function's), kept in ``data-explorable``.

    Only the controls' initial state is visible; the others carry ``hidden``. Without the book's script the page
    still shows that state.
    """
    states = list(itertools.product(*(range(len(c.values)) for c in controls)))
    keys = [state_key(controls, s) for s in states]
    if sorted(keys) != sorted(outputs):
        raise ValueError(f"outputs must hold exactly the states {keys}, got {sorted(outputs)}")
    body = "".join(json.dumps([k, outputs[k]], sort_keys=True) for k in keys)
    uid = hashlib.sha1((name + body).encode("utf-8")).hexdigest()[:10]
    initial = state_key(controls, [c.initial for c in controls])
    parts = [
        f'<div class="explorable tex2jax_ignore mathjax_ignore" data-explorable="{_attr(name)}" id="explorable-{uid}">',
        '<div class="explorable-controls">',
        *(_control_html(c, uid, i) for i, c in enumerate(controls) if c.kind != "fixed"),
        "</div>",
        _note(controls),
        '<div class="explorable-states">',
    ]
    for indices, key in zip(states, keys):
        description = _describe(controls, indices, labels=True)
        alt = f"Figure for {description}" if description else "Figure"
        hidden = _flag("hidden", key != initial)
        content = "".join(_output_html(o, alt) for o in outputs[key])
        parts.append(
            f'<div class="explorable-state" data-key="{key}" data-state="{_attr(description)}"{hidden}>{content}</div>'
        )
    parts.append("</div></div>")
    return "\n".join(p for p in parts if p)


# ----------------------------------------------------------------------------------------------------------------
# interact
# ----------------------------------------------------------------------------------------------------------------


def _check_signature(function: Callable[..., Any], controls: Mapping[str, Any]) -> None:
    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # builtins without a signature: nothing to check
        return
    try:
        signature.bind(**dict.fromkeys(controls))
    except TypeError as exc:
        raise TypeError(
            f"the controls {list(controls)} do not fit {getattr(function, '__name__', 'function')}{signature}: {exc}"
        ) from None


def _in_colab() -> bool:
    return "google.colab" in sys.modules


def _kwargs(controls: Sequence[SiteControl], indices: Sequence[int]) -> dict[str, Any]:
    return {c.name: c.values[i] for c, i in zip(controls, indices)}


def _live_widget(function: Callable[..., Any], controls: Mapping[str, Any], initial: list[dict[str, Any]] | None):
    """The ``ipywidgets.interactive`` widget; with ``initial``, its output area starts with those outputs instead
    of what the widget's own first run would send (which would depend on how the front end routes it)."""
    import ipywidgets

    if initial is None:
        return ipywidgets.interactive(function, {"auto_display": True}, **controls)
    with _captured(_Recorder()):  # the widget runs the function once on creation: discard that run's output
        widget = ipywidgets.interactive(function, {"auto_display": True}, **controls)
    widget.out.outputs = tuple(initial)
    return widget


def interact(
    function: Callable[..., Any],
    /,
    *,
    site: Mapping[str, Sequence[Any]] | None = None,
    max_states: int = MAX_STATES,
    **controls: Any,
) -> None:
    """Show ``function`` with live controls in Jupyter and Colab, and responsive precomputed states on the website.

    Args:
        function: called with one keyword argument per control; it may print, plot (``plt.show()``), display
            objects or return one (shown when not ``None``).
        site: ``{argument name: [values]}``: the values the website offers for a control (required for numeric and
            range sliders with more than :data:`MAX_FULL_RANGE` values; optional for the others).
        max_states: the most website states allowed (their product over the controls).
        **controls: ``{argument name: ipywidgets control}`` (see the module's table) or ``ipywidgets.fixed(v)``.

    The output is displayed at once, as ``ipywidgets.interact`` does; nothing is returned, so that nothing else is
    displayed whatever the front end (nbval runs cells with ``store_history=False``, where IPython does not
    honour a trailing ``;``). The live widget is an ``ipywidgets.interactive``; its model id is in the output.

    Raises:
        TypeError, ValueError: bad controls, ``site`` or ``max_states`` (the message names the argument).
        RuntimeError: ``function`` raised for one of the website's states (named in the message).
    """
    from IPython.display import display

    _check_signature(function, controls)
    if not controls:
        raise ValueError("interact needs at least one control, e.g. x=widgets.IntSlider(...)")
    site_list = site_controls(controls, site)
    states = site_states(site_list, max_states)
    if _in_colab():
        display(_live_widget(function, controls, None))
        return None
    name = getattr(function, "__name__", "function")
    outputs = {}
    for indices in states:
        arguments = _kwargs(site_list, indices)
        try:
            outputs[state_key(site_list, indices)] = capture_outputs(function, arguments)
        except Exception as exc:
            call = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
            raise RuntimeError(
                f"{name}({call}) raised {type(exc).__name__} for the website state {_describe(site_list, indices)}: "
                f"{exc}"
            ) from exc
    initial = outputs[state_key(site_list, [c.initial for c in site_list])]
    widget = _live_widget(function, controls, initial)
    view = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}  # as ipywidgets 7 and 8 write it
    bundle = {
        "application/vnd.jupyter.widget-view+json": view,
        "text/html": explorable_html(site_list, outputs, name=name),
        "text/plain": f"interactive widget for {name}() with {len(states)} precomputed website state"
        + ("s" if len(states) != 1 else ""),
    }
    display(bundle, raw=True)
    return None
