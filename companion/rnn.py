"""Deprecated alias of :mod:`companion.experiments.rnn` (the module moved there); import from the new path."""

from .experiments.rnn import *  # noqa: F401,F403
from .experiments.rnn import __all__  # noqa: F401
