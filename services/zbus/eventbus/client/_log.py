"""The logger of the event bus clients."""

from __future__ import annotations

import logging

__all__ = ["log"]

# The client's records keep the name of the public module, zbus.eventbus.client:
# log shipping skips that logger's tree (services/zbus/runtime/logship.py), since shipping the
# client's own warnings through the client would feed on itself.
log = logging.getLogger("zbus.eventbus.client")
