"""Info REPLY bodies in the shape a Hermes client reads.

A Hermes client (PyPI ``Hermes-lnestelroad`` 1.0.2, ``Client.get_services``) reads
``reply[name]`` for one service, the whole reply for the list, and takes a reply with
an ``"Error"`` key as "no such service". Its broker stores each service's REGISTRATION
body less the name, so a service is ``{interfaces, reg_time, topics}``. The catalog
answers an info REQUEST written in float32 time (only Hermes writes it) in that shape;
every other REQUEST gets zbus's shape (``catalog.py``).
"""

from __future__ import annotations

import time

from zbus.catalog.core.model import NodeRecord
from zbus.common.protocols.dbp import JSONObject

__all__ = ["hermes_error", "hermes_view"]


def hermes_view(record: NodeRecord) -> JSONObject:
    """One service as Hermes's broker describes it: its information less the name.

    A node that registered in zbus's shape also gets the keys a Hermes client uses: its
    ``ip`` and ``port`` as the ``router`` interface (``Client.request_from_service``
    connects there), ``reg_time`` (``time.asctime`` of the registration, UTC) and
    ``topics`` (null unless it registered some).
    """
    view = {key: value for key, value in record.info.items() if key != "name"}
    if "interfaces" not in view and "ip" in view and "port" in view:
        view["interfaces"] = {"router": {"ip": view["ip"], "port": view["port"]}}
    view.setdefault("reg_time", time.asctime(time.gmtime(record.registered_at)))
    view.setdefault("topics", None)
    return view


def hermes_error(query: str) -> JSONObject:
    """The reply for a name that is not an active service: Hermes's ``{"Error": text}``
    with the spec's "inactive warning" as the text."""
    return {"Error": f"inactive: {query!r} is not an active service"}
