"""Deprecated alias of :mod:`companion.experiments.lm` (the module moved there); import from the new path."""

from .experiments.lm import *  # noqa: F401,F403
from .experiments.lm import __all__  # noqa: F401
