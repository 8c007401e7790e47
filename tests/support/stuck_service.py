"""A process that never becomes ready and watches nothing: what a service is while it
still imports its libraries (the sparkworker's PySpark takes seconds). Only a signal
stops it; the launcher tests start it as ``python -m tests.support.stuck_service``."""

from __future__ import annotations

import signal

if __name__ == "__main__":
    while True:
        signal.pause()
