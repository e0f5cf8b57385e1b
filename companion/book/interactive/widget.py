"""The widget: :func:`interact`, live in Jupyter and Colab, precomputed on the website."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .capture import Recorder, capture_outputs, captured
from .explorable import explorable_html
from .grid import MAX_STATES, SiteControl, describe_state, site_controls, site_states, state_key

__all__ = ["interact"]


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
    with captured(Recorder()):  # the widget runs the function once on creation: discard that run's output
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
            range sliders with more than ``MAX_FULL_RANGE`` values; optional for the others).
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
                f"{name}({call}) raised {type(exc).__name__} for the website state "
                f"{describe_state(site_list, indices)}: {exc}"
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
