"""ClientProtocol and HostProtocol driving whole sessions against each other, with no I/O.

h11's ``ConnectionPair`` idea: the two machines are wired back to back, every byte one sends is
fed to the other, whole or one byte at a time, and each side's events are checked. Neither side
ever raises a protocol violation: the two machines agree on every rule they share.
"""

from __future__ import annotations

from typing import Any

import pytest

from codemode_trio.protocol import (
    RuntimeResponse,
    TextItem,
    ToolDefinition,
    WaitOutcome,
    WireError,
    WireOk,
)
from codemode_trio.protocol.client_events import (
    CellObserved,
    CellReleased,
    CellStarted,
    DelegateRevoked,
    DelegateStarted,
    Event,
    Fault,
    InitialResult,
    OperationFailed,
    SessionOpened,
    SessionReleased,
    SessionShutDown,
)
from codemode_trio.protocol.client_protocol import ClientProtocol
from codemode_trio.protocol.host_protocol import (
    CancelRequested,
    DelegateAnswered,
    ExecuteRequested,
    HelloReceived,
    HostEvent,
    HostProtocol,
    NeedData,
    SessionOpenRequested,
    ShutdownRequested,
    TerminateRequested,
    WaitRequested,
    YieldRequested,
)

ECHO = ToolDefinition("echo", "echo its input")


class Pair:
    """A client machine and a host machine, connected by shuttling their bytes."""

    def __init__(self, *, byte_by_byte: bool) -> None:
        self.byte_by_byte = byte_by_byte
        self.client = ClientProtocol()
        self.host = HostProtocol()
        self.host_events: list[HostEvent] = []
        self.client_events: list[Event] = []
        self.shuttle()
        (hello,) = self.take_host()
        assert isinstance(hello, HelloReceived)
        self.host.answer_hello()
        self.shuttle()
        assert self.client.handshake_complete

    def _feed(self, receive: Any, data: bytes) -> None:
        if self.byte_by_byte:
            for index in range(len(data)):
                receive(data[index : index + 1])
        elif data:
            receive(data)

    def shuttle(self) -> None:
        """Move bytes both ways until both sides are quiet; collect both sides' events."""
        while True:
            to_host = self.client.data_to_send()
            self._feed(self.host.receive_data, to_host)
            while not isinstance(event := self.host.next_event(), NeedData):
                self.host_events.append(event)
            to_client = self.host.data_to_send()
            self._feed(self.client.receive_data, to_client)
            while not isinstance(client_event := self.client.next_event(), NeedData):
                self.client_events.append(client_event)
            if not to_host and not to_client:
                return

    def take_host(self) -> list[HostEvent]:
        events, self.host_events = self.host_events, []
        return events

    def take_client(self) -> list[Event]:
        events, self.client_events = self.client_events, []
        return events


@pytest.fixture(params=["whole", "byte_by_byte"])
def pair(request: pytest.FixtureRequest) -> Pair:
    return Pair(byte_by_byte=request.param == "byte_by_byte")


def open_session(pair: Pair, session_id: str = "s1") -> None:
    op = pair.client.open_session(session_id)
    pair.shuttle()
    (opening,) = pair.take_host()
    assert isinstance(opening, SessionOpenRequested) and opening.session_id == session_id
    pair.host.accept_session(opening.request_id)
    pair.shuttle()
    assert pair.take_client() == [SessionOpened(op)]
    pair.client.claim(op)


def start(pair: Pair, source: str = "script") -> tuple[Any, ExecuteRequested]:
    op = pair.client.execute("s1", source, tools=[ECHO])
    pair.shuttle()
    (requested,) = pair.take_host()
    assert isinstance(requested, ExecuteRequested)
    assert requested.tools == (ECHO,)
    cell_id = pair.host.start_cell(requested.request_id)
    pair.shuttle()
    assert pair.take_client() == [CellStarted(op)]
    assert op.cell_id == cell_id
    pair.client.claim(op)
    return op, requested


def test_a_tool_call_round_trip_and_the_cells_end(pair: Pair) -> None:
    open_session(pair)
    op, requested = start(pair)
    delegate_id = pair.host.call_tool("s1", "1", ECHO, {"x": 1})
    pair.shuttle()
    (started,) = pair.take_client()
    assert isinstance(started, DelegateStarted)
    assert started.call.id == delegate_id
    assert started.call.request.input == {"x": 1}  # type: ignore[union-attr]
    assert started.call.request.call_id == "tool-1"  # type: ignore[union-attr]
    pair.client.complete_tool_call(started.call, {"echo": {"x": 1}})
    pair.shuttle()
    (answered,) = pair.take_host()
    assert isinstance(answered, DelegateAnswered)
    assert answered.delegate_id == delegate_id
    assert isinstance(answered.result, WireOk)

    result = RuntimeResponse("result", "1", (TextItem("done"),))
    pair.host.send_initial_response(requested.request_id, result)
    pair.shuttle()
    events = pair.take_client()
    assert [type(e) for e in events] == [InitialResult, CellReleased]
    initial = events[0]
    assert isinstance(initial, InitialResult) and initial.op is op
    assert initial.response.text == "done"
    assert initial.response.code_mode_host_duration_ns is not None  # the host stamps it
    assert events[1] == CellReleased("s1", "1")


