"""GrpcConnection/GrpcSession rules against a scripted in-memory gRPC host (h2 server side).

Each test plays the host by hand: it answers the calls the client makes with exactly the
messages the test wants, in the order it wants, on Trio's virtual clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
import trio
import trio.testing
from google.protobuf.message import Message

import codemode_trio as cm
from codemode_trio.grpc import GrpcSettings
from codemode_trio.grpc import codemode_pb2 as pb
from codemode_trio.grpc.connection import open_grpc_stream
from codemode_trio.grpc.framing import MessageDecoder, encode_message

OK_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
SESSION = "00000000-0000-4000-8000-000000000001"


class FakeHost:
    """The server end of one HTTP/2 connection; calls arrive in ``self.calls``."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.initiate_connection()
        self.calls_send, self.calls = trio.open_memory_channel[tuple[str, int, bytes]](100)
        self._paths: dict[int, str] = {}
        self._decoders: dict[int, MessageDecoder] = {}

    async def serve_fake_host(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        await self.flush()
        task_status.started()
        while data := await self.stream.receive_some(65536):
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    path = dict(event.headers or [])[b":path"].decode().rsplit("/", 1)[1]
                    self._paths[event.stream_id or 0] = path
                    self._decoders[event.stream_id or 0] = MessageDecoder()
                elif isinstance(event, h2.events.DataReceived):
                    stream_id = event.stream_id or 0
                    self.h2.acknowledge_received_data(event.flow_controlled_length or 0, stream_id)
                    for message in self._decoders[stream_id].feed(event.data or b""):
                        self.calls_send.send_nowait((self._paths[stream_id], stream_id, message))
            await self.flush()

    async def flush(self) -> None:
        if data := self.h2.data_to_send():
            await self.stream.send_all(data)

    async def next_call(self, method: str) -> tuple[int, bytes]:
        name, stream_id, body = await self.calls.receive()
        assert name == method
        return stream_id, body

    async def send(self, stream_id: int, message: Message, *, headers: bool = False) -> None:
        if headers:
            self.h2.send_headers(stream_id, OK_HEADERS)
        self.h2.send_data(stream_id, encode_message(message.SerializeToString()))
        await self.flush()

    async def open_headers(self, stream_id: int) -> None:
        self.h2.send_headers(stream_id, OK_HEADERS)
        await self.flush()

    async def reply(self, stream_id: int, message: Message) -> None:
        await self.send(stream_id, message, headers=True)
        self.h2.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)
        await self.flush()


@asynccontextmanager
async def session_on_fake_host(
    delegate: Any = None,
) -> AsyncIterator[tuple[cm.GrpcConnection, cm.GrpcSession, FakeHost, int, int]]:
    """A connection and an open session; yields the lease and subscription stream ids."""
    client_stream, server_stream = trio.testing.memory_stream_pair()
    host = FakeHost(server_stream)
    settings = GrpcSettings(keepalive_interval=None, heartbeat_interval_s=None)
    async with trio.open_nursery() as nursery:
        await nursery.start(host.serve_fake_host)
        async with open_grpc_stream(client_stream, settings=settings) as conn:
            opened: list[cm.GrpcSession] = []

            async def open_session() -> None:
                opened.append(await conn.start_session(delegate))

            nursery.start_soon(open_session)
            lease, _ = await host.next_call("OpenSession")
            await host.send(
                lease, pb.SessionEvent(opened=pb.SessionOpened(session_id=SESSION)), headers=True
            )
            subscription, body = await host.next_call("SubscribeToToolCalls")
            assert pb.SubscribeToToolCallsRequest.FromString(body).session_id == SESSION
            await host.open_headers(subscription)
            await trio.testing.wait_all_tasks_blocked()
            yield conn, opened[0], host, lease, subscription
            nursery.cancel_scope.cancel()


