"""Deprecated alias of :mod:`companion.experiments.lookup` (the module moved there); import from the new path."""

from .experiments.lookup import *  # noqa: F401,F403
from .experiments.lookup import __all__  # noqa: F401
