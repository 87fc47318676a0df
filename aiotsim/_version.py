"""The package version, in a module of its own so that any layer can read it without importing
the package's top level (which exposes the API and so depends on every layer)."""

__version__ = "0.1.0"
