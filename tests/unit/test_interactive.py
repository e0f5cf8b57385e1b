"""companion.book.interactive: the website's states of each control, the captured outputs, the HTML and the errors."""

from __future__ import annotations

import base64
import html.parser
import io
import sys

import pytest

ipywidgets = pytest.importorskip("ipywidgets")
matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402
from traitlets.config import Config  # noqa: E402

from companion.book import interactive  # noqa: E402
from companion.book.interactive import interact, site_controls, site_states  # noqa: E402

W = ipywidgets


@pytest.fixture
def shell():
    """An IPython shell (as in a kernel: displays go through its display publisher), removed afterwards."""
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    instance = InteractiveShell.instance(config=config)
    yield instance
    InteractiveShell.clear_instance()


def widget_of(bundle):
    """The live widget an output shows (ipywidgets keeps every widget by model id)."""
    registry = getattr(W.widgets.widget, "_instances", None) or W.Widget.widgets
    return registry[bundle["application/vnd.jupyter.widget-view+json"]["model_id"]]


def run_interact(function, **arguments):
    """Call interact inside the shell; returns (the displayed mimebundles, the live widget)."""
    with capture_output() as captured:
        assert interact(function, **arguments) is None, "nothing to display twice"
    bundles = [output.data for output in captured.outputs]
    return bundles, widget_of(bundles[-1])


class ExplorableParser(html.parser.HTMLParser):
    """The states (key, hidden, [("img", src) | ("text", text)]) and the controls of an explorable's HTML."""

    def __init__(self):
        super().__init__()
        self.states, self.controls = [], []
        self._state = None
        self._pre = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-explorable-kind" in attrs:
            self.controls.append({"kind": attrs["data-explorable-kind"], "name": attrs["data-name"], "inputs": []})
        elif tag in ("input", "option") and self.controls:
            self.controls[-1]["inputs"].append((tag, attrs))
        if tag == "div" and "explorable-state" in attrs.get("class", "").split():
            self._state = {"key": attrs["data-key"], "hidden": "hidden" in attrs, "items": []}
            self.states.append(self._state)
        elif tag == "img" and self._state is not None:
            self._state["items"].append(("img", attrs["src"], attrs.get("alt", "")))
        elif tag == "pre" and self._state is not None:
            self._pre = []

    def handle_data(self, data):
        if self._pre is not None:
            self._pre.append(data)

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre is not None:
            self._state["items"].append(("text", "".join(self._pre)))
            self._pre = None


def parse(page: str) -> ExplorableParser:
    parser = ExplorableParser()
    parser.feed(page)
    return parser


def png_of(draw, *args) -> str:
    """The data URL of the figure ``draw(*args)`` makes, rendered as the module documents (FIGURE_DPI, tight)."""
    figure = draw(*args)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=interactive.FIGURE_DPI, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


# ---------------------------------------------------------------------------------------------------------------
# The website's values of each control
# ---------------------------------------------------------------------------------------------------------------


def test_selection_controls_offer_every_option_with_its_label():
    dropdown = W.Dropdown(options=[("first", 10), ("second", 20), ("third", 30)], value=20, description="pick")
    toggle = W.ToggleButtons(options=["right", "left"], value="left")
    selection = W.SelectionSlider(options=[1, 2, 4, 8], value=4)
    pick, side, width = site_controls({"pick": dropdown, "side": toggle, "width": selection})
    assert (pick.kind, pick.values, pick.labels, pick.initial, pick.label) == (
        "select",
        (10, 20, 30),
        ("first", "second", "third"),
        1,
        "pick",
    )
    assert (side.kind, side.values, side.initial, side.label) == ("radio", ("right", "left"), 1, "side")
    assert (width.kind, width.values, width.labels, width.initial) == ("range", (1, 2, 4, 8), ("1", "2", "4", "8"), 2)
    assert not any(c.coarser for c in (pick, side, width))


def test_a_site_list_picks_options_in_the_controls_order():
    dropdown = W.Dropdown(options=[("a", 1), ("b", 2), ("c", 3), ("d", 4)], value=2)
    (pick,) = site_controls({"pick": dropdown}, {"pick": [4, 2]})
    assert pick.values == (2, 4) and pick.labels == ("b", "d") and pick.initial == 0 and pick.coarser


