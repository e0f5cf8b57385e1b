"""Open the landing page and every chapter in headless Chromium, as a reader would.

Checks: no JavaScript error, no request leaves localhost (no CDN), math is typeset by MathJax (no raw `$$`),
every image loads, and widgets render where a page stores them. A full-page screenshot of each page is saved in
`artifacts/screenshots/` for people to look at.
"""

from __future__ import annotations

import pathlib

import pytest
from _pages import open_offline_page

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
PAGES = ["book/intro.html"] + [f"book/{p.stem}.html" for p in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))]


@pytest.mark.parametrize("page_path", PAGES)
def test_page_renders_offline(page_path, browser, site_url, screenshot_dir):
    page, errors, outside = open_offline_page(browser)
    page.goto(f"{site_url}/{page_path}", wait_until="networkidle")
    html_source = (HTML / page_path).read_text(encoding="utf-8")

    if "math notranslate" in html_source:
        page.wait_for_function("document.querySelectorAll('mjx-container').length > 0", timeout=20000)
        text = page.inner_text("main")
        assert "$$" not in text and "\\begin{" not in text, "raw TeX left on the page"
    if "application/vnd.jupyter.widget-view+json" in html_source:
        page.wait_for_selector(".jupyter-widgets, .widget-slider, .widget-dropdown", timeout=20000)

    broken = page.eval_on_selector_all(
        "main img", "imgs => imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    # Every figure needs alt text that describes it (not a file name): those stored in the page get it at build
    # time, those a widget draws at run time (data: URLs) from book/_vendor/widgets/assets_path.js.
    unnamed = page.eval_on_selector_all(
        "main img",
        "imgs => imgs.filter(i => !i.alt || /[.](png|jpg|svg)$/.test(i.alt)).map(i => i.src.slice(0, 80))",
    )
    page.screenshot(path=str(screenshot_dir / (page_path.replace("/", "_") + ".png")), full_page=True)
    page.close()
    assert not outside, f"{page_path} requested outside localhost: {outside}"
    assert not broken, f"{page_path} has images that do not load: {broken}"
    assert not unnamed, f"{page_path} has figures without alt text: {unnamed}"
    assert not errors, f"{page_path} logged JavaScript errors: {errors}"
