"""The Trio HTTP/2 client and gRPC calls against an in-memory ``h2`` server.

The server side is python-hyper's ``h2`` driven by hand over ``memory_stream_pair``, so each
test decides exactly which frames the client sees and checks exactly which frames it sends.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hyperframe.frame
import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.grpc import StatusCode
from codemode_trio.grpc import codemode_pb2 as pb
from codemode_trio.grpc.calls import GrpcChannel
from codemode_trio.grpc.framing import encode_message
from codemode_trio.grpc.http2 import Http2Connection, Http2Settings, open_http2_connection

OK_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]


class Server:
    """The server end: feed it what the client wrote, get h2 events, send frames."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.initiate_connection()
        self.pending: list[h2.events.Event] = []
        self.received = bytearray()  # every byte the client wrote

    async def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def next_event(self, kind: type[h2.events.Event]) -> h2.events.Event:
        """Read until an event of ``kind`` arrives; skip the others."""
        while True:
            while self.pending:
                event = self.pending.pop(0)
                if isinstance(event, kind):
                    return event
            data = await self.stream.receive_some(65536)
            assert data, "the client closed the connection"
            self.received += data
            self.pending.extend(self.h2.receive_data(data))
            await self.flush()

    async def respond(self, stream_id: int, body: bytes, *, status: int = 0) -> None:
        self.h2.send_headers(stream_id, OK_HEADERS)
        if body:
            self.h2.send_data(stream_id, body)
        self.h2.send_headers(stream_id, [(b"grpc-status", str(status).encode())], end_stream=True)
        await self.flush()


@asynccontextmanager
async def client_and_server(
    settings: Http2Settings | None = None,
) -> AsyncIterator[tuple[Http2Connection, GrpcChannel, Server]]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    server = Server(server_stream)
    await server.flush()
    settings = settings or Http2Settings(keepalive_interval=None)
    async with open_http2_connection(client_stream, settings) as http2:
        await http2.wait_ready()
        channel = GrpcChannel(http2, authority="test", service="codex.code_mode.v1.CodeModeHost")
        yield http2, channel, server


async def test_a_unary_call_sends_grpc_headers_and_reads_the_reply() -> None:
    async with client_and_server() as (_, channel, server), trio.open_nursery() as nursery:
        result: list[pb.SessionOpened] = []

        async def call() -> None:
            result.append(
                await channel.unary(
                    "Wait", pb.CloseSessionRequest(session_id="s"), pb.SessionOpened
                )
            )

        nursery.start_soon(call)
        request = await server.next_event(h2.events.RequestReceived)
        headers = dict(request.headers or [])
        assert headers[b":path"] == b"/codex.code_mode.v1.CodeModeHost/Wait"
        assert headers[b"content-type"] == b"application/grpc"
        assert headers[b"te"] == b"trailers"
        data = await server.next_event(h2.events.DataReceived)
        assert data.data == encode_message(
            pb.CloseSessionRequest(session_id="s").SerializeToString()
        )
        reply = pb.SessionOpened(session_id="abc").SerializeToString()
        await server.respond(request.stream_id or 0, encode_message(reply))
    assert result == [pb.SessionOpened(session_id="abc")]


async def test_a_trailers_only_error_is_a_status_error_and_the_connection_lives() -> None:
    async with client_and_server() as (http2, channel, server), trio.open_nursery() as nursery:
        errors: list[cm.GrpcStatusError] = []

        async def call() -> None:
            with pytest.raises(cm.GrpcStatusError) as info:
                await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)
            errors.append(info.value)

        nursery.start_soon(call)
        request = await server.next_event(h2.events.RequestReceived)
        server.h2.send_headers(
            request.stream_id or 0,
            [*OK_HEADERS, (b"grpc-status", b"5"), (b"grpc-message", b"no%20such%20cell")],
            end_stream=True,
        )
        await server.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert (errors[0].code, str(errors[0])) == (StatusCode.NOT_FOUND, "no such cell")
        assert isinstance(errors[0], cm.HostError)
        assert http2.failure is None


async def test_received_data_is_acknowledged_only_when_consumed() -> None:
    settings = Http2Settings(stream_window=1000, keepalive_interval=None)
    async with client_and_server(settings) as (http2, _, server):
        stream = await http2.start_request(
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/x"),
                (b":authority", b"t"),
            ],
            b"",
        )
        request = await server.next_event(h2.events.RequestReceived)
        stream_id = request.stream_id or 0
        server.h2.send_headers(stream_id, OK_HEADERS)
        server.h2.send_data(stream_id, b"x" * 1000)  # the whole window
        await server.flush()
        assert server.h2.local_flow_control_window(stream_id) == 0
        await trio.testing.wait_all_tasks_blocked()
        # The client has the bytes but nobody consumed them: no WINDOW_UPDATE, no room.
        with trio.move_on_after(0.05):
            await server.next_event(h2.events.WindowUpdated)
            pytest.fail("the window was opened before the data was consumed")
        assert await stream.receive_headers() == OK_HEADERS
        assert await stream.receive_data() == b"x" * 1000
        update = await server.next_event(h2.events.WindowUpdated)
        assert update.stream_id in (0, stream_id)
        while server.h2.local_flow_control_window(stream_id) < 1000:
            await server.next_event(h2.events.WindowUpdated)
        stream.reset()


