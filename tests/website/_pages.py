"""Helpers shared by the browser tests."""

from __future__ import annotations

import urllib.parse


def open_offline_page(browser):
    """A new page that records JavaScript errors and aborts (and records) every request off localhost.

    Returns ``(page, errors, outside)``; the two lists fill as the page runs.
    """
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    outside: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)

    def guard(route):
        host = urllib.parse.urlsplit(route.request.url).hostname
        if host not in ("127.0.0.1", "localhost", None):
            outside.append(route.request.url)
            return route.abort()
        return route.continue_()

    page.route("**/*", guard)
    return page, errors, outside
