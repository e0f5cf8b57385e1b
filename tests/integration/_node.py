"""Node for the tests of the in-page translator's scripts (web/translator/*.js)."""

from __future__ import annotations

import os
import shutil

import pytest


def node(script: str) -> str:
    """The path of ``node``; without it the test is skipped (under CI it fails: these tests must run there).
    ``script`` names what needs Node, for the message."""
    path = shutil.which("node")
    if path is None:
        reason = f"node is not on PATH; the in-page {script} needs Node to be tested"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (under CI these tests must run)")
        pytest.skip(reason)
    return path