def test_checkboxes_take_both_values():
    (flag,) = site_controls({"flag": W.Checkbox(value=True, description="causal mask")})
    assert (flag.kind, flag.values, flag.initial, flag.label) == ("checkbox", (False, True), 1, "causal mask")


def test_short_sliders_offer_every_step_long_ones_take_the_site_list():
    (head,) = site_controls({"head": W.IntSlider(value=3, min=0, max=7)})
    assert head.values == tuple(range(8)) and head.initial == 3 and not head.coarser
    (scale,) = site_controls({"scale": W.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.25)})
    assert scale.values == (0.0, 0.25, 0.5, 0.75, 1.0) and scale.labels[2] == "0.50"
    slider = W.IntSlider(value=512, min=32, max=8192, step=32)
    (length,) = site_controls({"length": slider}, {"length": [8192, 32, 512]})
    assert length.values == (32, 512, 8192) and length.initial == 1 and length.live_count == 256 and length.coarser


def test_range_sliders_take_pairs():
    slider = W.IntRangeSlider(value=(0, 40), min=0, max=999)
    (positions,) = site_controls({"positions": slider}, {"positions": [(0, 999), [0, 40], (500, 540)]})
    assert positions.values == ((0, 40), (0, 999), (500, 540)) and positions.initial == 0
    assert positions.labels[0] == "0\u201340"
    (small,) = site_controls({"small": W.IntRangeSlider(value=(1, 2), min=0, max=3)})
    assert len(small.values) == 10 and small.values[small.initial] == (1, 2)


def test_fixed_values_have_no_control_and_no_part_in_the_key():
    controls = site_controls({"n": W.IntSlider(value=1, min=0, max=2), "scale": W.fixed(3.0)})
    assert controls[1].kind == "fixed" and controls[1].values == (3.0,)
    states = site_states(controls)
    assert [interactive.state_key(controls, s) for s in states] == ["0", "1", "2"]


def test_the_grid_is_the_product_of_the_controls_in_order():
    controls = site_controls({"a": W.Checkbox(value=False), "b": W.Dropdown(options=["x", "y", "z"])})
    assert site_states(controls) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("controls", "site", "error", "words"),
    [
        ({"text": W.Text(value="hi")}, None, TypeError, ["'text'", "Text", "supports"]),
        ({"n": 5}, None, TypeError, ["'n'", "int"]),
        ({"n": W.IntSlider(max=100)}, None, ValueError, ["'n'", "101 values", "site="]),
        ({"p": W.IntRangeSlider(value=(0, 4), max=99)}, None, ValueError, ["'p'", "pairs", "site="]),
        ({"n": W.IntSlider(max=9)}, {"m": [1]}, ValueError, ["'m'", "not controls"]),
        ({"n": W.IntSlider(max=9)}, {"n": 3}, TypeError, ["site['n']", "list"]),
        ({"n": W.IntSlider(max=9)}, {"n": [0, 12]}, ValueError, ["site['n']", "12", "outside"]),
        ({"n": W.IntSlider(max=90, step=5)}, {"n": [0, 7]}, ValueError, ["site['n']", "7", "cannot take"]),
        ({"n": W.IntSlider(max=9)}, {"n": [0, 1.5]}, ValueError, ["site['n']", "1.5", "int"]),
        ({"n": W.IntSlider(value=4, max=9)}, {"n": [0, 9]}, ValueError, ["site['n']", "current value 4"]),
        ({"n": W.IntSlider(max=9)}, {"n": [0, 0, 9]}, ValueError, ["site['n']", "twice"]),
        ({"d": W.Dropdown(options=["a", "b"])}, {"d": ["a", "c"]}, ValueError, ["site['d']", "'c'", "not an option"]),
        ({"f": W.Checkbox()}, {"f": [0, 1]}, ValueError, ["site['f']", "True", "False"]),
        ({"p": W.IntRangeSlider(value=(0, 4), max=9)}, {"p": [(0, 4), (5, 2)]}, ValueError, ["site['p']", "(5, 2)"]),
        ({"p": W.IntRangeSlider(value=(0, 4), max=9)}, {"p": [(0, 4), 3]}, ValueError, ["site['p']", "pairs"]),
        ({"c": W.fixed(2)}, {"c": [2]}, ValueError, ["site['c']", "fixed"]),
    ],
)
def test_bad_controls_and_site_lists_name_the_argument(controls, site, error, words):
    with pytest.raises(error) as caught:
        site_controls(controls, site)
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


