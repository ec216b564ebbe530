"""The package version (also in pyproject.toml).

In a module of its own so that provenance can read it without importing the package.
"""

__version__ = "0.1.0"