async def test_a_cancelled_call_resets_its_stream_and_others_go_on() -> None:
    async with client_and_server() as (http2, channel, server), trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def call() -> None:
            with scope:
                await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)

        nursery.start_soon(call)
        request = await server.next_event(h2.events.RequestReceived)
        scope.cancel()
        reset = await server.next_event(h2.events.StreamReset)
        assert reset.stream_id == request.stream_id
        assert reset.error_code == h2.errors.ErrorCodes.CANCEL
        assert http2.failure is None
        assert http2.open_streams == 0


async def test_goaway_refuses_unprocessed_streams_and_new_calls() -> None:
    async with client_and_server() as (_, channel, server), trio.open_nursery() as nursery:
        outcomes: dict[str, BaseException | pb.SessionOpened] = {}

        async def call(name: str) -> None:
            try:
                outcomes[name] = await channel.unary(
                    "Wait", pb.CloseSessionRequest(session_id=name), pb.SessionOpened
                )
            except cm.CodeModeError as exc:
                outcomes[name] = exc

        nursery.start_soon(call, "first")
        first = await server.next_event(h2.events.RequestReceived)
        nursery.start_soon(call, "second")
        await server.next_event(h2.events.RequestReceived)
        # Only the first stream was processed; the second must be retried elsewhere.
        server.h2.close_connection(last_stream_id=first.stream_id or 0)
        await server.flush()
        await trio.testing.wait_all_tasks_blocked()
        second = outcomes["second"]
        assert isinstance(second, cm.GrpcStatusError) and second.code == StatusCode.UNAVAILABLE
        with pytest.raises(cm.ConnectionFailed, match="GOAWAY"):
            await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)
        assert "first" not in outcomes  # still waiting for its answer
        nursery.cancel_scope.cancel()


async def test_a_compressed_reply_fails_the_connection_as_the_hosts_fault() -> None:
    async with client_and_server() as (http2, channel, server), trio.open_nursery() as nursery:

        async def call() -> None:
            with pytest.raises(cm.HostProtocolViolation, match="compression flag"):
                await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)

        nursery.start_soon(call)
        request = await server.next_event(h2.events.RequestReceived)
        await server.respond(request.stream_id or 0, b"\x01\x00\x00\x00\x00")
    assert http2.failure is not None and "compression flag" in http2.failure


async def test_an_unanswered_ping_fails_the_connection(autojump_clock: trio.abc.Clock) -> None:
    settings = Http2Settings(keepalive_interval=10, keepalive_timeout=5)
    async with client_and_server(settings) as (http2, channel, server):
        start = trio.current_time()
        # The server stops reading, so it never acknowledges a PING.
        reason = await http2.wait_failed()
        assert trio.current_time() - start == pytest.approx(15)
        assert reason == "code-mode host did not answer an HTTP/2 PING within 5 s"
        with pytest.raises(cm.ConnectionFailed, match="PING"):
            await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)
        assert server.h2 is not None


async def test_answered_pings_keep_the_connection_alive(autojump_clock: trio.abc.Clock) -> None:
    settings = Http2Settings(keepalive_interval=10, keepalive_timeout=5)
    async with client_and_server(settings) as (http2, _, server):
        with trio.move_on_after(100):
            while True:  # the server reads (and so acknowledges every PING)
                await server.next_event(h2.events.ConnectionTerminated)
        assert http2.failure is None
        assert http2.pings_sent >= 9


async def test_the_peer_closing_the_stream_fails_every_waiter_with_one_reason() -> None:
    async with client_and_server() as (http2, channel, server), trio.open_nursery() as nursery:
        errors: list[BaseException] = []

        async def call() -> None:
            try:
                await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)
            except cm.ConnectionFailed as exc:
                errors.append(exc)

        for _ in range(3):
            nursery.start_soon(call)
        for _ in range(3):
            await server.next_event(h2.events.RequestReceived)
        await server.stream.aclose()
    assert [str(e) for e in errors] == ["code-mode host closed the connection"] * 3
    assert len({id(e) for e in errors}) == 3  # one instance per caller
    assert http2.failure == "code-mode host closed the connection"