def test_too_many_states_name_max_states_and_the_counts():
    controls = site_controls({"a": W.IntSlider(max=9), "b": W.IntSlider(max=9)})
    with pytest.raises(ValueError, match=r"100 states \(a: 10 x b: 10\).*max_states=64"):
        site_states(controls)
    assert len(site_states(controls, max_states=100)) == 100
    with pytest.raises(ValueError, match="max_states"):
        site_states(controls, max_states=0)


def test_controls_must_fit_the_function(shell):
    def f(x):
        pass

    with pytest.raises(TypeError, match=r"\['y'\] do not fit f\(x\)"):
        interact(f, y=W.IntSlider(max=3))
    with pytest.raises(ValueError, match="at least one control"):
        interact(lambda x=1: None)


def test_a_function_that_raises_names_the_state_and_leaves_no_figure_open(shell):
    def draw(n):
        plt.subplots()
        if n == 2:
            raise ZeroDivisionError("no good")
        plt.show()

    with pytest.raises(RuntimeError, match=r"draw\(n=2\) raised ZeroDivisionError for the website state n = 2") as e:
        interact(draw, n=W.IntSlider(value=0, min=0, max=3))
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    assert plt.get_fignums() == []


# ---------------------------------------------------------------------------------------------------------------
# Captured outputs and the HTML
# ---------------------------------------------------------------------------------------------------------------


def curve(n: int, title: str):
    figure, ax = plt.subplots(figsize=(3, 2))
    ax.plot(range(n + 2), [i * i for i in range(n + 2)])
    ax.set_title(title)
    return figure


def explore(n=1, side="right", causal=True):
    print(f"n={n} side={side} causal={causal}")
    curve(n, f"{side} {causal}")
    plt.show()
    print("after the figure", file=sys.stderr)


def explore_controls():
    return dict(
        n=W.IntSlider(value=2, min=0, max=40, step=2, description="size"),
        side=W.ToggleButtons(options=["right", "left"], value="right", description="pad side"),
        causal=W.Checkbox(value=True, description="causal mask"),
    )


def test_the_html_holds_one_state_per_grid_point_with_what_the_function_printed_and_drew(shell):
    bundles, widget = run_interact(explore, site={"n": [0, 2, 40]}, **explore_controls())
    assert len(bundles) == 1, "one output"
    bundle = bundles[0]
    assert isinstance(widget, W.interactive)
    page = parse(bundle["text/html"])
    expected = {
        f"{i}-{j}-{k}": (n, side, causal)
        for i, n in enumerate([0, 2, 40])
        for j, side in enumerate(["right", "left"])
        for k, causal in enumerate([False, True])
    }
    assert [s["key"] for s in page.states] == sorted(expected)
    for state in page.states:
        n, side, causal = expected[state["key"]]
        kinds = [item[0] for item in state["items"]]
        assert kinds == ["text", "img", "text"]
        assert state["items"][0][1] == f"n={n} side={side} causal={causal}\n"
        assert state["items"][1][1] == png_of(curve, n, f"{side} {causal}")
        assert f"size = {n}" in state["items"][1][2] and f"{side} {causal}" in state["items"][1][2]
        assert state["items"][2][1] == "after the figure\n"
        assert state["hidden"] == (state["key"] != "1-0-1"), "only the controls' initial state is visible"
    assert plt.get_fignums() == [], "every figure is closed"
    assert "<script" not in bundle["text/html"]
    # JupyterLab's sanitizer (an untrusted notebook) drops attributes without a value: hidden states must stay hidden
    assert bundle["text/html"].count(' hidden="hidden"') == len(expected) - 1
    assert " hidden>" not in bundle["text/html"] and " checked>" not in bundle["text/html"]


