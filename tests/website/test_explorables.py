"""The chapters' widgets respond on the website: every control of every explorable, moved through every value.

An explorable is the website's half of `companion.book.interactive.interact`: plain HTML controls and one precomputed
output per state, stored in the chapter's .ipynb when it ran; `book/_vendor/explorable/explorable.js` shows the
state the controls select. For every chapter page, this test reads the explorables stored in the chapter's .ipynb
(parsed here in Python), opens the built page in headless Chromium, moves each control through each of its values
(keyboard on sliders, a click on buttons and checkboxes, a choice in menus) and asserts after every move that
exactly one state is visible, that it is the state stored for the values now chosen, that its images and text are
the stored ones, that they changed, that a slider shows the chosen value, and that the page made no request off
localhost and logged no JavaScript error.
"""

from __future__ import annotations

import html.parser
import json
import pathlib

import nbformat
import pytest
from _pages import open_offline_page

ROOT = pathlib.Path(__file__).resolve().parents[2]


class _Explorables(html.parser.HTMLParser):
    """Every explorable of an HTML text: its controls and its states (key -> [("img", src) | ("text", text)])."""

    def __init__(self):
        super().__init__()
        self.found: list[dict] = []
        self._items: list | None = None
        self._pre: list[str] | None = None
        self._depth = 0  # open elements inside the current state
        self._text: list[str] = []  # all text of the current state (compared when it holds no image or <pre>)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if self._items is not None and tag not in VOID_TAGS:
            self._depth += 1
        if "explorable" in classes:
            self.found.append({"controls": [], "states": {}, "visible": []})
        elif "data-explorable-kind" in attrs:
            self.found[-1]["controls"].append({"kind": attrs["data-explorable-kind"], "inputs": []})
        elif tag in ("input", "option") and self.found and self._items is None:
            self.found[-1]["controls"][-1]["inputs"].append(attrs)
        elif "explorable-state" in classes:
            self._items = self.found[-1]["states"].setdefault(attrs["data-key"], [])
            self._depth, self._text = 1, []
            if "hidden" not in attrs:
                self.found[-1]["visible"].append(attrs["data-key"])
        elif tag == "img" and self._items is not None:
            self._items.append(["img", attrs["src"]])
        elif tag == "pre" and self._items is not None:
            self._pre = []

    def handle_data(self, data):
        if self._pre is not None:
            self._pre.append(data)
        if self._items is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre is not None:
            self._items.append(["text", "".join(self._pre)])
            self._pre = None
        if self._items is not None and tag not in VOID_TAGS:
            self._depth -= 1
            if self._depth == 0:  # the state's own element closed
                if not self._items:  # HTML output (a table, styled text): its words are the content
                    self._items.append(["words", " ".join("".join(self._text).split())])
                self._items = None


VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def _control(raw: dict) -> dict:
    """kind, the number of values, the initial index and (sliders) the value labels of one stored control."""
    inputs, kind = raw["inputs"], raw["kind"]
    if kind == "range":
        labels = json.loads(inputs[0]["data-labels"])
        return {"kind": kind, "count": len(labels), "initial": int(inputs[0]["value"]), "labels": labels}
    if kind == "select":
        initial = next(i for i, option in enumerate(inputs) if "selected" in option)
        return {"kind": kind, "count": len(inputs), "initial": initial}
    if kind == "radio":
        initial = next(i for i, button in enumerate(inputs) if "checked" in button)
        return {"kind": kind, "count": len(inputs), "initial": initial}
    box = inputs[0]
    index = {True: int(box["data-checked-index"]), False: int(box["data-unchecked-index"])}
    return {"kind": kind, "count": 2, "initial": index["checked" in box], "index": index}


def stored_explorables(notebook: pathlib.Path) -> list[dict]:
    """The explorables in the outputs of a chapter's .ipynb, in page order."""
    found = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/html", "")
            if 'class="explorable ' in text:
                parser = _Explorables()
                parser.feed(text)
                for explorable in parser.found:
                    explorable["controls"] = [_control(c) for c in explorable["controls"]]
                    found.append(explorable)
    return found


CHAPTERS = {
    path.stem: found
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if (found := stored_explorables(path))
}


