"""Deprecated alias of :mod:`companion.experiments.analysis` (the module moved there); import from the new path."""

from .experiments.analysis import *  # noqa: F401,F403
from .experiments.analysis import __all__  # noqa: F401
