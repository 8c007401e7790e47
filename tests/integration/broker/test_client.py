"""The broker clients on real sockets, against the broker's client port played by the test.

:class:`ClientPort` is a ROUTER in a thread that decodes each REQUEST with the codec and
answers as a test's ``policy`` says (ACK, results, nothing, garbage), so both the blocking
and the asyncio client are tested as they talk to the broker of ADR 0003.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

import pytest
import zmq
import zmq.asyncio

from tests.support.waiting import UNIT, wait_until
from zbus.broker.client import (
    DIALECT,
    NO_PATH,
    AsyncBrokerClient,
    BrokerClient,
    BrokerUnavailable,
    JobFailed,
)
from zbus.common.protocols import emqp

Policy = Callable[["ClientPort", emqp.Request], list[list[bytes]]]


def ack(request: emqp.Request) -> list[bytes]:
    return emqp.encode(emqp.Ack("ack-" + request.msgid, request.msgid), DIALECT)


def result(job_id: str, value: Any) -> list[bytes]:
    return emqp.encode(emqp.Reply("r-" + job_id, emqp.build_reply_value(value), job_id), DIALECT)


def failure(job_id: str, state: str, kind: str, message: str) -> list[bytes]:
    body = json.dumps({"error": {"type": kind, "message": message}, "state": state}).encode()
    return emqp.encode(emqp.Reply("r-" + job_id, body, job_id), DIALECT)


def args_of(request: emqp.Request) -> tuple[Any, ...]:
    return emqp.parse_call_body(request.body).args


def sums(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
    """Store, then answer with the sum of the arguments."""
    return [ack(request), result(request.msgid, sum(args_of(request)))]


def acks_only(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
    return [ack(request)]


def silent(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
    return []


class ClientPort:
    """The broker's client ROUTER, answering each REQUEST as ``policy`` says."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.requests: list[emqp.Request] = []
        self.held: list[tuple[bytes, emqp.Request]] = []  # unanswered while holding
        self.hold = False
        self.max_outstanding = 0
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.linger = 0
        self._sock.bind("tcp://127.0.0.1:0")
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        sock = self._sock
        request: emqp.EmqpCommand
        while not self._stop.is_set():
            if not self.hold and self.held:
                for identity, request in self.held:
                    self._answer(identity, request)
                self.held.clear()
            if not sock.poll(10):
                continue
            identity, *frames = sock.recv_multipart()
            request = emqp.decode(frames, DIALECT)
            assert isinstance(request, emqp.Request), request
            self.requests.append(request)
            if self.hold:
                self.held.append((identity, request))
                self.max_outstanding = max(self.max_outstanding, len(self.held))
            else:
                self.max_outstanding = max(self.max_outstanding, 1)
                self._answer(identity, request)

    def _answer(self, identity: bytes, request: emqp.Request) -> None:
        for frames in self.policy(self, request):
            self._sock.send_multipart([identity, *frames])

    def __enter__(self) -> ClientPort:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close(linger=0)
        self._ctx.term()


class Driven:
    """An :class:`AsyncBrokerClient` called like a :class:`BrokerClient`: each coroutine
    method runs to its end on the client's own event loop, so that one test exercises
    both clients."""

    def __init__(self, client: AsyncBrokerClient, runner: asyncio.Runner) -> None:
        self._client = client
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: self._runner.run(attr(*args, **kwargs))
        return attr


Connect = Callable[..., AbstractContextManager[BrokerClient]]


@pytest.fixture(params=["blocking", "asyncio"])
def connect(request: pytest.FixtureRequest) -> Connect:
    """Opens a client of either kind: ``connect(endpoint, ack_timeout=..., **options)``."""

    @contextmanager
    def blocking(endpoint: str, ack_timeout: float = 5.0, **options: Any) -> Iterator[BrokerClient]:
        ctx = zmq.Context()
        try:
            with BrokerClient(
                endpoint, ack_timeout=ack_timeout * UNIT, context=ctx, **options
            ) as client:
                yield client
        finally:
            ctx.term()

    @contextmanager
    def driven(endpoint: str, ack_timeout: float = 5.0, **options: Any) -> Iterator[BrokerClient]:
        ctx = zmq.asyncio.Context()
        runner = asyncio.Runner()
        client = AsyncBrokerClient(endpoint, ack_timeout=ack_timeout * UNIT, context=ctx, **options)
        try:
            yield cast(BrokerClient, Driven(client, runner))
        finally:
            runner.run(client.aclose())
            runner.close()
            ctx.term()

    return blocking if request.param == "blocking" else driven


def client_for(
    connect: Connect, port: ClientPort, ack_timeout: float = 5.0
) -> AbstractContextManager[BrokerClient]:
    return connect(port.endpoint, ack_timeout)


# ------------------------------------------------------- both clients, called alike


