"""A subscriber in a process of its own, for tests that stop it (SIGSTOP) and go on.

``python -m tests.support.bus_subscriber <info json> <prefix> <last>``: subscribes to
``prefix`` on the bus that ``info`` (``/api/v1/info``'s endpoints) names, prints ``live``
once the first event came through, reads until the sequence ``last``, then prints one
JSON line: the sequences received are 1..last in order (``exact``), how many were
repaired from the log, and how many events came through.
"""

from __future__ import annotations

import json
import sys

from zbus.eventbus.client import BusEndpoints, EventBusClient


def main() -> None:
    info, prefix, last = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    with (
        EventBusClient(BusEndpoints.from_info(info), producer="subscriber") as client,
        client.subscribe(prefix) as sub,
    ):
        expected = 1
        exact = True
        for event in sub:
            if expected == 1:
                print("live", flush=True)
            exact = exact and event.seq == expected
            expected = event.seq + 1
            if event.seq >= last:
                break
        print(json.dumps({"exact": exact, "repaired": sub.repaired, "events": expected - 1}))


if __name__ == "__main__":
    main()
