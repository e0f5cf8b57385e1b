"""Deprecated alias of :mod:`companion.experiments.scoring` (the module moved there); import from the new path."""

from .experiments.scoring import *  # noqa: F401,F403
from .experiments.scoring import __all__  # noqa: F401
