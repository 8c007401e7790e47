"""A PPPP subscriber in a process of its own, for tests that kill it (SIGKILL).

``python -m tests.support.pppp_subscriber_proc <endpoint> <channel> <name> <out> <mode>``

Every message it takes is recorded in ``out`` as one row ``(sequence, uuid, sync,
topic)``:

- ``mode=store``: ``out`` is a SQLite file that is also its position store; each row is
  written in the same transaction as the position, so nothing is recorded twice;
- ``mode=plain``: ``out`` is a text file, one JSON line a message, written and flushed
  before the next message is asked for (which is what lets the subscriber ACK it).

It stops after 60 s without a message.
"""

from __future__ import annotations

import json
import sys

from zbus import PPPPSubscriber, SQLitePositionStore

TABLE = "CREATE TABLE IF NOT EXISTS got (seq INTEGER, uuid TEXT, sync INTEGER, topic TEXT)"


def main() -> None:
    endpoint, channel, name, out, mode = sys.argv[1:6]
    times = {"first_idle": 0.05, "idle": 0.25, "misses": 4}
    if mode == "store":
        store = SQLitePositionStore(out)
        store.connection.execute(TABLE)
        with PPPPSubscriber(endpoint, channel, name=name, store=store, **times) as sub:
            while (msg := sub.next(timeout=60)) is not None:
                with store.transaction() as db:
                    db.execute(
                        "INSERT INTO got VALUES (?, ?, ?, ?)",
                        (msg.sequence, msg.uuid, int(msg.sync), msg.topic),
                    )
                    store.save(msg.channel, msg.position)
        return
    with (
        open(out, "a", encoding="utf-8") as file,
        PPPPSubscriber(endpoint, channel, name=name, **times) as sub,
    ):
        while (msg := sub.next(timeout=60)) is not None:
            row = [msg.sequence, msg.uuid, int(msg.sync), msg.topic]
            file.write(json.dumps(row) + "\n")
            file.flush()


if __name__ == "__main__":
    main()
