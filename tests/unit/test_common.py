"""Pure pieces of the runtime: settings precedence, log lines, the manual clock."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from zbus.common.clock import ManualClock, SteppableClock
from zbus.common.logs import JsonFormatter
from zbus.common.settings import ConfigError, ServiceSettings


class DemoSettings(ServiceSettings):
    port: int = 5556


def test_cli_flags_win_over_environment_over_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DemoSettings.load([]).port == 5556
    monkeypatch.setenv("ZBUS_PORT", "6000")
    assert DemoSettings.load([]).port == 6000
    assert DemoSettings.load(["--port", "7000"]).port == 7000
    assert DemoSettings.load(["--data-dir", "/srv/zbus"]).data_dir == Path("/srv/zbus")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "abc"], "port: Input should be a valid integer"),
        (["--admin-port", "-1"], "admin_port: Input should be greater than or equal to 0"),
        (["--log-level", "LOUD"], "log_level"),
        (["--shutdown-timeout", "0"], "shutdown_timeout"),
        (["--no-such-flag", "1"], "unrecognized arguments"),
    ],
)
def test_bad_settings_name_the_field(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DemoSettings.load(argv)


def test_bad_environment_value_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZBUS_PORT", "five")
    with pytest.raises(ConfigError, match="port"):
        DemoSettings.load()


def test_the_registered_name_is_the_service_s_or_node_name_with_the_host_s_name() -> None:
    import socket

    assert DemoSettings.load([]).registered_name("demo") == "demo"
    assert DemoSettings.load(["--node-name", "demo-2"]).registered_name("demo") == "demo-2"
    # Replicas of one container image differ by their host names.
    scaled = DemoSettings.load(["--node-name", "worker-{hostname}"])
    assert scaled.registered_name("demo") == f"worker-{socket.gethostname()}"


def test_log_lines_are_single_json_objects_with_extra_fields() -> None:
    record = logging.LogRecord(
        "zbus.test", logging.WARNING, __file__, 1, "bad %s", ("frame",), None
    )
    record.reason = "malformed"
    record.color_message = "\x1b[36mbad frame\x1b[0m"  # uvicorn's; not a field
    line = JsonFormatter("eventbus").format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "warning"
    assert entry["service"] == "eventbus"
    assert entry["msg"] == "bad frame"
    assert entry["reason"] == "malformed"
    assert "color_message" not in entry
    assert entry["ts"].endswith("Z")


def test_exceptions_stay_on_one_line() -> None:
    try:
        raise ValueError("multi\nline")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter("svc").format(record)
    assert "\n" not in line
    assert "ValueError" in json.loads(line)["exc"]


def test_manual_clock_moves_only_forward_when_told() -> None:
    clock = ManualClock(start=100.0)
    assert (clock.time(), clock.monotonic()) == (100.0, 0.0)
    clock.advance(2.5)
    assert (clock.time(), clock.monotonic()) == (102.5, 2.5)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)


def test_manual_clock_steps_wall_time_either_way_and_leaves_monotonic_time() -> None:
    clock = ManualClock(start=100.0)
    clock.step(3600.0)
    assert (clock.time(), clock.monotonic()) == (3700.0, 0.0)
    clock.step(-7200.0)
    assert (clock.time(), clock.monotonic()) == (-3500.0, 0.0)


def test_steppable_clock_moves_wall_time_only() -> None:
    clock = SteppableClock()
    mono, wall = clock.monotonic(), clock.time()
    clock.step(-3600.0)
    assert clock.time() < wall - 3500.0
    assert mono <= clock.monotonic() < mono + 60.0


def test_recv_frames_takes_one_whole_message_as_send_frames_sent_it() -> None:
    import zmq

    from zbus.common.wire import recv_frames, send_frames

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://zbus-wire-test")
        b.connect("inproc://zbus-wire-test")
        with pytest.raises(zmq.Again):
            recv_frames(b)
        send_frames(a, [b"", b"MESSAGE", b"TOPIC", b"t", b"", bytes(300)])
        send_frames(a, [b"one"])
        assert b.poll(10_000)
        assert recv_frames(b) == [b"", b"MESSAGE", b"TOPIC", b"t", b"", bytes(300)]
        assert recv_frames(b) == [b"one"]
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


def test_refusals_are_logged_within_the_limit_and_the_list_emptied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from zbus.common.rejects import LogLimiter, log_refusals

    limiter = LogLimiter(per_second=2)
    refusals = [(b"\x01\x02", "bad_value", f"detail {i}") for i in range(5)]
    logger = logging.getLogger("zbus.test.refusals")
    with caplog.at_level(logging.WARNING, logger="zbus.test.refusals"):
        log_refusals(refusals, limiter, logger, "door message refused", 0.0)
    assert refusals == []
    records = [r for r in caplog.records if r.name == "zbus.test.refusals"]
    assert [r.getMessage() for r in records] == ["door message refused"] * 2
    assert [(r.peer, r.reason, r.error) for r in records] == [  # type: ignore[attr-defined]
        ("0102", "bad_value", "detail 0"),
        ("0102", "bad_value", "detail 1"),
    ]
    assert limiter.suppressed == 3
