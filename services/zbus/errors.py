"""The one base class of every error zbus raises to its users."""

from __future__ import annotations

__all__ = ["ZbusError"]


class ZbusError(Exception):
    """Base of every zbus error: ``except zbus.ZbusError`` catches them all.

    Each error also derives from the standard exception a caller would expect where
    there is one (``ValueError`` for bad input, ``ConnectionError`` for an unreachable
    server, ``LookupError`` for something not found).
    """
