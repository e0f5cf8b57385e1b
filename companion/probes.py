"""Deprecated alias of :mod:`companion.experiments.probes` (the module moved there); import from the new path."""

from .experiments.probes import *  # noqa: F401,F403
from .experiments.probes import __all__  # noqa: F401
