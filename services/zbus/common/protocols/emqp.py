"""eMQP/1.0, the EventMQ job protocol: a sans-I/O codec.

Every message, after the ROUTER identity frame the transport takes off, is::

    [b"", b"eMQP/1.0", COMMAND, msgid, ...command frames]

The empty frame 0 and the version frame 1 are listed by the spec in every command table,
so they belong to the codec (ADR 0001). ``docs/protocols/emqp.md`` lists every layout and
every decision taken where the spec is silent; the short version:

- The spec dialect (:data:`SPEC`) follows the eMQP tables. :data:`EVENTMQ` is what
  eventmq 0.3.13 sends: JSON INFORM queues, a JSON call body on REQUEST and SCHEDULE,
  and the commands ACK, KBYE, SCHEDULE and UNSCHEDULE that the spec does not list.
- Trailing frames that eventmq appends (the INFORM client type, the worker REPLY's
  request id, the HEARTBEAT time) are optional fields: ``None`` means the spec's shorter
  layout, so they decode and encode the same way in every dialect.
- Headers are eventmq's comma-separated text (``reply-requested,retry-count:1``), the only
  encoding any peer uses for the spec's "dictionary of headers".

The codec is split by what each part does; this module re-exports all of it:

- :mod:`~zbus.common.protocols.emqp_commands`: the command dataclasses, their union
  :data:`EmqpCommand`, and the constants and type aliases they use.
- :mod:`~zbus.common.protocols.emqp_decode`: :class:`Dialect`, :data:`SPEC`,
  :data:`EVENTMQ` and :func:`decode`.
- :mod:`~zbus.common.protocols.emqp_encode`: :func:`encode`.
- :mod:`~zbus.common.protocols.emqp_eventmq`: eventmq's header text, JSON call body
  (:class:`EventmqCall`) and worker result helpers.
"""

from __future__ import annotations

from zbus.common.protocols import emqp_commands, emqp_decode, emqp_encode, emqp_eventmq
from zbus.common.protocols.emqp_commands import *  # noqa: F403
from zbus.common.protocols.emqp_decode import *  # noqa: F403
from zbus.common.protocols.emqp_encode import *  # noqa: F403
from zbus.common.protocols.emqp_eventmq import *  # noqa: F403

# Each part's __all__ is the one list of its public names.
__all__ = []
__all__ += emqp_commands.__all__
__all__ += emqp_decode.__all__
__all__ += emqp_encode.__all__
__all__ += emqp_eventmq.__all__