def test_submit_is_acknowledged_then_the_result_arrives(connect: Connect) -> None:
    with ClientPort(sums) as port, client_for(connect, port) as client:
        job_id = client.submit("default", "add", args=[2, 3])
        assert client.pending_acks == 0
        assert client.result(job_id, timeout=5 * UNIT) == 5

        mine = client.submit(
            "reports", "add", args=[1], kwargs={"x": 1}, path="app.jobs", job_id="job-1",
            retries=2, timeout=10, delay=0.5,
        )  # fmt: skip
        assert mine == "job-1"
        assert client.result("job-1", timeout=5 * UNIT) == 1

    first, second = port.requests
    assert first.msgid == job_id and first.queue == "default"
    assert first.headers == (("reply-requested", ""),)
    call = emqp.parse_call_body(first.body)
    assert (call.callable, call.path, call.args, call.kwargs) == ("add", NO_PATH, (2, 3), {})
    assert second.queue == "reports"
    assert second.headers == (
        ("reply-requested", ""),
        ("retry-count", "2"),
        ("timeout", "10"),
        ("delay", "0.5"),
    )
    call = emqp.parse_call_body(second.body)
    assert (call.callable, call.path, call.kwargs) == ("add", "app.jobs", {"x": 1})


def test_an_error_body_raises_job_failed(connect: Connect) -> None:
    def dies(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
        return [ack(request), failure(request.msgid, "dead", "TimeoutError", "ran over 1s")]

    with ClientPort(dies) as port, client_for(connect, port) as client:
        job_id = client.submit("default", "slow")
        with pytest.raises(JobFailed) as caught:
            client.result(job_id, timeout=5 * UNIT)
        assert (caught.value.job_id, caught.value.state) == (job_id, "dead")
        assert (caught.value.error_type, caught.value.message) == ("TimeoutError", "ran over 1s")
        # Handed out once: the failure is not kept after being raised.
        with pytest.raises(TimeoutError):
            client.result(job_id, timeout=0.05 * UNIT)


def test_no_result_in_time_raises_timeout_error(connect: Connect) -> None:
    with ClientPort(acks_only) as port, client_for(connect, port) as client:
        job_id = client.submit("default", "never")
        with pytest.raises(TimeoutError, match=job_id):
            client.result(job_id, timeout=0.2 * UNIT)


def test_results_for_other_jobs_are_kept_for_later(connect: Connect) -> None:
    def later(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
        if len(port.requests) == 1:
            return [ack(request)]
        first = port.requests[0].msgid
        return [ack(request), result(first, "first"), result(request.msgid, "second")]

    with ClientPort(later) as port, client_for(connect, port) as client:
        first = client.submit("default", "a")
        second = client.submit("default", "b")
        assert client.result(second, timeout=5 * UNIT) == "second"
        # Arrived while waiting for the second job: no waiting now.
        assert client.result(first, timeout=0) == "first"


def test_pipelined_submits_keep_at_most_window_jobs_unacknowledged(connect: Connect) -> None:
    with ClientPort(sums) as port, client_for(connect, port) as client:
        port.hold = True
        ids: list[str] = []
        submitting = threading.Thread(
            target=lambda: ids.extend(
                client.submit_many("default", "add", ([i, 1] for i in range(200)), window=5)
            )
        )
        submitting.start()
        wait_until(lambda: len(port.requests) == 5, what="the first window")
        port.hold = False  # the held ACKs go out, and every later one at once
        submitting.join(10 * UNIT)
        assert not submitting.is_alive()
        assert port.max_outstanding == 5
        assert len(ids) == len(set(ids)) == 200
        assert [r.msgid for r in port.requests] == ids
        assert client.pending_acks == 0
        assert [client.result(j, timeout=5 * UNIT) for j in ids] == [i + 1 for i in range(200)]

        # The primitives: send without waiting, then wait for every ACK.
        more = [client.submit_nowait("default", "add", args=[i]) for i in range(50)]
        assert client.wait_acks() == []
        assert [client.result(j, timeout=5 * UNIT) for j in more] == list(range(50))


def test_refused_jobs_are_reported_by_submit_and_wait_acks(connect: Connect) -> None:
    def refuses(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
        if request.msgid.startswith("bad"):
            return [failure(request.msgid, "rejected", "QueueFullError", "broker full")]
        return sums(port, request)

    with ClientPort(refuses) as port, client_for(connect, port) as client:
        with pytest.raises(JobFailed) as caught:
            client.submit("default", "add", job_id="bad-1")
        assert (caught.value.state, caught.value.error_type) == ("rejected", "QueueFullError")

        # Held until wait_acks runs: it lists the refused jobs among those it waits for
        # (an asyncio client's reader may take answers as soon as its loop runs).
        port.hold = True
        good = client.submit_nowait("default", "add", args=[1])
        client.submit_nowait("default", "add", job_id="bad-2")
        wait_until(lambda: len(port.requests) == 3, what="both requests")
        port.hold = False
        assert client.wait_acks() == ["bad-2"]
        assert client.result(good, timeout=5 * UNIT) == 1
        with pytest.raises(JobFailed, match="rejected"):
            client.result("bad-2", timeout=0)


def test_no_ack_raises_broker_unavailable(connect: Connect) -> None:
    with ClientPort(silent) as port, client_for(connect, port, ack_timeout=0.2) as client:
        with pytest.raises(BrokerUnavailable) as caught:
            client.submit("default", "noop", job_id="job-9")
        assert caught.value.job_ids == ["job-9"]
        assert client.pending_acks == 0

        client.submit_nowait("default", "noop", job_id="job-10")
        with pytest.raises(BrokerUnavailable) as caught:
            client.wait_acks()
        assert caught.value.job_ids == ["job-10"]
        assert client.pending_acks == 1  # still pending: a later wait may see it answered

    # Nobody listening at all.
    with (
        socket_port() as endpoint,
        connect(endpoint, ack_timeout=0.2) as c,
        pytest.raises(BrokerUnavailable),
    ):
        c.submit("default", "noop")


@contextmanager
def socket_port() -> Iterator[str]:
    """An endpoint where nothing listens (a port bound, then released)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(linger=0)
    ctx.term()
    yield f"tcp://127.0.0.1:{port}"


def test_malformed_and_unexpected_messages_are_counted_and_dropped(connect: Connect) -> None:
    def noisy(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
        job_id = request.msgid
        return [
            [b"garbage"],
            [b"", b"eMQP/1.0", b"REPLY", b"r1", b"not json", job_id.encode()],
            emqp.encode(emqp.Ready("x"), DIALECT),  # a worker's command
            emqp.encode(emqp.Reply("h", job_id.encode()), DIALECT),  # eventmq's hand-off
            emqp.encode(emqp.Heartbeat("hb"), DIALECT),
            ack(request),
            result(job_id, "ok"),
        ]

    with ClientPort(noisy) as port, client_for(connect, port) as client:
        job_id = client.submit("default", "noop")
        assert client.result(job_id, timeout=5 * UNIT) == "ok"
        assert client.counters == {
            "malformed": 2,
            "unexpected": 1,
            "handoffs": 1,
            "results_dropped": 0,
        }


def test_kept_results_are_bounded(connect: Connect) -> None:
    with ClientPort(sums) as port, connect(port.endpoint, max_results=3) as client:
        ids = client.submit_many("default", "add", [[i] for i in range(5)])
        assert client.result(ids[4], timeout=5 * UNIT) == 4  # the last to arrive
        assert client.counters["results_dropped"] == 2
        with pytest.raises(TimeoutError):
            client.result(ids[0], timeout=0)
        assert client.result(ids[2], timeout=0) == 2


def test_bad_arguments_are_refused_before_sending(connect: Connect) -> None:
    with ClientPort(sums) as port, client_for(connect, port) as client:
        with pytest.raises(TypeError, match="JSON"):
            client.submit("default", "add", args=[object()])
        with pytest.raises(ValueError, match="retries"):
            client.submit("default", "add", retries=-1)
        with pytest.raises(ValueError, match="timeout"):
            client.submit("default", "add", timeout=float("nan"))
        with pytest.raises(TypeError, match="unknown job options: colour"):
            client.submit("default", "add", colour="red")  # type: ignore[call-arg]
        assert client.pending_acks == 0
    assert port.requests == []


# --------------------------------------------------------------------------- asyncio only


async def test_async_client_submits_and_waits() -> None:
    def mixed(port: ClientPort, request: emqp.Request) -> list[list[bytes]]:
        if emqp.parse_call_body(request.body).callable == "fail":
            return [ack(request), failure(request.msgid, "failed", "ValueError", "no")]
        return sums(port, request)

    with ClientPort(mixed) as port:
        async with AsyncBrokerClient(port.endpoint) as client:
            assert (
                await client.submit_and_wait("default", "add", args=[4, 5], timeout=5 * UNIT) == 9
            )
            with pytest.raises(JobFailed) as caught:
                await client.submit_and_wait("default", "fail", timeout=5 * UNIT)
            assert (caught.value.state, caught.value.message) == ("failed", "no")

            # Many coroutines at once on one client: one reader hands each its answer.
            values = await asyncio.gather(
                *(
                    client.submit_and_wait("default", "add", args=[i], timeout=5 * UNIT)
                    for i in range(50)
                )
            )
            assert values == list(range(50))

            ids = await client.submit_many("default", "add", ([i, i] for i in range(300)))
            assert client.pending_acks == 0
            got = [await client.result(j, timeout=5 * UNIT) for j in ids]
            assert got == [2 * i for i in range(300)]
            assert client.counters["malformed"] == 0


async def test_async_client_timeouts() -> None:
    with ClientPort(silent) as port:
        async with AsyncBrokerClient(port.endpoint, ack_timeout=0.2 * UNIT) as client:
            with pytest.raises(BrokerUnavailable):
                await client.submit("default", "noop", job_id="j1")
            await client.submit_nowait("default", "noop", job_id="j2")
            with pytest.raises(BrokerUnavailable) as caught:
                await client.wait_acks()
            assert caught.value.job_ids == ["j2"]

    with ClientPort(acks_only) as port:
        async with AsyncBrokerClient(port.endpoint) as client:
            job_id = await client.submit("default", "noop")
            with pytest.raises(TimeoutError):
                await client.result(job_id, timeout=0.1 * UNIT)
