"""The package version, in one place (read by ``pyproject.toml``, the cache and the CLI)."""

__version__ = "0.2.0"
