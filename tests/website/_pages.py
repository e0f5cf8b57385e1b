"""Helpers shared by the browser tests."""

from __future__ import annotations

import urllib.parse


def guard_page(page) -> tuple[list[str], list[str]]:
    """Make ``page`` record JavaScript errors and abort (and record) every request off localhost.

    Returns ``(errors, outside)``; the two lists fill as the page runs.
    """
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
    return errors, outside


def open_offline_page(browser):
    """A new page guarded by :func:`guard_page`; returns ``(page, errors, outside)``."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, outside = guard_page(page)
    return page, errors, outside