def header_blocks(data: bytes) -> list[bytes]:
    """The HPACK blocks of the HEADERS frames in what the client wrote (after its preface)."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    assert data.startswith(preface)
    view = memoryview(data)[len(preface) :]
    blocks = []
    while len(view) >= 9:
        frame, length = hyperframe.frame.Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9 : 9 + length])
        if isinstance(frame, hyperframe.frame.HeadersFrame):
            blocks.append(bytes(frame.data))
        view = view[9 + length :]
    return blocks


async def test_request_headers_leave_the_hpack_table_alone_and_signal_its_size_changes() -> None:
    async with client_and_server() as (_, channel, server), trio.open_nursery() as nursery:

        async def exchange(method: str) -> dict[bytes, bytes]:
            nursery.start_soon(channel.unary, method, pb.CloseSessionRequest(), pb.SessionOpened)
            request = await server.next_event(h2.events.RequestReceived)
            await server.respond(request.stream_id or 0, encode_message(b""))
            return dict(request.headers or [])

        paths = [(await exchange(method))[b":path"] for method in ("Wait", "Terminate", "Wait")]
        assert paths == [
            b"/codex.code_mode.v1.CodeModeHost/" + m for m in (b"Wait", b"Terminate", b"Wait")
        ]
        wait, terminate, wait_again = header_blocks(server.received)
        # Nothing was indexed: the same headers are the same bytes whatever came between.
        assert wait == wait_again != terminate
        server.h2.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0})
        await server.flush()
        await trio.testing.wait_all_tasks_blocked()  # the client has the new setting
        assert (await exchange("Wait"))[b":method"] == b"POST"
        assert (await exchange("Wait"))[b":method"] == b"POST"
        resized, after = header_blocks(server.received)[3:]
        assert resized == b"\x20" + wait  # a dynamic table size update to 0, first
        assert after == wait


async def test_what_the_socket_cannot_take_at_once_is_written_later_in_order() -> None:
    client_socket, server_socket = trio.socket.socketpair()
    for sock in (client_socket, server_socket):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server_stream = trio.SocketStream(server_socket)
    server = Server(server_stream)
    big = 1 << 31 - 1
    server.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: big})
    server.h2.increment_flow_control_window(big - 65535)
    await server.flush()
    settings = Http2Settings(keepalive_interval=None)
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/x"),
        (b":authority", b"t"),
    ]
    client_stream = trio.SocketStream(client_socket)
    async with server_stream, open_http2_connection(client_stream, settings) as http2:
        await http2.wait_ready()
        await trio.testing.wait_all_tasks_blocked()
        bodies = [bytes([n]) * 300_000 for n in (1, 2)]
        # Far more than the socket buffers hold: the writer task has the rest.
        first = await http2.start_request(headers, bodies[0])
        # Room in the socket before the writer ran: the next request must still wait its turn.
        data = os.read(server_socket.fileno(), 65536)
        server.received += data
        server.pending.extend(server.h2.receive_data(data))
        second = await http2.start_request(headers, bodies[1])
        assert (first.stream_id, second.stream_id) == (1, 3)
        received: dict[int, bytearray] = {1: bytearray(), 3: bytearray()}
        ended: list[int] = []
        while len(ended) < 2:
            event = await server.next_event(h2.events.Event)
            if isinstance(event, h2.events.DataReceived):
                received[event.stream_id or 0] += event.data or b""
                server.h2.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id or 0
                )
            elif isinstance(event, h2.events.StreamEnded):
                ended.append(event.stream_id or 0)
        assert ended == [1, 3]
        assert [bytes(received[1]), bytes(received[3])] == bodies
        assert http2.failure is None


async def test_consume_hands_over_each_message_and_a_failing_handler_abandons_the_call() -> None:
    async with client_and_server() as (http2, channel, server), trio.open_nursery() as nursery:
        seen: list[str] = []

        def handler(message: pb.SessionOpened) -> None:
            if message.session_id == "bad":
                raise ValueError("not this one")
            seen.append(message.session_id)

        async def consume() -> None:
            async with channel.server_stream(
                "OpenSession", pb.OpenSessionRequest(), pb.SessionOpened
            ) as call:
                with pytest.raises(ValueError, match="not this one"):
                    await call.consume(handler)

        nursery.start_soon(consume)
        request = await server.next_event(h2.events.RequestReceived)
        stream_id = request.stream_id or 0
        server.h2.send_headers(stream_id, OK_HEADERS)
        for name in ("a", "b", "bad", "never"):
            message = pb.SessionOpened(session_id=name).SerializeToString()
            server.h2.send_data(stream_id, encode_message(message))
            await server.flush()
            await trio.testing.wait_all_tasks_blocked()
        reset = await server.next_event(h2.events.StreamReset)
        assert reset.stream_id == stream_id
        assert seen == ["a", "b"]
        assert http2.failure is None


async def test_an_error_status_fails_a_call_at_once_even_if_the_stream_stays_open() -> None:
    async with client_and_server() as (http2, channel, server), trio.open_nursery() as nursery:
        errors: list[cm.HostProtocolViolation] = []

        async def call() -> None:
            with pytest.raises(cm.HostProtocolViolation) as info:
                await channel.unary("Wait", pb.CloseSessionRequest(), pb.SessionOpened)
            errors.append(info.value)

        nursery.start_soon(call)
        request = await server.next_event(h2.events.RequestReceived)
        server.h2.send_headers(request.stream_id or 0, [(b":status", b"503")])  # and nothing more
        await server.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert [str(e) for e in errors] == [
            "code-mode host answered a gRPC call with HTTP status b'503'"
        ]
        assert http2.failure == str(errors[0])
