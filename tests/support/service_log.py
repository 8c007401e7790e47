"""What a service process wrote in its JSON log, read back from the file it goes to."""

from __future__ import annotations

import json
from pathlib import Path


def logged_endpoints(log: Path) -> dict[str, str] | None:
    """The endpoints a service logged with "service ready" (its ``/api/v1/info``
    ``endpoints``, the admin URL among them: the ports it bound, port 0 given), or None
    while it has not logged them. Lines that are not JSON (a JVM's, say) are skipped."""
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("msg") == "service ready":
            endpoints: dict[str, str] = entry["endpoints"]
            return endpoints
    return None
