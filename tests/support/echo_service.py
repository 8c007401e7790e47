"""A small real service on the zbus runtime: a ROUTER that echoes what it receives.

It exercises the service base exactly as the real services do (bound sockets, a reader
task, a drain hook, metrics, admin routes) and is what the runtime and launcher tests
start, in process or as ``python -m tests.support.echo_service``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

import zmq
from fastapi import FastAPI
from prometheus_client import Counter

from zbus.common.settings import ServiceSettings
from zbus.runtime.service import Service, run


class EchoSettings(ServiceSettings):
    port: int = 0
    fail_on: str = ""  # a message with this last frame makes the echo task fail (tests)


class EchoService(Service):
    name = "echo"

    def __init__(self, settings: EchoSettings, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.port = settings.port
        self.fail_on = settings.fail_on.encode()
        self.echoed = Counter("zbus_echo_messages", "Messages echoed", registry=self.registry)
        self.drained = asyncio.Event()

    async def start(self) -> None:
        self.router = self.bind(zmq.ROUTER, "echo", self.port)

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return [self._serve()]

    async def _serve(self) -> None:
        while True:
            frames = await self.router.recv_multipart()
            if self.fail_on and frames[-1] == self.fail_on:
                raise RuntimeError("echo failed on request")
            await self.router.send_multipart(frames)
            self.echoed.inc()

    async def drain(self) -> None:
        self.drained.set()

    def add_routes(self, app: FastAPI) -> None:
        @app.get("/api/v1/echo/count")
        async def count() -> dict[str, float | None]:
            return {"echoed": self.registry.get_sample_value("zbus_echo_messages_total")}


def main(argv: Sequence[str] | None = None) -> None:
    import sys

    run(EchoService, EchoSettings, sys.argv[1:] if argv is None else argv)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
