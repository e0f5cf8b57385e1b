"""Deprecated alias of :mod:`companion.experiments.length_generalization` (the module moved there); import from
the new path."""

from .experiments.length_generalization import *  # noqa: F401,F403
from .experiments.length_generalization import __all__  # noqa: F401
