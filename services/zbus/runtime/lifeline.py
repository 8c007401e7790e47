"""The lifeline: a pipe from the process that started the service, such as ``zbus up``.

The starter keeps the pipe's write end and the service gets the read end
(``ZBUS_LIFELINE_FD``). Nothing is ever written: when the starter ends, however it ends
(``kill -9`` too), the kernel closes the write end, the read end reports end of file, and
the service shuts down gracefully. Unlike a parent-death signal, it works on every
platform and whoever the parent is.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable

from zbus.common.settings import ConfigError

log = logging.getLogger(__name__)


def watch_lifeline(
    loop: asyncio.AbstractEventLoop, fd: int, on_gone: Callable[[], None]
) -> Callable[[], None]:
    """Call ``on_gone`` (once) when the pipe read through ``fd`` reaches end of file.

    Returns:
        A function that stops the watch.

    Raises:
        ConfigError: ``fd`` is not an open pipe or socket.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise ConfigError(f"lifeline_fd: file descriptor {fd} is not open") from None
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        raise ConfigError(f"lifeline_fd: file descriptor {fd} is not a pipe")
    os.set_inheritable(fd, False)  # the service's own children are not its lifeline
    os.set_blocking(fd, False)
    watching = True

    def unwatch() -> None:
        nonlocal watching
        if watching:
            watching = False
            loop.remove_reader(fd)

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return  # nothing is written on a lifeline; whatever is, means nothing
        unwatch()
        log.warning("the process that started this service is gone; shutting down")
        on_gone()

    loop.add_reader(fd, readable)
    return unwatch
