"""The package version, in a leaf module (results and the CLI record it; nothing here imports)."""

__version__ = "0.1.0"
