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
                                                          most ``MAX_FULL_RANGE`` of them; otherwise the
                                                          coarser list ``site={"name": [...]}`` (required)
``IntRangeSlider``, ``FloatRangeSlider``                  every (low, high) pair when there are at most
                                                          ``MAX_FULL_RANGE``; otherwise ``site`` (required)
``ipywidgets.fixed(value)``                               the value (no control)
========================================================  ==========================================================

The website's grid is the product of these lists; it must hold the control's current value (the state shown
first) and at most ``max_states`` states. Each state's output is captured in order: printed text (stdout and
stderr), matplotlib figures shown with ``plt.show()`` or left open (PNG at ``FIGURE_DPI`` dpi; the figures are
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

from .capture import FIGURE_DPI, capture_outputs
from .explorable import explorable_html
from .grid import MAX_FULL_RANGE, MAX_STATES, SiteControl, site_controls, site_states, state_key
from .widget import interact

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