def tool_call(invocation: str, cell: str = "1") -> pb.ToolCall:
    return pb.ToolCall(
        session_id=SESSION,
        execution_id="e",
        cell_id=cell,
        invocation_id=invocation,
        runtime_tool_call_id=f"tool-{invocation}",
        tool_name=pb.ToolName(name="echo"),
        tool_kind=pb.TOOL_KIND_FUNCTION,
        input_json=b'{"value": 1}',
        sequence=1,
    )


async def test_a_session_waits_for_its_subscription_before_it_is_usable() -> None:
    async with session_on_fake_host() as (conn, session, _, _, _):
        assert session.session_id == SESSION
        assert conn.statistics().sessions == 1


async def test_a_wait_the_host_never_answers_fails_the_connection_at_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with session_on_fake_host() as (conn, session, host, _, _):
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed) as info:
            await session.wait("1", yield_time_ms=1_000)
        assert trio.current_time() - start == pytest.approx(1 + 1 + 60)
        assert str(info.value) == "gRPC code-mode host timed out waiting for wait response"
        assert conn.failure == str(info.value)
        _, body = await host.next_call("Wait")
        assert pb.WaitRequest.FromString(body).yield_time_ms == 1_000


async def test_a_cancellation_that_overtakes_its_tool_call_keeps_it_from_the_delegate() -> None:
    calls: list[int] = []
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(value: int) -> int:
        calls.append(value)
        return value

    async with session_on_fake_host(tools) as (_, _, host, lease, subscription):
        cancelled = pb.ToolCallCancelled(invocation_id="early")
        await host.send(lease, pb.SessionEvent(tool_call_cancelled=cancelled))
        await trio.testing.wait_all_tasks_blocked()
        await host.send(subscription, tool_call("early"))
        await host.send(subscription, tool_call("later"))
        stream_id, body = await host.next_call("CompleteToolCall")
        completion = pb.CompleteToolCallRequest.FromString(body)
        assert completion.invocation_id == "later"
        assert completion.succeeded.output_json == b"1"
        await host.reply(stream_id, pb.CompleteToolCallResponse())
        await trio.testing.wait_all_tasks_blocked()
        assert calls == [1]  # "early" never reached the delegate
        assert host.calls.statistics().current_buffer_used == 0  # and was never answered


async def test_a_cancelled_tool_call_is_revoked_and_never_answered() -> None:
    started = trio.Event()
    revoked = trio.Event()
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(value: int) -> int:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            revoked.set()

    async with session_on_fake_host(tools) as (conn, _, host, lease, subscription):
        await host.send(subscription, tool_call("slow"))
        await started.wait()
        assert conn.statistics().active_delegates == 1
        cancelled = pb.ToolCallCancelled(invocation_id="slow")
        await host.send(lease, pb.SessionEvent(tool_call_cancelled=cancelled))
        await revoked.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert conn.statistics().active_delegates == 0
        assert host.calls.statistics().current_buffer_used == 0


async def test_heartbeats_and_calls_of_closed_cells_do_not_reach_the_delegate() -> None:
    seen: list[str] = []
    closed: list[str] = []
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(value: int) -> int:
        seen.append("call")
        return value

    @tools.on_cell_closed
    def on_closed(cell_id: str) -> None:
        closed.append(cell_id)

    async with session_on_fake_host(tools) as (_, session, host, lease, subscription):
        await host.send(subscription, pb.ToolCall(session_id=SESSION, heartbeat=pb.Heartbeat()))
        closed_event = pb.CellClosed(execution_id="e", cell_id="9", final_tool_call_sequence=0)
        await host.send(lease, pb.SessionEvent(cell_closed=closed_event))
        await trio.testing.wait_all_tasks_blocked()
        await host.send(subscription, tool_call("late", cell="9"))
        await trio.testing.wait_all_tasks_blocked()
        assert session.heartbeats == 1
        assert seen == []
        assert closed == []  # a cell this session never started is not reported