def test_a_cancelled_wait_leaves_the_cell_running_and_the_next_wait_sees_it(pair: Pair) -> None:
    open_session(pair)
    _, requested = start(pair)
    yielded = RuntimeResponse("yielded", "1", (TextItem("a"),))
    pair.host.send_initial_response(requested.request_id, yielded)
    pair.shuttle()
    assert [type(e) for e in pair.take_client()] == [InitialResult]

    first = pair.client.wait("s1", "1", yield_time_ms=60_000)
    pair.shuttle()
    (waiting,) = pair.take_host()
    assert isinstance(waiting, WaitRequested)
    pair.client.abandon(first)
    second = pair.client.wait("s1", "1", yield_time_ms=5)
    pair.shuttle()
    # The host answered the cancel itself; only then did the client send the second wait.
    host_events = pair.take_host()
    assert [type(e) for e in host_events] == [CancelRequested, WaitRequested]
    assert pair.take_client() == [OperationFailed(first, Fault.HOST, "code-mode request cancelled")]
    pair.host.answer_wait(host_events[1].request_id, RuntimeResponse("yielded", "1", ()))  # type: ignore[union-attr]
    pair.shuttle()
    (observed,) = pair.take_client()
    assert isinstance(observed, CellObserved) and observed.op is second
    assert observed.outcome.live


def test_a_requested_yield_reaches_the_hosts_pending_observation(pair: Pair) -> None:
    open_session(pair)
    _, requested = start(pair)
    pair.client.request_yield("s1", "1")
    pair.shuttle()
    (yield_event,) = pair.take_host()
    assert isinstance(yield_event, YieldRequested)
    assert yield_event.request_id == requested.request_id


def test_terminate_with_a_pending_tool_call_revokes_it(pair: Pair) -> None:
    open_session(pair)
    _, requested = start(pair)
    pair.host.call_tool("s1", "1", ECHO, None)
    pair.shuttle()
    (started,) = pair.take_client()
    assert isinstance(started, DelegateStarted)
    terminate = pair.client.terminate("s1", "1")
    pair.shuttle()
    (asked,) = pair.take_host()
    assert isinstance(asked, TerminateRequested)
    pair.host.answer_terminate(asked.request_id, RuntimeResponse("terminated", "1", ()))
    pair.host.send_initial_response(requested.request_id, RuntimeResponse("terminated", "1", ()))
    pair.shuttle()
    events = pair.take_client()
    assert DelegateRevoked(started.call) in events
    assert CellReleased("s1", "1") in events
    observed = [e for e in events if isinstance(e, CellObserved)]
    assert observed[0].op is terminate
    assert observed[0].outcome == WaitOutcome(True, observed[0].outcome.response)
    # The revoked call's late completion reaches nobody.
    pair.client.complete_tool_call(started.call, "late")
    pair.shuttle()
    assert pair.take_host() == []


def test_shutdown_closes_every_cell_before_the_session(pair: Pair) -> None:
    open_session(pair)
    for _ in range(2):
        _, requested = start(pair)
        pair.host.send_initial_response(requested.request_id, RuntimeResponse("yielded", "x", ()))
        pair.shuttle()
        pair.take_client()
    op = pair.client.shutdown("s1")
    pair.shuttle()
    (shutdown,) = pair.take_host()
    assert isinstance(shutdown, ShutdownRequested)
    pair.host.close_session(shutdown.request_id)
    pair.shuttle()
    events = pair.take_client()
    assert sorted(e.cell_id for e in events if isinstance(e, CellReleased)) == ["1", "2"]
    assert events[-2:] == [SessionReleased("s1"), SessionShutDown(op)]
    assert pair.client.failure is None


def test_a_host_error_is_one_callers_and_the_connection_lives(pair: Pair) -> None:
    open_session(pair)
    op = pair.client.execute("s1", "x")
    pair.shuttle()
    (requested,) = pair.take_host()
    pair.host.answer_error(requested.request_id, "code-mode host has too many active cells")  # type: ignore[union-attr]
    pair.shuttle()
    assert pair.take_client() == [
        OperationFailed(op, Fault.HOST, "code-mode host has too many active cells")
    ]
    start(pair)  # the next execute still works
    assert pair.client.failure is None


def test_missing_cells_and_unknown_sessions_are_answered_by_the_rules(pair: Pair) -> None:
    open_session(pair)
    op = pair.client.wait("s1", "9", yield_time_ms=0)
    pair.shuttle()
    assert pair.take_host() == []  # the host machine answered it by itself
    (observed,) = pair.take_client()
    assert isinstance(observed, CellObserved) and observed.op is op
    assert not observed.outcome.live
    assert observed.outcome.response.error_text == "exec cell 9 not found"


def test_an_error_reply_for_a_tool_call(pair: Pair) -> None:
    open_session(pair)
    start(pair)
    pair.host.call_tool("s1", "1", ECHO, None)
    pair.shuttle()
    (started,) = pair.take_client()
    assert isinstance(started, DelegateStarted)
    pair.client.reject_delegate(started.call, "tool exploded")
    pair.shuttle()
    (answered,) = pair.take_host()
    assert isinstance(answered, DelegateAnswered)
    assert answered.result == WireError("tool exploded")