def test_the_html_controls_match_the_widget(shell):
    bundles, _ = run_interact(explore, site={"n": [0, 2, 40]}, **explore_controls())
    page = parse(bundles[0]["text/html"])
    size, side, causal = page.controls
    assert (size["kind"], size["name"]) == ("range", "n")
    (_, slider) = size["inputs"][0]
    assert (slider["min"], slider["max"], slider["value"]) == ("0", "2", "1")
    assert slider["data-labels"] == '["0", "2", "40"]'
    assert side["kind"] == "radio" and [a["value"] for _, a in side["inputs"]] == ["0", "1"]
    assert "checked" in side["inputs"][0][1] and "checked" not in side["inputs"][1][1]
    (_, box) = causal["inputs"][0]
    assert causal["kind"] == "checkbox" and "checked" in box and box["data-checked-index"] == "1"
    text = bundles[0]["text/html"]
    assert "pad side" in text and "causal mask" in text and "size" in text
    assert "On the website \u201csize\u201d steps through 3 precomputed values; in Jupyter or Colab" in text


def test_the_note_names_every_coarser_control():
    controls = site_controls(
        {
            "a": W.IntSlider(value=0, min=0, max=99),
            "b": W.IntSlider(value=0, min=0, max=99),
            "c": W.Dropdown(options=["x", "y", "z"]),
            "d": W.Checkbox(),
        },
        {"a": [0, 50], "b": [0, 10, 20], "c": ["x", "z"]},
    )
    outputs = {interactive.state_key(controls, s): [] for s in site_states(controls)}
    text = interactive.explorable_html(controls, outputs)
    assert (
        "On the website \u201ca\u201d steps through 2 precomputed values, \u201cb\u201d through 3 and \u201cc\u201d "
        "offers 2 of its 3 options; in Jupyter or Colab every value is computed live." in text
    )


def test_the_current_value_must_be_on_the_site(shell):
    with pytest.raises(ValueError, match="current value 1"):
        interact(explore, site={"n": [0, 2, 40]}, n=W.IntSlider(value=1, min=0, max=40))


def test_the_live_widget_starts_with_the_initial_states_output_and_reruns_on_change(shell):
    calls = []

    def show(k=1):
        calls.append(k)
        print("k is", k)

    bundles, widget = run_interact(show, k=W.IntSlider(value=1, min=0, max=3))
    html = bundles[0]["text/html"]
    assert [s["items"] for s in parse(html).states] == [[("text", f"k is {k}\n")] for k in range(4)]
    assert widget.out.outputs == ({"output_type": "stream", "name": "stdout", "text": "k is 1\n"},)
    calls.clear()
    widget.children[0].value = 3
    assert calls == [3], "moving the control reruns the function, as ipywidgets.interact does"


def test_rich_displays_and_return_values_are_captured(shell):
    from IPython.display import HTML, display

    def show(k=0):
        display(HTML(f"<b>bold {k}</b>"))
        return f"returned {k}"

    bundles, _ = run_interact(show, k=W.Dropdown(options=[0, 1]))
    html = bundles[0]["text/html"]
    assert '<div class="explorable-html"><b>bold 1</b></div>' in html
    assert "returned 1" in [item[1] for s in parse(html).states for item in s["items"]][-1]


def test_the_html_is_the_same_on_every_run(shell):
    first, _ = run_interact(explore, site={"n": [0, 2]}, **explore_controls())
    second, _ = run_interact(explore, site={"n": [0, 2]}, **explore_controls())
    assert first[0]["text/html"] == second[0]["text/html"], "nbval compares the stored html"


def test_in_colab_only_the_live_widget_is_shown(shell, monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    bundles, widget = run_interact(lambda k=0: calls.append(k), k=W.IntSlider(value=0, min=0, max=3))
    assert calls == [0], "only the widget's own first run: nothing precomputed"
    assert len(bundles) == 1 and "text/html" not in bundles[0]
    assert isinstance(widget, W.interactive)