def test_the_chapters_store_explorables():
    assert CHAPTERS, "no chapter .ipynb stores an explorable (companion.book.interactive.interact)"
    for name, explorables in CHAPTERS.items():
        for explorable in explorables:
            keys = explorable["states"]
            counts = [c["count"] for c in explorable["controls"]]
            assert len(keys) == _product(counts), f"{name}: {len(keys)} states for controls of sizes {counts}"
            initial = "-".join(str(c["initial"]) for c in explorable["controls"])
            assert explorable["visible"] == [initial], f"{name}: the stored page must show only the initial state"


def _product(counts):
    result = 1
    for count in counts:
        result *= count
    return result


VISIBLE_STATE = r"""root => {
    const shown = [...root.querySelectorAll('.explorable-state')].filter(s => s.offsetParent !== null);
    return shown.map(s => ({key: s.getAttribute('data-key'),
        items: (() => {
            const items = [...s.querySelectorAll('img, pre')].map(
                e => e.tagName === 'IMG' ? ['img', e.getAttribute('src')] : ['text', e.textContent]);
            return items.length ? items : [['words', s.textContent.split(/\s+/).filter(Boolean).join(' ')]];
        })()}));
}"""


def _move(control_element, control: dict, current: int, target: int) -> None:
    """Set one control to value ``target`` as a reader would."""
    kind = control["kind"]
    if kind == "range":
        slider = control_element.locator("input")
        slider.focus()
        key = "ArrowRight" if target > current else "ArrowLeft"
        for _ in range(abs(target - current)):
            slider.press(key)
    elif kind == "select":
        control_element.locator("select").select_option(index=target)
    elif kind == "radio":
        control_element.locator("label").nth(target).click()
    else:
        control_element.locator("input").click()


def _targets(control: dict) -> list[int]:
    """Every value of a control, starting after the initial one (a checkbox: the other value, then back)."""
    if control["kind"] == "checkbox":
        return [1 - control["initial"], control["initial"]]
    count, start = control["count"], control["initial"]
    return [(start + step) % count for step in range(1, count)] + [start]


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_every_control_shows_the_stored_state(chapter, browser, site_url):
    page, errors, outside = open_offline_page(browser)
    page.goto(f"{site_url}/book/{chapter}.html", wait_until="networkidle")
    stored = CHAPTERS[chapter]
    roots = page.locator("div.explorable")
    assert roots.count() == len(stored), (
        f"{chapter}: the page shows {roots.count()} explorables, the .ipynb stores {len(stored)} "
        "(does the html builder prefer text/html to the widget view? nb_mime_priority_overrides in _config.yml)"
    )
    moves = 0
    for number, explorable in enumerate(stored):
        root = roots.nth(number)
        root.scroll_into_view_if_needed()
        page.wait_for_function("r => r.hasAttribute('data-explorable-ready')", arg=root.element_handle())
        indices = [c["initial"] for c in explorable["controls"]]
        shown = _check(root, explorable, indices, chapter)
        elements = root.locator("[data-explorable-kind]")
        assert elements.count() == len(explorable["controls"])
        for position, control in enumerate(explorable["controls"]):
            for target in _targets(control):
                _move(elements.nth(position), control, indices[position], target)
                indices[position] = target
                before, shown = shown, _check(root, explorable, indices, chapter)
                assert shown != before, f"{chapter}: the output did not change when control {position} moved"
                if control["kind"] == "range":
                    readout = elements.nth(position).locator("output").inner_text()
                    assert readout == control["labels"][target], (chapter, position, readout)
                moves += 1
    page.close()
    assert moves >= sum(c["count"] for e in stored for c in e["controls"]), "every value of every control"
    assert not outside, f"{chapter} requested outside localhost: {outside}"
    assert not errors, f"{chapter} logged JavaScript errors: {errors}"


def _check(root, explorable: dict, indices: list[int], chapter: str) -> list:
    """Exactly one state is visible, the one for ``indices``, with the stored content; returns that content."""
    key = "-".join(str(i) for i in indices)
    visible = root.evaluate(VISIBLE_STATE)
    assert [v["key"] for v in visible] == [key], (
        f"{chapter}: expected only state {key} visible, got {visible and [v['key'] for v in visible]}"
    )
    assert visible[0]["items"] == explorable["states"][key], f"{chapter}: state {key} differs from the .ipynb"
    return visible[0]["items"]
