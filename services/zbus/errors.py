"""The one base class of every error zbus raises to its users, and the errors shared by
every part (kept here, with no third-party import, so that ``import zbus`` stays light)."""

from __future__ import annotations

__all__ = ["ConfigError", "ZbusError"]


class ZbusError(Exception):
    """Base of every zbus error: ``except zbus.ZbusError`` catches them all.

    Each error also derives from the standard exception a caller would expect where
    there is one (``ValueError`` for bad input, ``ConnectionError`` for an unreachable
    server, ``LookupError`` for something not found).
    """


class ConfigError(ZbusError, ValueError):
    """A configuration value that cannot be used; the message says which and why."""