async def close_on_fake_host(session: cm.GrpcSession, host: FakeHost, lease: int) -> None:
    """``session.aclose()``, the host answering CloseSession and ending the lease stream."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.aclose)
        close, _ = await host.next_call("CloseSession")
        await host.reply(close, pb.CloseSessionResponse())
        host.h2.send_headers(lease, [(b"grpc-status", b"0")], end_stream=True)
        await host.flush()


async def test_closing_a_session_revokes_a_shielded_tool_call_without_awaiting_or_answering_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    started = trio.Event()
    finished = trio.Event()
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(value: int) -> int:
        started.set()
        with trio.CancelScope(shield=True):
            await trio.sleep(600)  # far past every deadline of the close
        finished.set()
        return value

    async with session_on_fake_host(tools) as (conn, session, host, lease, subscription):
        await host.send(subscription, tool_call("slow"))
        await started.wait()
        await close_on_fake_host(session, host, lease)
        assert trio.current_time() < 1  # the close did not wait for the delegate
        assert session.cleaned_up and conn.alive
        assert conn.statistics().active_delegates == 0
        await finished.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert host.calls.statistics().current_buffer_used == 0  # its result was never sent


async def test_a_shielded_notify_revoked_by_the_close_is_not_acknowledged(
    autojump_clock: trio.abc.Clock,
) -> None:
    notified = trio.Event()
    finished = trio.Event()

    class SlowNotify(cm.ToolRegistry):
        async def notify(self, notification: cm.Notification) -> None:
            notified.set()
            with trio.CancelScope(shield=True):
                await trio.sleep(600)
            finished.set()

    async with session_on_fake_host(SlowNotify()) as (conn, session, host, lease, _):
        note = pb.Notification(
            notification_id="n1", execution_id="e", cell_id="1", call_id="c", text="hi"
        )
        await host.send(lease, pb.SessionEvent(notification=note))
        await notified.wait()
        await close_on_fake_host(session, host, lease)
        assert trio.current_time() < 1
        assert session.cleaned_up and conn.alive
        await finished.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert host.calls.statistics().current_buffer_used == 0


async def test_an_error_of_the_callers_block_escapes_as_itself_not_in_a_group() -> None:
    class Mine(Exception):
        pass

    client_stream, server_stream = trio.testing.memory_stream_pair()
    host = FakeHost(server_stream)
    settings = GrpcSettings(keepalive_interval=None, heartbeat_interval_s=None)
    async with trio.open_nursery() as nursery:
        await nursery.start(host.serve_fake_host)
        with pytest.raises(Mine):
            async with open_grpc_stream(client_stream, settings=settings):
                raise Mine
        nursery.cancel_scope.cancel()


async def test_a_tool_result_the_host_never_acknowledges_fails_the_connection_at_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(value: int) -> int:
        await trio.sleep(100)  # longer than the transport timeout: the delegate is not bounded
        return value

    async with session_on_fake_host(tools) as (conn, _, host, _, subscription):
        start = trio.current_time()
        await host.send(subscription, tool_call("unanswered"))
        _, body = await host.next_call("CompleteToolCall")
        assert pb.CompleteToolCallRequest.FromString(body).succeeded.output_json == b"1"
        assert trio.current_time() - start == pytest.approx(100)
        assert conn.alive
        with trio.fail_after(120):
            await conn.wait_failed()
        assert trio.current_time() - start == pytest.approx(100 + 60)
        assert conn.failure == "gRPC code-mode host timed out waiting for CompleteToolCall response"


async def test_an_undecodable_tool_call_is_the_hosts_fault_and_fails_the_connection() -> None:
    async with session_on_fake_host(cm.ToolRegistry()) as (conn, session, host, _, subscription):
        host.h2.send_data(subscription, encode_message(b"\xff\xff\xff"))
        await host.flush()
        await session.wait_cleaned_up()
        assert conn.failure is not None
        assert conn.failure.startswith("invalid ToolCall message from the host")
