"""The package version (read by pyproject.toml and shown by ``companion --version``)."""

__version__ = "0.2.0"
