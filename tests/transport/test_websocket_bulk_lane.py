"""The ``dual-websocket-v1`` bulk lane, client side: pairing, its queue, and its failures.

The host here is :class:`~codemode_trio.protocol.host_protocol.HostProtocol` driven by the
test over in-memory streams (so the test decides when the host reads), or a small
trio-websocket server for what happens on the wire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio.testing
import trio_websocket

import codemode_trio as cm
from codemode_trio.connect.websocket import WEBSOCKET_CAPABILITIES
from codemode_trio.protocol import ConnectionReady, encode_host_frame
from codemode_trio.protocol.content import RuntimeResponse, TextItem, ToolDefinition
from codemode_trio.protocol.handshake import ALL_CAPABILITIES
from codemode_trio.protocol.host_protocol import (
    DelegateAnswered,
    ExecuteRequested,
    HelloReceived,
    HostEvent,
    HostProtocol,
    NeedData,
    SessionOpenRequested,
    ShutdownRequested,
)
from codemode_trio.protocol.lanes import DUAL_WEBSOCKET, Lane
from codemode_trio.protocol.messages import NotificationDelivered, ToolResult, WireOk
from codemode_trio.transport.websocket import bulk_websocket_url

RESULT_BYTES = 256 * 1024


class ScriptedHost:
    """The host side of a two-lane connection: the machine, and the test decides the rest."""

    def __init__(
        self, control: trio.abc.Stream, bulk: trio.abc.Stream, protocol: HostProtocol
    ) -> None:
        self.protocol = protocol
        self.control = control
        self.bulk = bulk
        self.cells: list[tuple[int, str]] = []  # (execute request id, cell id)
        self.unanswered: list[tuple[int, str]] = []
        self.answers: dict[int, object] = {}
        self._answered = trio.Event()
        self.answer_now: Callable[[int, str], bool] = lambda request_id, cell_id: False

    def apply(self) -> None:
        """Act on every event: accept the hello and sessions, start cells, keep answers."""
        while not isinstance(event := self.protocol.next_event(), NeedData):
            self.handle(event)

    def handle(self, event: HostEvent) -> None:
        if isinstance(event, HelloReceived):
            self.protocol.answer_hello()
        elif isinstance(event, SessionOpenRequested):
            self.protocol.accept_session(event.request_id)
        elif isinstance(event, ExecuteRequested):
            cell_id = self.protocol.start_cell(event.request_id)
            self.cells.append((event.request_id, cell_id))
            if self.answer_now(event.request_id, cell_id):
                self.protocol.send_initial_response(
                    event.request_id, RuntimeResponse("result", cell_id, (TextItem("done"),))
                )
            else:
                self.unanswered.append((event.request_id, cell_id))
        elif isinstance(event, ShutdownRequested):
            for request_id, cell_id in self.unanswered:
                self.protocol.send_initial_response(
                    request_id, RuntimeResponse("terminated", cell_id)
                )
            self.unanswered.clear()
            self.protocol.close_session(event.request_id)
        elif isinstance(event, DelegateAnswered):
            self.answers[int(event.delegate_id)] = event.result
            self._answered.set()
            self._answered = trio.Event()

    async def answer_on_control(self, delegate_id: int) -> object:
        """The answer to ``delegate_id``, once :meth:`serve_control` has read it."""
        while delegate_id not in self.answers:
            await self._answered.wait()
        return self.answers[delegate_id]

    async def flush(self) -> None:
        data = self.protocol.data_to_send()
        if data:
            await self.control.send_all(data)
        data = self.protocol.data_to_send(Lane.BULK)
        if data:
            await self.bulk.send_all(data)

    async def serve_control(self) -> None:
        while True:
            self.apply()
            await self.flush()
            data = await self.control.receive_some(1 << 20)
            if not data:
                return
            self.protocol.receive_data(data)

    async def read_bulk(self, until: Callable[[], bool]) -> None:
        while not until():
            self.protocol.receive_data(await self.bulk.receive_some(1 << 20), Lane.BULK)
            self.apply()


@asynccontextmanager
async def scripted_connection(
    config: cm.ConnectionConfig, protocol: HostProtocol | None = None
) -> AsyncIterator[tuple[ScriptedHost, cm.Connection]]:
    control_client, control_host = trio.testing.memory_stream_pair()
    # Lockstep: a write returns only once the other side reads it, so a host that does not
    # read the bulk lane really leaves the client's bulk writer stuck.
    bulk_client, bulk_host = trio.testing.lockstep_stream_pair()
    host = ScriptedHost(control_host, bulk_host, protocol or HostProtocol(bulk_token="token-1"))
    tokens: list[str] = []

    async def connect_bulk(token: str) -> trio.abc.Stream:
        tokens.append(token)
        return bulk_client

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host.serve_control)
        async with cm.open_connection(
            control_client,
            config=config,
            capabilities=WEBSOCKET_CAPABILITIES,
            connect_bulk=connect_bulk,
        ) as conn:
            assert tokens == ["token-1"]
            assert DUAL_WEBSOCKET in conn.capabilities
            yield host, conn
        nursery.cancel_scope.cancel()


def big_tools() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function(description="A large result, numbered")
    async def big(i: int) -> str:
        return f"{i:04d}" + "x" * RESULT_BYTES

    return tools


def small_tools() -> cm.ToolRegistry:
    """``big`` (the name the scripted calls use) with a small result, for many calls."""
    tools = cm.ToolRegistry()

    @tools.function(description="A small result, numbered")
    async def big(i: int) -> str:
        return f"{i:04d}"

    return tools


BIG = ToolDefinition("big", "A large result, numbered", {"type": "object"})


async def queue_results(host: ScriptedHost, cell_id: str, calls: range) -> None:
    for i in calls:
        host.protocol.call_tool("session-1", cell_id, BIG, {"i": i})
    await host.flush()
    await trio.testing.wait_all_tasks_blocked()


async def test_concurrent_large_delegate_results_do_not_disconnect_a_backpressured_bulk_lane() -> (
    None
):
    # The reference's control capacity (128); the bulk lane keeps its own 1024.
    config = cm.ConnectionConfig(outgoing_capacity=128)
    with trio.fail_after(30):
        async with (
            scripted_connection(config) as (host, conn),
            conn.open_session(big_tools(), session_id="session-1") as session,
        ):
            await session.execute("the host plays this cell")
            (_, cell_id) = host.cells[0]
            # One result goes first: the bulk writer takes it and is stuck writing it, since
            # the host does not read the bulk lane. 129 concurrent results then all queue.
            await queue_results(host, cell_id, range(1))
            await queue_results(host, cell_id, range(1, 130))
            assert conn.alive
            stats = conn.statistics()
            assert stats.bulk_outgoing_queued == 129
            assert stats.outgoing_queued == 0

            # The control lane is not behind them: an unrelated execute goes through.
            host.answer_now = lambda request_id, cell: True
            other = await session.execute("another cell")
            assert (await other.initial_response()).content_items == (TextItem("done"),)

            # Now the host reads the bulk lane: every result arrives, whole.
            await host.read_bulk(until=lambda: len(host.answers) == 130)
            for i in range(130):
                answer = host.answers[i + 1]
                assert isinstance(answer, WireOk) and type(answer.value) is ToolResult
                assert answer.value.result == f"{i:04d}" + "x" * RESULT_BYTES
            assert conn.alive


async def test_results_past_the_pending_delegate_limit_overflow_the_bulk_queue() -> None:
    # The queue is bounded, by the limit the handshake set (4096 granted): a host that ignores
    # its own limit and reads nothing overflows it with the 4097th result queued. (So the
    # tests above measure a real queue.)
    class LimitlessHost(HostProtocol):
        delegate_capacity = 8192  # type: ignore[assignment]  # the limit it ignores

    with trio.fail_after(60):
        async with (
            scripted_connection(cm.ConnectionConfig(), LimitlessHost(bulk_token="token-1")) as (
                host,
                conn,
            ),
            conn.open_session(small_tools(), session_id="session-1") as session,
        ):
            await session.execute("the host plays this cell")
            (_, cell_id) = host.cells[0]
            await queue_results(host, cell_id, range(1))
            await queue_results(host, cell_id, range(1, 4097))
            assert conn.alive and conn.statistics().bulk_outgoing_queued == 4096
            await queue_results(host, cell_id, range(4097, 4098))
            assert await conn.wait_failed() == "code-mode host outgoing queue is full"


async def test_tool_traffic_takes_the_bulk_lane_and_the_rest_stays_on_control() -> None:
    tools = cm.ToolRegistry()
    notes: list[str] = []

    @tools.function(description="echo")
    async def echo(i: int) -> int:
        return i

    @tools.on_notification
    async def note(n: cm.Notification) -> None:
        notes.append(n.text)

    with trio.fail_after(30):
        async with (
            scripted_connection(cm.ConnectionConfig()) as (host, conn),
            conn.open_session(tools, session_id="session-1") as session,
        ):
            await session.execute("the host plays this cell")
            (_, cell_id) = host.cells[0]
            echo_tool = ToolDefinition("echo", "echo", {"type": "object"})
            tool_id = host.protocol.call_tool("session-1", cell_id, echo_tool, {"i": 7})
            note_id = host.protocol.send_notification("session-1", cell_id, "hello")
            await host.flush()
            # The tool's result comes back on bulk; the notification's ack on control (which
            # serve_control reads for us).
            await host.read_bulk(until=lambda: int(tool_id) in host.answers)
            assert host.answers[int(tool_id)] == WireOk(ToolResult(7))
            assert await host.answer_on_control(int(note_id)) == WireOk(NotificationDelivered())
            assert notes == ["hello"]


async def test_a_host_message_on_the_wrong_lane_fails_the_connection() -> None:
    with trio.fail_after(30):
        async with (
            scripted_connection(cm.ConnectionConfig()) as (host, conn),
            conn.open_session(cm.ToolRegistry(), session_id="session-1") as session,
        ):
            await session.execute("the host plays this cell")
            (_, cell_id) = host.cells[0]
            # A notification belongs on control; the host sends it on bulk.
            host.protocol.send_notification("session-1", cell_id, "misrouted")
            await host.bulk.send_all(host.protocol.data_to_send())
            reason = await conn.wait_failed()
            assert reason == "code-mode host sent a message on the wrong websocket lane"


# ------------------------------------------------------------------ over real WebSockets


@asynccontextmanager
async def pairing_host(ready: bytes, requests: list[str]) -> AsyncIterator[str]:
    """A WebSocket server that answers the hello with ``ready`` and refuses every bulk lane.

    ``requests`` collects the path (with query) of every request after the first.
    """

    async def handle(request: trio_websocket.WebSocketRequest) -> None:
        if requests or "/bulk/" in request.path:
            requests.append(request.path)
            await request.reject(404)
            return
        requests.append(request.path)
        websocket = await request.accept()
        await websocket.get_message()  # the hello
        await websocket.send_message(ready)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(trio_websocket.serve_websocket, handle, "127.0.0.1", 0, None)
        )
        yield f"ws://127.0.0.1:{server.port}"
        nursery.cancel_scope.cancel()


async def test_websocket_provider_fails_when_a_negotiated_bulk_connection_is_unavailable() -> None:
    ready = encode_host_frame(ConnectionReady(1, (DUAL_WEBSOCKET,), "fallback-token"))
    requests: list[str] = []
    with trio.fail_after(30):
        async with pairing_host(ready, requests) as url:
            with pytest.raises(cm.ConnectionFailed, match="404") as caught:
                async with cm.open_websocket_connection(f"{url}?access_token=shared-token"):
                    pass
    assert requests == [
        "/?access_token=shared-token",
        "/bulk/fallback-token?access_token=shared-token",
    ]
    assert str(caught.value) == (
        "failed to connect to the code-mode host bulk websocket: HTTP error: 404 Not Found"
    )


@pytest.mark.parametrize(
    ("ready", "capabilities", "reason"),
    [
        (
            ConnectionReady(1, (DUAL_WEBSOCKET,)),
            WEBSOCKET_CAPABILITIES,
            "code-mode host advertised dual websockets without a pairing token",
        ),
        (
            ConnectionReady(1, (), "a-token"),
            WEBSOCKET_CAPABILITIES,
            "code-mode host returned an unexpected bulk pairing token",
        ),
        (
            ConnectionReady(1, (), "a-token"),
            ALL_CAPABILITIES,
            "code-mode host returned an unexpected bulk pairing token",
        ),
    ],
)
async def test_a_pairing_that_does_not_add_up_fails_the_connection(
    ready: ConnectionReady, capabilities: tuple[str, ...], reason: str
) -> None:
    requests: list[str] = []
    with trio.fail_after(30):
        async with pairing_host(encode_host_frame(ready), requests) as url:
            with pytest.raises(cm.HandshakeError) as caught:
                async with cm.open_websocket_connection(url, capabilities=capabilities):
                    pass
    assert str(caught.value) == reason
    assert requests == ["/"]  # no bulk lane was asked for


async def test_a_bulk_token_on_a_connection_that_is_not_a_websocket_fails() -> None:
    client, host = trio.testing.memory_stream_pair()

    async def answer() -> None:
        await host.receive_some()
        await host.send_all(encode_host_frame(ConnectionReady(1, (), "a-token")))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            with pytest.raises(cm.HandshakeError) as caught:
                async with cm.open_connection(client):
                    pass
    assert str(caught.value) == "code-mode host negotiated an unsupported bulk websocket"


async def test_the_bulk_lane_is_offered_only_where_it_can_be_opened() -> None:
    client, _ = trio.testing.memory_stream_pair()
    with pytest.raises(cm.UsageError, match="dual-websocket-v1"):
        async with cm.open_connection(client, capabilities=[DUAL_WEBSOCKET]):
            pass


@pytest.mark.parametrize(
    ("url", "bulk"),
    [
        ("ws://127.0.0.1:9", "ws://127.0.0.1:9/bulk/t%2F1"),
        ("ws://h:1/", "ws://h:1/bulk/t%2F1"),
        ("ws://h:1/base/?a=1&b=2", "ws://h:1/base/bulk/t%2F1?a=1&b=2"),
        ("wss://h/base#frag", "wss://h/base/bulk/t%2F1"),
    ],
)
def test_the_bulk_url_appends_to_the_path_and_keeps_the_query(url: str, bulk: str) -> None:
    assert bulk_websocket_url(url, "t/1") == bulk


def test_a_bulk_url_that_cannot_be_built_says_so() -> None:
    with pytest.raises(
        cm.ConnectionFailed, match="^failed to build code-mode host bulk websocket URL: "
    ):
        bulk_websocket_url("ws://[::1", "t")
    with pytest.raises(
        cm.ConnectionFailed, match="^failed to build code-mode host bulk websocket path: "
    ):
        bulk_websocket_url("ws:nowhere", "t")


async def test_the_bulk_lane_holds_a_result_for_every_call_the_host_may_have_pending() -> None:
    # With delegate-capacity-4096 granted, 1024 slots would not do: 1500 small results queue
    # behind one the host does not read, and the connection lives.
    with trio.fail_after(30):
        async with (
            scripted_connection(cm.ConnectionConfig()) as (host, conn),
            conn.open_session(small_tools(), session_id="session-1") as session,
        ):
            assert "delegate-capacity-4096" in conn.capabilities
            await session.execute("the host plays this cell")
            (_, cell_id) = host.cells[0]
            await queue_results(host, cell_id, range(1))
            await queue_results(host, cell_id, range(1, 1501))
            assert conn.alive
            assert conn.statistics().bulk_outgoing_queued == 1500
            await host.read_bulk(until=lambda: len(host.answers) == 1501)
            assert conn.alive
