"""What a listener's worker does with its one connection, and how a request head is read.

In-process over memory streams, with the scripted runtime of ``conftest`` and Trio's mock
clock: the hello deadline, the one line a connection's end is worth, and the request head the
``ws://`` listener routes by.
"""

from __future__ import annotations

import io

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.faults import parse_faults
from codemode_trio.host.admission import Accept, AdmissionPolicy, Respond, admit
from codemode_trio.host.httphead import MAX_HEAD_BYTES, read_request_head, upgrade_response
from codemode_trio.host.supervisor import policy_from_message, policy_message
from codemode_trio.host.worker import HELLO_TIMEOUT_S, serve_client
from codemode_trio.protocol import ConnectionHello, encode_client_frame
from codemode_trio.transport.wsframes import accept_key

from .conftest import Served

LABEL = "connection 7 from 127.0.0.1:5000"


async def test_a_client_that_never_says_hello_is_closed_at_the_deadline(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    client, host = trio.testing.memory_stream_pair()
    log = io.StringIO()
    start = trio.current_time()
    with trio.fail_after(HELLO_TIMEOUT_S * 2):
        status = await serve_client(host, served.runtime, label=LABEL, log=log)
    assert status is None
    assert trio.current_time() - start == pytest.approx(HELLO_TIMEOUT_S)
    assert await client.receive_some() == b""  # closed
    assert log.getvalue() == f"{LABEL}: no hello within 10 s; closed\n"


async def test_the_log_line_names_the_listeners_whole_allowance(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    _, host = trio.testing.memory_stream_pair()
    log = io.StringIO()
    start = trio.current_time()
    await serve_client(host, served.runtime, label=LABEL, hello_timeout=1.5, hello_limit=4, log=log)
    assert trio.current_time() - start == pytest.approx(1.5)
    assert log.getvalue() == f"{LABEL}: no hello within 4 s; closed\n"


async def test_half_a_hello_is_no_hello(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    client, host = trio.testing.memory_stream_pair()
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    await client.send_all(hello[: len(hello) // 2])
    log = io.StringIO()
    with trio.fail_after(HELLO_TIMEOUT_S * 2):
        assert await serve_client(host, served.runtime, label=LABEL, log=log) is None
    assert "no hello within 10 s" in log.getvalue()


async def test_a_client_that_said_hello_in_time_is_served_past_the_deadline(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def answer(hooks: object, tools: object) -> str | None:
        hooks.emit(cm.TextItem("late"))  # type: ignore[attr-defined]
        return None

    client, host = trio.testing.memory_stream_pair()
    log = io.StringIO()
    status: list[int | None] = []

    async def host_side() -> None:
        status.append(await serve_client(host, served.runtime, label=LABEL, log=log))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host_side)
        async with cm.open_connection(client) as conn, conn.open_session() as session:
            await trio.sleep(HELLO_TIMEOUT_S * 5)
            assert (await session.run("answer")).text == "late"
    assert status == [0]
    assert log.getvalue() == ""  # a clean end is not worth a line


async def test_a_protocol_violation_is_one_line_with_its_cause(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    client, host = trio.testing.memory_stream_pair()
    log = io.StringIO()
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    await client.send_all(hello + b"\x05\x00\x00\x00nope!")
    assert await serve_client(host, served.runtime, label=LABEL, log=log) == 1
    (line,) = log.getvalue().splitlines()
    assert line.startswith(f"{LABEL}: ended with status 1: Error: ")


async def test_a_fault_that_ends_the_connection_is_named_once(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    client, host = trio.testing.memory_stream_pair()
    log = io.StringIO()

    async def host_side() -> None:
        await serve_client(
            host, served.runtime, label=LABEL, faults=parse_faults("drop-after=1"), log=log
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host_side)
        with pytest.raises(cm.ConnectionFailed):
            async with cm.open_connection(client) as conn, conn.open_session():
                pass
    assert log.getvalue() == f"{LABEL}: fault injected: drop-after=1\n"


def _upgrade(path: str = "/") -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        "Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


async def test_a_request_head_keeps_every_byte_read_and_what_followed() -> None:
    client, host = trio.testing.memory_stream_pair()
    request = _upgrade("/bulk/abc?token=x")
    await client.send_all(request[:10])
    await client.send_all(request[10:] + b"\x82\x00")
    head = await read_request_head(host)
    assert head is not None
    assert head.raw == request + b"\x82\x00"
    assert head.rest == b"\x82\x00"
    assert head.path == "/bulk/abc"
    assert head.target == b"/bulk/abc?token=x"
    assert head.http_version == b"1.1"
    assert head.header(b"upgrade") == b"websocket"
    # The listener's admission reads it as it reads an h11 request.
    policy = AdmissionPolicy("127.0.0.1", 80, "x")
    decision = admit(head, policy)
    assert decision == Accept("/bulk/abc", True, "dGhlIHNhbXBsZSBub25jZQ==")
    answer = upgrade_response(decision.key)
    assert answer.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert f"Sec-WebSocket-Accept: {accept_key(decision.key)}\r\n".encode() in answer
    assert isinstance(admit(head, AdmissionPolicy("127.0.0.1", 80, "other")), Respond)


@pytest.mark.parametrize(
    "data",
    [b"\x16\x03\x01\x02\x00", b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * MAX_HEAD_BYTES, b""],
    ids=["tls-client-hello", "oversized", "nothing"],
)
async def test_what_is_not_a_whole_request_head_is_none(data: bytes) -> None:
    client, host = trio.testing.memory_stream_pair()
    await client.send_all(data)
    await client.send_eof()
    assert await read_request_head(host) is None


async def test_a_head_that_never_ends_waits_for_the_callers_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, host = trio.testing.memory_stream_pair()
    await client.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
    with trio.move_on_after(3) as scope:
        await read_request_head(host)
    assert scope.cancelled_caught


def test_a_worker_gets_the_admission_policy_it_was_sent() -> None:
    policy = AdmissionPolicy(
        "::1", 7070, "t0ken", ["https://app.example"], ["box.example"], secure=True
    )
    assert policy_from_message(policy_message(policy)) == policy
    assert policy_from_message({"address": "::1"}) is None
    assert policy_from_message("nope") is None
