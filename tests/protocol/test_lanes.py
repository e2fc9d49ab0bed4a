"""``dual-websocket-v1`` lanes in the two sans-IO machines, wired to each other lane by lane."""

from __future__ import annotations

from typing import Any

import pytest

from codemode_trio.protocol.client_events import DelegateStarted, Event
from codemode_trio.protocol.client_protocol import ClientProtocol
from codemode_trio.protocol.content import Notification, ToolCall, ToolDefinition
from codemode_trio.protocol.errors import HostProtocolViolation, UsageError
from codemode_trio.protocol.handshake import ALL_CAPABILITIES
from codemode_trio.protocol.host_protocol import (
    DelegateAnswered,
    ExecuteRequested,
    FatalClientError,
    HelloReceived,
    HostEvent,
    HostProtocol,
    NeedData,
    SessionOpenRequested,
)
from codemode_trio.protocol.lanes import (
    DUAL_WEBSOCKET,
    WRONG_LANE_FROM_CLIENT,
    WRONG_LANE_FROM_HOST,
    Lane,
    client_message_lane,
    host_message_lane,
)
from codemode_trio.protocol.messages import (
    CellClosed,
    DelegateCancel,
    DelegateRequest,
    DelegateResponse,
    NotificationDelivered,
    OperationCancel,
    ToolResult,
    WireError,
    WireOk,
)

ECHO = ToolDefinition("echo", "echo", {"type": "object"})


class Pair:
    """A client machine and a host machine; bytes move between them lane by lane."""

    def __init__(self, *, offer: bool = True, token: str | None = "tok") -> None:
        capabilities = (*ALL_CAPABILITIES, DUAL_WEBSOCKET) if offer else ALL_CAPABILITIES
        self.client = ClientProtocol(capabilities=capabilities, websocket=True)
        self.host = HostProtocol(bulk_token=token)
        self.host_events: list[HostEvent] = []
        self.client_events: list[Event] = []

    def to_host(self, lane: Lane, *, on: Lane | None = None) -> None:
        """Move the client's ``lane`` bytes to the host, arriving ``on`` that lane."""
        self.host.receive_data(self.client.data_to_send(lane), on or lane)
        while not isinstance(event := self.host.next_event(), NeedData):
            self.host_events.append(event)
            if isinstance(event, HelloReceived):
                self.host.answer_hello()
            elif isinstance(event, SessionOpenRequested):
                self.host.accept_session(event.request_id)
            elif isinstance(event, ExecuteRequested):
                self.host.start_cell(event.request_id)

    def to_client(self, lane: Lane, *, on: Lane | None = None) -> None:
        self.client.receive_data(self.host.data_to_send(lane), on or lane)
        while not isinstance(event := self.client.next_event(), NeedData):
            self.client_events.append(event)

    def sync(self) -> None:
        for _ in range(3):
            for lane in Lane:
                self.to_host(lane)
                self.to_client(lane)

    def open_cell(self) -> str:
        """Handshake, a session ``s`` and a started cell; return the cell id."""
        self.sync()
        op = self.client.open_session("s")
        self.sync()
        self.client.claim(op)
        op = self.client.execute("s", "source", tool_call_id="t", tools=(ECHO,))
        self.sync()
        assert op.cell_id is not None
        self.client.claim(op)
        return op.cell_id

    def started(self) -> list[Any]:
        return [event.call for event in self.client_events if type(event) is DelegateStarted]


def test_the_host_grants_the_lane_with_its_token_only_to_a_client_that_asks() -> None:
    pair = Pair()
    pair.sync()
    assert pair.client.bulk_token == "tok"
    assert DUAL_WEBSOCKET in pair.client.capabilities and pair.host.lanes
    single = Pair(offer=False)
    single.sync()
    assert single.client.bulk_token is None and not single.host.lanes
    assert DUAL_WEBSOCKET not in single.client.capabilities


