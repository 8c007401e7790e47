"""CURVE on service ports with a ZAP allow-list of client public keys."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from tests.support.echo_service import EchoService, EchoSettings
from tests.support.running import start_service
from tests.support.waiting import UNIT
from zbus.common.security import generate_keys, load_keys, make_client
from zbus.common.settings import ConfigError


async def _run(service: EchoService) -> asyncio.Task[None]:
    return await start_service(service)


async def _handshake(
    ctx: zmq.asyncio.Context, endpoint: str, client_key: Path, server: Path
) -> int:
    """Connect a CURVE client; return the monitor event that ends its handshake."""
    sock = ctx.socket(zmq.DEALER)
    make_client(sock, load_keys(client_key), load_keys(server).public)
    monitor = sock.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    )
    sock.connect(endpoint)
    try:
        event = await asyncio.wait_for(recv_monitor_message(monitor), 10 * UNIT)
        if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            await sock.send_multipart([b"ping"])
            assert await asyncio.wait_for(sock.recv_multipart(), 10 * UNIT) == [b"ping"]
        return int(event["event"])
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


async def test_only_allowed_client_keys_pass(tmp_path: Path) -> None:
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    _, server_secret = generate_keys(keys, "server")
    good_public, good_secret = generate_keys(keys, "good")
    _, bad_secret = generate_keys(keys, "intruder")
    allowed.mkdir()
    (allowed / "good.key").write_bytes(good_public.read_bytes())

    service = EchoService(
        EchoSettings(
            data_dir=tmp_path / "data",
            curve_secret_key=server_secret,
            curve_allowed_clients=allowed,
        )
    )
    task = await _run(service)
    ctx = zmq.asyncio.Context()
    try:
        endpoint = service.endpoints["echo"]
        assert await _handshake(ctx, endpoint, good_secret, server_secret) == (
            zmq.EVENT_HANDSHAKE_SUCCEEDED
        )
        assert await _handshake(ctx, endpoint, bad_secret, server_secret) == (
            zmq.EVENT_HANDSHAKE_FAILED_AUTH
        )
    finally:
        ctx.term()
        service.request_stop()
        await asyncio.wait_for(task, 10 * UNIT)


async def test_allow_list_without_a_server_key_is_a_config_error(tmp_path: Path) -> None:
    service = EchoService(EchoSettings(data_dir=tmp_path, curve_allowed_clients=tmp_path))
    with pytest.raises(ConfigError, match="needs curve_secret_key"):
        await asyncio.wait_for(service.run(), 10 * UNIT)


def test_a_missing_key_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load CURVE key file"):
        load_keys(tmp_path / "nope.key_secret")
