"""The version of zbus, reported by every service's admin API and metrics."""

__version__ = "0.1.0"
