"""The HTML the website shows for one :func:`~companion.book.interactive.interact`: :func:`explorable_html`."""

from __future__ import annotations

import hashlib
import html
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .grid import SiteControl, describe_state, state_key

__all__ = ["explorable_html"]


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
        description = describe_state(controls, indices, labels=True)
        alt = f"Figure for {description}" if description else "Figure"
        hidden = _flag("hidden", key != initial)
        content = "".join(_output_html(o, alt) for o in outputs[key])
        parts.append(
            f'<div class="explorable-state" data-key="{key}" data-state="{_attr(description)}"{hidden}>{content}</div>'
        )
    parts.append("</div></div>")
    return "\n".join(p for p in parts if p)
