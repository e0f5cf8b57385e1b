"""The package's own exceptions, all under one base class :class:`CompanionError`.

Each keeps the built-in class it used to be (``CheckpointError`` is still a ``ValueError``, and so on), so
``except ValueError`` written against earlier versions keeps working, while ``except CompanionError`` catches
every error that ``companion`` raises on purpose (the command line catches exactly these; anything else is a
bug and keeps its traceback).
"""

from __future__ import annotations

__all__ = [
    "CompanionError",
    "CheckpointError",
    "DataUnavailableError",
    "DeviceUnavailableError",
    "TrainingDivergedError",
    "RunError",
    "ConfigError",
    "PretrainedUnavailableError",
    "NonFiniteOutputError",
    "RunLockedError",
    "DataError",
]


class CompanionError(Exception):
    """Base class of every error that ``companion`` raises deliberately."""


class CheckpointError(CompanionError, ValueError):
    """A checkpoint file is unreadable (truncated, corrupt, not a checkpoint) or does not fit the model."""


class DataUnavailableError(CompanionError, RuntimeError):
    """Multi30k could be found neither in a local folder nor on the (reachable) Hugging Face hub."""


class DeviceUnavailableError(CompanionError, RuntimeError):
    """The requested device (CUDA, MPS) is not available on this machine."""


class TrainingDivergedError(CompanionError, FloatingPointError):
    """Training produced a non-finite loss, gradient or parameter.

    A non-finite loss or gradient is caught before the update (the weights are left as before that step); an
    update that made the weights non-finite marks the Trainer ``diverged`` and nothing is saved from them.
    """


class RunError(CompanionError):
    """A training, translation or evaluation run cannot start or continue (bad folder, options, or state)."""


class ConfigError(CompanionError, ValueError):
    """An option of a run (a flag, or a field of :class:`companion.runs.RunConfig`) has a value it cannot take."""


class PretrainedUnavailableError(CompanionError, RuntimeError):
    """The book's pretrained model is not on this machine and could not be downloaded."""


class NonFiniteOutputError(CompanionError, FloatingPointError):
    """A model produced inf or nan scores (its weights are broken), so decoding cannot choose a token."""


class RunLockedError(RunError):
    """Another live process holds the lock of the run folder (``DIR/.lock``)."""


class DataError(CompanionError, ValueError):
    """A data file is unreadable or malformed (truncated or corrupt gzip, bytes that are not UTF-8, files that
    are not line-aligned, no sentence pairs); the message names the file and, where there is one, the line."""
