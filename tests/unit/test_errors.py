"""companion.errors: every deliberate error is a CompanionError and keeps the built-in class it used to be, so
that both ``except CompanionError`` (the command line) and ``except ValueError`` (older code) catch it."""

from __future__ import annotations

import inspect

import pytest

import companion
from companion import errors

# The documented hierarchy (companion/errors.py): each class's built-in base, or the package class it refines.
DOCUMENTED_BASES = {
    "CheckpointError": ValueError,  # "CheckpointError is still a ValueError"
    "DataUnavailableError": RuntimeError,
    "DeviceUnavailableError": RuntimeError,  # "(a RuntimeError)", companion.devices.resolve_device
    "TrainingDivergedError": FloatingPointError,
    "RunError": errors.CompanionError,
    "ConfigError": ValueError,  # "(a ValueError)", companion.devices.resolve_device
    "PretrainedUnavailableError": RuntimeError,
    "NonFiniteOutputError": FloatingPointError,
    "RunLockedError": errors.RunError,
    "DataError": ValueError,
}


def test_all_lists_the_base_class_and_every_documented_error():
    assert errors.__all__[0] == "CompanionError"
    assert sorted(errors.__all__[1:]) == sorted(DOCUMENTED_BASES)
    defined = {name for name, value in vars(errors).items() if inspect.isclass(value) and issubclass(value, Exception)}
    assert defined == set(errors.__all__)  # nothing defined there is left out of __all__


def test_the_base_class_is_a_plain_exception():
    assert errors.CompanionError.__bases__ == (Exception,)


@pytest.mark.parametrize("name", sorted(DOCUMENTED_BASES))
def test_each_error_is_a_companion_error_and_keeps_its_builtin_class(name):
    error_class = getattr(errors, name)
    assert issubclass(error_class, errors.CompanionError)
    assert issubclass(error_class, DOCUMENTED_BASES[name])
    assert error_class.__doc__ and error_class.__doc__.strip()
    # raised, it is caught both ways, and carries its message
    for caught in (errors.CompanionError, DOCUMENTED_BASES[name]):
        with pytest.raises(caught, match="^what went wrong$"):
            raise error_class("what went wrong")


@pytest.mark.parametrize("name", sorted(DOCUMENTED_BASES))
def test_each_error_is_only_what_its_documentation_says(name):
    """No error is also some other built-in class by accident (a RunError is not a ValueError, and so on)."""
    error_class = getattr(errors, name)
    builtin_bases = {ValueError, RuntimeError, FloatingPointError, TypeError, OSError, KeyError, LookupError}
    for other in builtin_bases:
        assert issubclass(error_class, other) == issubclass(DOCUMENTED_BASES[name], other), other


def test_the_package_exports_the_same_classes():
    for name in errors.__all__:
        assert getattr(companion, name) is getattr(errors, name)
        assert name in companion.__all__