def test_tool_traffic_goes_on_bulk_and_the_rest_on_control() -> None:
    pair = Pair()
    cell = pair.open_cell()
    tool = pair.host.call_tool("s", cell, ECHO, {"x": 3})
    note = pair.host.send_notification("s", cell, "hi")
    assert pair.host.has_data_to_send(Lane.BULK) and pair.host.has_data_to_send(Lane.CONTROL)
    # Each on its own lane: the client checks, and would fail on a misplaced one.
    pair.to_client(Lane.BULK)
    pair.to_client(Lane.CONTROL)
    calls = {call.id: call for call in pair.started()}
    pair.client.complete_tool_call(calls[int(tool)], 4)
    pair.client.complete_notification(calls[int(note)])
    # And back: the host checks too.
    pair.to_host(Lane.BULK)
    pair.to_host(Lane.CONTROL)
    answers = {
        int(e.delegate_id): e.result for e in pair.host_events if type(e) is DelegateAnswered
    }
    assert answers == {int(tool): WireOk(ToolResult(4)), int(note): WireOk(NotificationDelivered())}


def test_a_host_cancel_travels_with_its_call_on_bulk() -> None:
    pair = Pair()
    cell = pair.open_cell()
    tool = pair.host.call_tool("s", cell, ECHO, {})
    assert pair.host.cancel_delegate(int(tool))
    assert not pair.host.has_data_to_send(Lane.CONTROL)
    pair.to_client(Lane.BULK)
    assert pair.client.statistics()["active_delegates"] == 0


def test_a_client_message_on_the_wrong_lane_is_fatal_for_the_host() -> None:
    pair = Pair()
    cell = pair.open_cell()
    tool = pair.host.call_tool("s", cell, ECHO, {})
    pair.to_client(Lane.BULK)
    (call,) = pair.started()
    assert call.id == int(tool)
    pair.client.complete_tool_call(call, 1)
    with pytest.raises(FatalClientError) as caught:
        pair.to_host(Lane.BULK, on=Lane.CONTROL)
    assert caught.value.stderr_text() == f"Error: {WRONG_LANE_FROM_CLIENT}\n"


def test_bulk_bytes_before_the_lane_was_granted_are_fatal_for_the_host() -> None:
    host = HostProtocol(bulk_token="tok")
    host.receive_data(b"\x00\x00\x00\x00", Lane.BULK)
    with pytest.raises(FatalClientError, match=WRONG_LANE_FROM_CLIENT):
        host.next_event()


def test_a_host_message_on_the_wrong_lane_fails_the_client() -> None:
    pair = Pair()
    cell = pair.open_cell()
    pair.host.send_notification("s", cell, "misrouted")
    with pytest.raises(HostProtocolViolation, match=WRONG_LANE_FROM_HOST):
        pair.to_client(Lane.CONTROL, on=Lane.BULK)
    assert pair.client.failure == WRONG_LANE_FROM_HOST


def test_the_lane_of_each_message() -> None:
    call = ToolCall("1", "tool-1", "echo", None, "function", {})
    note = Notification("t", "1", "hi")
    assert host_message_lane(DelegateRequest(1, "s", call)) is Lane.BULK  # type: ignore[arg-type]
    assert host_message_lane(DelegateRequest(1, "s", note)) is Lane.CONTROL  # type: ignore[arg-type]
    assert host_message_lane(DelegateCancel(1)) is Lane.BULK  # type: ignore[arg-type]
    assert host_message_lane(CellClosed("s", "1")) is Lane.CONTROL
    ok = WireOk(ToolResult(1))
    assert client_message_lane(DelegateResponse(1, ok)) is Lane.BULK  # type: ignore[arg-type]
    error = WireError("no")
    assert client_message_lane(DelegateResponse(1, error)) is Lane.BULK  # type: ignore[arg-type]
    ack = WireOk(NotificationDelivered())
    assert client_message_lane(DelegateResponse(1, ack)) is Lane.CONTROL  # type: ignore[arg-type]
    assert client_message_lane(OperationCancel(1)) is Lane.CONTROL  # type: ignore[arg-type]


def test_the_lane_is_offered_only_over_a_websocket() -> None:
    with pytest.raises(UsageError, match=DUAL_WEBSOCKET):
        ClientProtocol(capabilities=[DUAL_WEBSOCKET])
    ClientProtocol(capabilities=[DUAL_WEBSOCKET], websocket=True)
