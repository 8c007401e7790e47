"""Which mc0 connections a topic reaches: exact topics and subtrees (ADR 0005), sans-I/O.

mc0 topics are exact strings (``"mcollective nodes"``), and a subscription to one gets
that topic only: an MCollective agent subscribed to ``"mcollective rpcutil"`` must not
get the requests of ``"mcollective rpcutil2"``. Bus topics are paths, and an Event BUS
subscription is a subtree. A subscription that is empty or ends with ``/`` is therefore
a subtree (every topic that begins with it, as on the Event BUS doors; ``""`` is every
topic); any other is exact.
"""

from __future__ import annotations


def is_subtree(topic: str) -> bool:
    """True when a subscription to ``topic`` matches a subtree rather than one topic."""
    return not topic or topic.endswith("/")


class TopicIndex:
    """Subscriptions by topic, of connections named by their ROUTER identity."""

    def __init__(self) -> None:
        self._exact: dict[str, set[bytes]] = {}
        self._subtrees: dict[str, set[bytes]] = {}
        self._subtree_tuple: tuple[str, ...] = ()
        self.count = 0  # (connection, topic) pairs

    def add(self, identity: bytes, topic: str) -> None:
        table = self._subtrees if is_subtree(topic) else self._exact
        holders = table.setdefault(topic, set())
        if identity not in holders:
            holders.add(identity)
            self.count += 1
            if table is self._subtrees and len(holders) == 1:
                self._subtree_tuple = tuple(self._subtrees)

    def remove(self, identity: bytes, topic: str) -> None:
        table = self._subtrees if is_subtree(topic) else self._exact
        holders = table.get(topic)
        if holders is None or identity not in holders:
            return
        holders.discard(identity)
        self.count -= 1
        if not holders:
            del table[topic]
            if table is self._subtrees:
                self._subtree_tuple = tuple(self._subtrees)

    def __bool__(self) -> bool:
        return self.count > 0

    def match(self, topic: str) -> set[bytes] | frozenset[bytes]:
        """The connections subscribed to ``topic``, each once (do not modify the result)."""
        exact = self._exact.get(topic)
        if not self._subtree_tuple or not topic.startswith(self._subtree_tuple):
            return exact if exact is not None else frozenset()
        out = set(exact) if exact is not None else set()
        for prefix, holders in self._subtrees.items():
            if topic.startswith(prefix):
                out |= holders
        return out


__all__ = ["TopicIndex", "is_subtree"]
