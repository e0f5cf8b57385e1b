"""Fixtures for the tests of the built website (`_build/html`), run by `make test` after the strict build."""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import shutil
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "artifacts" / "screenshots"


def pytest_collection_modifyitems(config, items):
    if not (HTML / "index.html").exists():
        skip = pytest.mark.skip(reason="no built site in _build/html: run `make site` first")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def html_root() -> pathlib.Path:
    return HTML


@pytest.fixture(scope="session")
def site_url():
    """Serve `_build/html` on a free loopback port for the whole session."""
    handler = functools.partial(QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


def chromium_path() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is None:
        message = "Chromium is not installed (Debian: apt-get install chromium; or set CHROMIUM=/path/to/it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=path,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def screenshot_dir() -> pathlib.Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
