"""Every internal link, anchor and image of the built site resolves; launch buttons point at committed notebooks."""

from __future__ import annotations

import pathlib
import re
import urllib.parse
from html.parser import HTMLParser

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img", "script", "link"):
                self.links.append((tag, attrs[key]))


@pytest.fixture(scope="module")
def pages() -> dict[pathlib.Path, _Collector]:
    parsed = {}
    for path in HTML.rglob("*.html"):
        if "_static" in path.parts or "_sources" in path.parts or "_modules" in path.parts:
            continue
        collector = _Collector()
        collector.feed(path.read_text(encoding="utf-8"))
        parsed[path] = collector
    return parsed


def _ids_of(path: pathlib.Path, cache: dict) -> set[str]:
    if path not in cache:
        collector = _Collector()
        collector.feed(path.read_text(encoding="utf-8"))
        cache[path] = collector.ids
    return cache[path]


def test_internal_links_and_anchors_resolve(pages):
    broken, cache = [], {p: c.ids for p, c in pages.items()}
    for page, collector in pages.items():
        for tag, url in collector.links:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme or url.startswith(("//", "mailto:", "javascript:", "data:")):
                continue
            target = page if not parts.path else (page.parent / urllib.parse.unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)}: <{tag}> {url} (missing file)")
            elif parts.fragment and target.suffix == ".html" and parts.fragment not in _ids_of(target, cache):
                broken.append(f"{page.relative_to(HTML)}: <{tag}> {url} (missing anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken)))


def test_launch_buttons_open_committed_notebooks(pages):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    owner_repo = urllib.parse.urlsplit(config["repository"]["url"]).path.strip("/")
    branch = config["repository"]["branch"]
    pattern = re.compile(
        rf"https://colab\.research\.google\.com/github/{re.escape(owner_repo)}/blob/"
        rf"{re.escape(branch)}/(?P<path>[^\"'?#]+)"
    )
    seen = 0
    for page, collector in pages.items():
        for _, url in collector.links:
            match = pattern.match(url)
            if match:
                seen += 1
                path = ROOT / match["path"]
                assert path.suffix == ".ipynb" and path.exists(), f"{page.name}: Colab button opens missing {path}"
    chapters = list((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    assert seen >= len(chapters), f"found {seen} Colab buttons for {len(chapters)} chapters"
