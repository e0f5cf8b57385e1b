"""``python -m companion``: runs the command line of :mod:`companion.cli` (train, translate, evaluate)."""

from __future__ import annotations

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
