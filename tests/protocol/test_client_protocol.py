"""ClientProtocol on its own: every client rule as a pure, synchronous test (no trio).

Each seed behaviour that is a protocol rule (``seed/driver_tests.rs``) has a test here under the
seed's name; the Trio shell's tests of the same names are in tests/client/test_driver_seed.py.
Host frames are built with the real codec and fed to the machine whole, or one byte at a time.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from codemode_trio.protocol import (
    CellClosed,
    CellLimits,
    ClientMessage,
    ConnectionReady,
    DelegateCancel,
    DelegateRequest,
    DelegateRequestId,
    DelegateResponse,
    ExecuteRequest,
    ExecutionStarted,
    FrameDecoder,
    HostMessage,
    HostProtocolViolation,
    InitialResponse,
    Notification,
    NotificationDelivered,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationResponse,
    OperationYield,
    RequestId,
    RuntimeResponse,
    SessionClosedResponse,
    SessionReady,
    ShutdownRequest,
    TerminateRequest,
    ToolCall,
    ToolDefinition,
    ToolResult,
    WaitCompleted,
    WaitOutcome,
    WaitRequest,
    WireError,
    WireOk,
    decode_client_message,
    encode_host_frame,
)
from codemode_trio.protocol.client_events import (
    CellObserved,
    CellReleased,
    CellStarted,
    DelegateRevoked,
    DelegateStarted,
    Event,
    Failed,
    Fault,
    InitialResult,
    InternalRequest,
    NeedData,
    Operation,
    OperationFailed,
    SessionOpened,
    SessionReleased,
    SessionShutDown,
)
from codemode_trio.protocol.client_protocol import ClientProtocol
from codemode_trio.protocol.errors import (
    ConnectionUnusable,
    HandshakeRejected,
    SessionUnavailable,
    UsageError,
)
from codemode_trio.protocol.handshake import ALL_CAPABILITIES

# --------------------------------------------------------------------------- harness


class Wire:
    """A ClientProtocol plus the host's view of it: frames in, decoded frames out."""

    def __init__(
        self,
        *,
        byte_by_byte: bool = False,
        granted: Iterable[str] = ALL_CAPABILITIES,
        **options: object,
    ) -> None:
        self.proto = ClientProtocol(**options)  # type: ignore[arg-type]
        self.byte_by_byte = byte_by_byte
        self._decoder = FrameDecoder()
        assert [type(m).__name__ for m in self.sent()] == ["ConnectionHello"]
        self.feed(ConnectionReady(1, tuple(sorted(granted))))
        assert self.proto.handshake_complete
        assert self.events() == []

    def feed(self, *messages: HostMessage) -> None:
        data = b"".join(encode_host_frame(message) for message in messages)
        if self.byte_by_byte:
            for index in range(len(data)):
                self.proto.receive_data(data[index : index + 1])
        else:
            self.proto.receive_data(data)

    def sent(self) -> list[ClientMessage]:
        return [
            decode_client_message(payload, strict=True)
            for payload in self._decoder.feed(self.proto.data_to_send())
        ]

    def events(self) -> list[Event]:
        out = []
        while not isinstance(event := self.proto.next_event(), NeedData):
            out.append(event)
        return out

    def quiet(self) -> None:
        assert self.sent() == []
        assert self.events() == []


def request(request_id: int, body: object) -> OperationRequest:
    return OperationRequest(RequestId(request_id), body)  # type: ignore[arg-type]


def reply(request_id: int, value: object) -> OperationResponse:
    return OperationResponse(RequestId(request_id), WireOk(value))  # type: ignore[arg-type]


def yielded(cell_id: str) -> RuntimeResponse:
    return RuntimeResponse("yielded", cell_id, (), code_mode_host_duration_ns=0)


def terminated(cell_id: str) -> RuntimeResponse:
    return RuntimeResponse("terminated", cell_id, (), code_mode_host_duration_ns=0)


def tool_call(
    delegate_id: int, cell_id: str = "1", session_id: str = "session-1"
) -> DelegateRequest:
    return DelegateRequest(
        DelegateRequestId(delegate_id),
        session_id,
        ToolCall(cell_id, f"tool-{delegate_id}", "tool", None, "function", {"n": delegate_id}),
    )


def notify(delegate_id: int, cell_id: str = "1", text: str = "hi") -> DelegateRequest:
    return DelegateRequest(
        DelegateRequestId(delegate_id), "session-1", Notification("call", cell_id, text)
    )


def open_session(wire: Wire, session_id: str = "session-1") -> Operation:
    op = wire.proto.open_session(session_id)
    assert wire.sent() == [request(op.request_id or 0, OpenSessionRequest(session_id))]
    wire.feed(reply(op.request_id or 0, SessionReady(session_id)))
    assert wire.events() == [SessionOpened(op)]
    wire.proto.claim(op)
    return op


def start_cell(wire: Wire, cell_id: str = "1", session_id: str = "session-1") -> Operation:
    op = wire.proto.execute(session_id, "await new Promise(() => {})", yield_time_ms=1)
    (frame,) = wire.sent()
    assert isinstance(frame, OperationRequest) and isinstance(frame.request, ExecuteRequest)
    wire.feed(reply(frame.id, ExecutionStarted(cell_id)))
    assert wire.events() == [CellStarted(op)]
    assert op.cell_id == cell_id
    wire.proto.claim(op)
    return op


@pytest.fixture(params=["whole", "byte_by_byte"])
def wire(request: pytest.FixtureRequest) -> Wire:
    return Wire(byte_by_byte=request.param == "byte_by_byte")


def started_calls(events: Iterable[Event]) -> list[int]:
    return [e.call.id for e in events if isinstance(e, DelegateStarted)]


# --------------------------------------------------------------------------- handshake


def test_hello_offers_every_capability_as_optional_and_requires_none() -> None:
    proto = ClientProtocol()
    (payload,) = FrameDecoder().feed(proto.data_to_send())
    hello = decode_client_message(payload, strict=True)
    assert hello.required_capabilities == ()  # type: ignore[union-attr]
    assert hello.optional_capabilities == ALL_CAPABILITIES  # type: ignore[union-attr]
    assert not proto.handshake_complete


def test_rejected_handshake_raises_and_leaves_the_machine_failed() -> None:
    from codemode_trio.protocol import ConnectionRejected, MissingRequiredCapability

    proto = ClientProtocol()
    proto.data_to_send()
    with pytest.raises(HandshakeRejected, match="^code-mode host rejected the handshake: "):
        proto.receive_data(encode_host_frame(ConnectionRejected(MissingRequiredCapability("x"))))
    assert proto.failure is not None
    with pytest.raises(ConnectionUnusable):
        proto.open_session()


def test_eof_during_the_handshake_is_reported_with_its_details() -> None:
    proto = ClientProtocol()
    with pytest.raises(
        ConnectionUnusable, match=r"^code-mode host exited during handshake \(host exited\)$"
    ):
        proto.receive_eof("host exited")


def test_commands_before_the_handshake_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="handshake is not complete"):
        ClientProtocol().open_session()


def test_second_handshake_response_fails_the_connection(wire: Wire) -> None:
    with pytest.raises(
        HostProtocolViolation, match="^code-mode host sent a second handshake response$"
    ):
        wire.feed(ConnectionReady(1, ()))
    assert wire.events() == [Failed("code-mode host sent a second handshake response")]


# --------------------------------------------------------------------------- the seed's rules


def test_open_session_includes_nondefault_cell_execution_limits(wire: Wire) -> None:
    limits = CellLimits(max_yield_time_ms=250, max_heap_size_bytes=16 * 1024 * 1024)
    wire.proto.open_session("session-1", limits=limits)
    assert wire.sent() == [request(1, OpenSessionRequest("session-1", limits))]


def test_dropped_open_waiter_shuts_down_committed_session(wire: Wire) -> None:
    op = wire.proto.open_session("session-1")
    wire.sent()
    wire.proto.abandon(op)
    assert wire.sent() == [OperationCancel(RequestId(1))]
    wire.feed(reply(1, SessionReady("session-1")))
    assert wire.sent() == [request(2, ShutdownRequest("session-1"))]
    (internal,) = wire.events()
    assert isinstance(internal, InternalRequest) and internal.op.request_id == 2
    wire.feed(reply(2, SessionClosedResponse("session-1")))
    assert wire.events() == [SessionReleased("session-1"), SessionShutDown(internal.op)]
    with pytest.raises(SessionUnavailable, match="^unknown code-mode session session-1$"):
        wire.proto.execute("session-1", "text('ok')")
    wire.quiet()


def test_delegate_cancel_is_best_effort_and_sends_no_late_response(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(7))
    (started,) = wire.events()
    assert isinstance(started, DelegateStarted)
    wire.feed(DelegateCancel(DelegateRequestId(7)))
    assert wire.events() == [DelegateRevoked(started.call)]
    wire.proto.complete_tool_call(started.call, "late")  # finished after the cancel was read
    wire.quiet()
    with pytest.raises(
        HostProtocolViolation,
        match=r"^duplicate code-mode delegate request ID DelegateRequestId\(7\)$",
    ):
        wire.feed(notify(7))


def test_completed_delegate_request_id_cannot_be_reused(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(notify(5))
    (started,) = wire.events()
    assert isinstance(started, DelegateStarted)
    wire.proto.complete_notification(started.call)
    assert wire.sent() == [DelegateResponse(DelegateRequestId(5), WireOk(NotificationDelivered()))]
    with pytest.raises(HostProtocolViolation, match="duplicate code-mode delegate request ID"):
        wire.feed(notify(5))


def test_delegate_limit_returns_an_error_without_disconnecting() -> None:
    # Without delegate-capacity-4096, which would raise the cap.
    wire = Wire(max_pending_delegates=4, granted=())
    open_session(wire)
    start_cell(wire)
    wire.feed(*(tool_call(n) for n in range(1, 6)))
    events = wire.events()
    assert started_calls(events) == [1, 2, 3, 4]
    assert wire.sent() == [
        DelegateResponse(
            DelegateRequestId(5),
            WireError("code-mode host exceeded the limit of 4 pending delegate calls"),
        )
    ]
    wire.feed(DelegateCancel(DelegateRequestId(1)))
    wire.feed(tool_call(6))
    assert started_calls(wire.events()) == [6]
    assert wire.proto.failure is None


def test_terminate_closes_cell_without_waiting_for_delegate_cleanup(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(7))
    (started,) = wire.events()
    assert isinstance(started, DelegateStarted)
    op = wire.proto.terminate("session-1", "1")
    assert wire.sent() == [request(3, TerminateRequest("session-1", "1"))]
    wire.feed(
        DelegateCancel(DelegateRequestId(7)),
        CellClosed("session-1", "1"),
        reply(3, WaitCompleted(WaitOutcome(True, terminated("1")))),
    )
    assert wire.events() == [
        DelegateRevoked(started.call),
        CellReleased("session-1", "1"),
        CellObserved(op, WaitOutcome(True, terminated("1"))),
    ]
    wire.proto.complete_tool_call(started.call, None)  # the delegate finishes later: nothing
    wire.quiet()


def test_shutdown_closes_cell_without_waiting_for_delegate_cleanup(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(7))
    (started,) = wire.events()
    assert isinstance(started, DelegateStarted)
    op = wire.proto.shutdown("session-1")
    assert wire.sent() == [request(3, ShutdownRequest("session-1"))]
    with pytest.raises(SessionUnavailable, match="^code-mode session is shutting down$"):
        wire.proto.wait("session-1", "1")
    wire.feed(
        DelegateCancel(DelegateRequestId(7)),
        CellClosed("session-1", "1"),
        reply(3, SessionClosedResponse("session-1")),
    )
    assert wire.events() == [
        DelegateRevoked(started.call),
        CellReleased("session-1", "1"),
        SessionReleased("session-1"),
        SessionShutDown(op),
    ]
    wire.quiet()


def test_delegate_task_panic_becomes_tool_error_without_killing_connection(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(1))
    (started,) = wire.events()
    assert isinstance(started, DelegateStarted)
    wire.proto.reject_delegate(started.call, "code-mode delegate task failed: boom")
    assert wire.sent() == [
        DelegateResponse(DelegateRequestId(1), WireError("code-mode delegate task failed: boom"))
    ]
    assert wire.proto.failure is None


def test_delegate_for_unknown_cell_returns_error_without_invocation(wire: Wire) -> None:
    open_session(wire)
    wire.feed(tool_call(1, cell_id="missing"))
    assert wire.events() == []
    assert wire.sent() == [
        DelegateResponse(
            DelegateRequestId(1),
            WireError("code-mode host delegated for unknown cell missing in session session-1"),
        )
    ]


def test_delegate_after_cell_close_returns_error_without_invocation(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(CellClosed("session-1", "1"))
    assert wire.events() == [CellReleased("session-1", "1")]
    wire.feed(notify(2))
    assert wire.events() == []
    assert wire.sent() == [
        DelegateResponse(
            DelegateRequestId(2),
            WireError("code-mode host delegated for unknown cell 1 in session session-1"),
        )
    ]


def test_mismatched_initial_response_fails_connection_and_closes_cell_once(wire: Wire) -> None:
    open_session(wire)
    op = start_cell(wire)
    reason = "code-mode host returned initial response for cell 2 instead of 1"
    with pytest.raises(HostProtocolViolation, match=f"^{reason}$"):
        wire.feed(InitialResponse(RequestId(2), WireOk(yielded("2"))))
    assert wire.events() == [
        OperationFailed(op, Fault.CONNECTION, reason),
        CellReleased("session-1", "1"),
        SessionReleased("session-1"),
        Failed(reason),
    ]
    assert wire.sent() == []


def test_mismatched_wait_response_fails_connection(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    op = wire.proto.wait("session-1", "1", yield_time_ms=1)
    assert wire.sent() == [request(3, WaitRequest("session-1", "1", 1))]
    reason = "code-mode host returned cell 2 for request targeting 1"
    with pytest.raises(HostProtocolViolation, match=f"^{reason}$"):
        wire.feed(reply(3, WaitCompleted(WaitOutcome(True, yielded("2")))))
    events = wire.events()
    assert OperationFailed(op, Fault.CONNECTION, reason) in events
    assert [e for e in events if isinstance(e, CellReleased)] == [CellReleased("session-1", "1")]


def test_mismatched_terminate_response_fails_connection(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    op = wire.proto.terminate("session-1", "1")
    wire.sent()
    reason = "code-mode host returned cell 2 for request targeting 1"
    with pytest.raises(HostProtocolViolation, match=f"^{reason}$"):
        wire.feed(reply(3, WaitCompleted(WaitOutcome(False, terminated("2")))))
    events = wire.events()
    assert events[0] == OperationFailed(op, Fault.CONNECTION, reason)
    assert events[-1] == Failed(reason)


def test_remote_wait_accepts_durations_longer_than_five_minutes(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    op = wire.proto.wait("session-1", "1", yield_time_ms=300_001)
    assert wire.sent() == [request(3, WaitRequest("session-1", "1", 300_001))]
    wire.feed(reply(3, WaitCompleted(WaitOutcome(True, yielded("1")))))
    assert wire.events() == [CellObserved(op, WaitOutcome(True, yielded("1")))]


def test_cancelled_wait_is_retired_before_next_wait_is_sent(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    first = wire.proto.wait("session-1", "1", yield_time_ms=60_000)
    wire.sent()
    wire.proto.abandon(first)
    second = wire.proto.wait("session-1", "1", yield_time_ms=1)
    assert wire.sent() == [OperationCancel(RequestId(3))]  # the second wait is held back
    assert second.request_id is None
    wire.feed(OperationResponse(RequestId(3), WireError("code-mode request cancelled")))
    assert wire.sent() == [request(4, WaitRequest("session-1", "1", 1))]
    wire.feed(reply(4, WaitCompleted(WaitOutcome(True, yielded("1")))))
    # The abandoned wait's error is still reported: nobody listens, the shell drops it.
    assert wire.events() == [
        OperationFailed(first, Fault.HOST, "code-mode request cancelled"),
        CellObserved(second, WaitOutcome(True, yielded("1"))),
    ]


def test_abandoned_execute_is_tracked_and_terminated_after_admission(wire: Wire) -> None:
    open_session(wire)
    op = wire.proto.execute("session-1", "await new Promise(() => {})")
    wire.sent()
    wire.proto.abandon(op)
    assert wire.sent() == [OperationCancel(RequestId(2))]
    wire.feed(reply(2, ExecutionStarted("1")))
    assert wire.sent() == [request(3, TerminateRequest("session-1", "1"))]
    (internal,) = wire.events()
    assert isinstance(internal, InternalRequest)
    wire.feed(
        InitialResponse(RequestId(2), WireOk(terminated("1"))),
        reply(3, WaitCompleted(WaitOutcome(True, terminated("1")))),
        CellClosed("session-1", "1"),
    )
    assert wire.events() == [
        InitialResult(op, terminated("1")),
        CellObserved(internal.op, WaitOutcome(True, terminated("1"))),
        CellReleased("session-1", "1"),
    ]
    assert wire.proto.failure is None


def test_delivered_but_unclaimed_execute_is_terminated_when_the_caller_is_cancelled(
    wire: Wire,
) -> None:
    open_session(wire)
    op = wire.proto.execute("session-1", "await new Promise(() => {})")
    wire.sent()
    wire.feed(reply(2, ExecutionStarted("1")))
    assert wire.events() == [CellStarted(op)]
    wire.proto.abandon(op)  # delivered, never claimed
    assert wire.sent() == [
        OperationCancel(RequestId(2)),
        request(3, TerminateRequest("session-1", "1")),
    ]
    wire.feed(InitialResponse(RequestId(2), WireOk(terminated("1"))))
    assert wire.events()[-1] == InitialResult(op, terminated("1"))


def test_unclaimed_execute_of_a_session_closed_meanwhile_is_dropped_when_abandoned(
    wire: Wire,
) -> None:
    # The session closed between the delivery and the claim: its unclaimed execute went
    # with it (CLIENT §3.4), so abandoning it sends nothing and blames nobody.
    open_session(wire)
    op = wire.proto.execute("session-1", "await new Promise(() => {})")
    shutdown = wire.proto.shutdown("session-1")
    wire.sent()
    wire.feed(
        reply(2, ExecutionStarted("1")),
        CellClosed("session-1", "1"),
        reply(3, SessionClosedResponse("session-1")),
    )
    assert wire.events() == [
        CellStarted(op),
        CellReleased("session-1", "1"),
        SessionReleased("session-1"),
        SessionShutDown(shutdown),
    ]
    wire.proto.abandon(op)  # delivered, never claimed
    wire.quiet()
    assert wire.proto.failure is None


def test_claimed_execute_is_not_terminated_when_its_caller_goes_away(wire: Wire) -> None:
    open_session(wire)
    op = start_cell(wire)  # claims
    wire.proto.abandon(op)
    wire.quiet()


def test_session_accepts_more_than_4096_cells_without_growing_a_tombstone_set() -> None:
    wire = Wire()
    open_session(wire)
    for number in range(1, 4098):
        start_cell(wire, str(number))
        wire.feed(
            InitialResponse(RequestId(number + 1), WireOk(yielded(str(number)))),
            CellClosed("session-1", str(number)),
        )
        assert [type(e) for e in wire.events()] == [InitialResult, CellReleased]
    counts = wire.proto.statistics()
    assert counts["live_cells"] == 0
    assert counts["pending_initial_responses"] == 0
    assert counts["pending_requests"] == 0


def test_connection_failure_closes_every_live_cell_once(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire, "1")
    start_cell(wire, "2")
    wire.proto.fail("host crashed")
    wire.proto.fail("a later failure")
    events = wire.events()
    assert sorted(e.cell_id for e in events if isinstance(e, CellReleased)) == ["1", "2"]
    assert events[-1] == Failed("host crashed")
    assert wire.proto.failure == "host crashed"
    wire.proto.receive_data(encode_host_frame(CellClosed("session-1", "1")))  # ignored
    wire.quiet()


def test_dropped_shutdown_waiter_does_not_abort_remote_cleanup(wire: Wire) -> None:
    open_session(wire)
    op = wire.proto.shutdown("session-1")
    wire.proto.abandon(op)  # not cancellable: nothing is sent for it
    assert wire.sent() == [request(2, ShutdownRequest("session-1"))]
    wire.feed(reply(2, SessionClosedResponse("session-1")))
    assert wire.events() == [SessionReleased("session-1"), SessionShutDown(op)]
    with pytest.raises(SessionUnavailable, match="^unknown code-mode session session-1$"):
        wire.proto.execute("session-1", "text('unreachable')")
    wire.quiet()


def test_deferred_delegates_follow_cell_readiness_and_cancellation(wire: Wire) -> None:
    open_session(wire)
    first = wire.proto.execute("session-1", "a")
    second = wire.proto.execute("session-1", "b")
    wire.sent()
    wire.feed(
        notify(7, cell_id="1"),
        notify(8, cell_id="2"),
        notify(9, cell_id="1"),
        DelegateCancel(DelegateRequestId(9)),
    )
    assert wire.events() == []
    wire.feed(reply(3, ExecutionStarted("2")))
    events = wire.events()
    assert events[0] == CellStarted(second)
    assert started_calls(events) == [8]
    wire.feed(reply(2, ExecutionStarted("1")))
    events = wire.events()
    assert events[0] == CellStarted(first)
    assert started_calls(events) == [7]
    wire.quiet()


# --------------------------------------------------------------------------- more rules


def test_a_revoked_call_never_answered_even_when_its_result_is_applied_first() -> None:
    # Hardening #2: whatever order the shell's tasks run in, once delegate/cancel has been
    # read, no delegate/response for that call is sent.
    wire = Wire()
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(3), DelegateCancel(DelegateRequestId(3)))
    events = wire.events()
    assert [type(e) for e in events] == [DelegateStarted, DelegateRevoked]
    call = events[0].call  # type: ignore[union-attr]
    assert not wire.proto.is_active(call)
    wire.proto.complete_tool_call(call, {"late": True})
    wire.proto.reject_delegate(call, "late")
    wire.quiet()


def test_request_yield_targets_the_cells_in_flight_observation(wire: Wire) -> None:
    open_session(wire)
    op = start_cell(wire)
    wire.proto.request_yield("session-1", "1")  # the initial response is still pending
    assert wire.sent() == [OperationYield(RequestId(op.request_id or 0))]
    wire.feed(InitialResponse(RequestId(2), WireOk(yielded("1"))))
    wire.events()
    wait = wire.proto.wait("session-1", "1", yield_time_ms=60_000)
    wire.sent()
    wire.proto.request_yield("session-1", "1")
    assert wire.sent() == [OperationYield(RequestId(wait.request_id or 0))]
    wire.proto.request_yield("session-1", "other")
    wire.quiet()


def test_unanswerable_tool_results_become_error_replies_for_that_call_only(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(1), tool_call(2), tool_call(3))
    calls = [e.call for e in wire.events() if isinstance(e, DelegateStarted)]
    wire.proto.complete_tool_call(calls[0], {1, 2})  # a set is not JSON
    deep: object = []
    for _ in range(200):
        deep = [deep]
    wire.proto.complete_tool_call(calls[1], deep)
    wire.proto.complete_tool_call(calls[2], "fine")
    first, second, third = wire.sent()
    assert isinstance(first, DelegateResponse) and isinstance(first.result, WireError)
    assert first.result.message.startswith("code-mode delegate result is not valid JSON: ")
    assert isinstance(second, DelegateResponse) and isinstance(second.result, WireError)
    assert third == DelegateResponse(DelegateRequestId(3), WireOk(ToolResult("fine")))
    assert wire.proto.failure is None


def test_unknown_request_id_fails_the_connection(wire: Wire) -> None:
    with pytest.raises(
        HostProtocolViolation, match=r"^code-mode host returned unknown request ID RequestId\(9\)$"
    ):
        wire.feed(reply(9, SessionReady("x")))


def test_a_failed_shutdown_fails_the_connection(wire: Wire) -> None:
    open_session(wire)
    op = wire.proto.shutdown("session-1")
    wire.sent()
    with pytest.raises(HostProtocolViolation, match="^boom$"):
        wire.feed(OperationResponse(RequestId(2), WireError("boom")))
    assert wire.events()[0] == OperationFailed(op, Fault.CONNECTION, "boom")


def test_eof_names_the_delegate_calls_in_flight_and_a_cut_frame(wire: Wire) -> None:
    open_session(wire)
    start_cell(wire)
    wire.feed(tool_call(1))
    wire.events()
    wire.proto.receive_data(b"\x05\x00\x00\x00{")
    wire.proto.receive_eof("host exited with status 0")
    events = wire.events()
    reason = events[-1].reason  # type: ignore[union-attr]
    assert reason.startswith(
        "code-mode host closed its stdout (host exited with status 0; 1 delegate call in flight; "
        "early eof: code-mode IPC frame declares 5 payload bytes but contains 1"
    )


def test_generated_session_ids_are_not_remembered_and_chosen_ones_are_bounded() -> None:
    # Hardening #8: opening and closing sessions leaves nothing behind.
    wire = Wire(recent_session_ids=8)
    for number in range(1, 21):
        op = wire.proto.open_session()
        assert op.session_id == f"session-{number}"
        wire.sent()
        wire.feed(reply(op.request_id or 0, SessionReady(op.session_id)))
        shutdown = wire.proto.shutdown(op.session_id)
        wire.sent()
        wire.feed(reply(shutdown.request_id or 0, SessionClosedResponse(op.session_id)))
        wire.events()
    assert wire.proto.statistics()["remembered_session_ids"] == 0
    for number in range(30):
        op = wire.proto.open_session(f"chosen-{number}")
        wire.sent()
        wire.feed(reply(op.request_id or 0, SessionReady(op.session_id)))
        shutdown = wire.proto.shutdown(op.session_id)
        wire.sent()
        wire.feed(reply(shutdown.request_id or 0, SessionClosedResponse(op.session_id)))
        wire.events()
    counts = wire.proto.statistics()
    assert counts["remembered_session_ids"] == 8
    assert counts["sessions"] == 0


def test_generated_ids_step_around_recently_chosen_ones(wire: Wire) -> None:
    wire.proto.open_session("session-1")
    assert wire.proto.open_session().session_id == "session-2"


# --------------------------------------------------------------------------- local mistakes


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (lambda p: p.open_session(5), "session_id must be a string, not 5"),
        (lambda p: p.open_session("  "), "session_id: identifier must not be empty"),
        (lambda p: p.open_session(limits=1), "limits must be a CellLimits, not 1"),
        (lambda p: p.execute("session-1", None), "source must be a string, not None"),
        (lambda p: p.execute("session-1", "x", tool_call_id=3), "tool_call_id must be a string"),
        (
            lambda p: p.execute("session-1", "x", tools=[object()]),
            "tools[0] must be a ToolDefinition",
        ),
        (
            lambda p: p.execute("session-1", "x", tools=[ToolDefinition("t", kind="bogus")]),
            "tools[0].kind must be 'function' or 'freeform', not 'bogus'",
        ),
        (
            lambda p: p.execute("session-1", "x", tools=[ToolDefinition("t", description=4)]),
            "tools[0].description must be a string, not 4",
        ),
        (
            lambda p: p.execute("session-1", "x", tools=[ToolDefinition(7)]),
            "tools[0].name must be a string, not 7",
        ),
        (
            lambda p: p.execute("session-1", "x", yield_time_ms=-1),
            "yield_time_ms must be an integer from 0 to 2**64-1, not -1",
        ),
        (lambda p: p.wait("session-1", 1), "cell_id must be a string, not 1"),
        (
            lambda p: p.wait("session-1", "1", yield_time_ms=None),
            "yield_time_ms must be an integer from 0 to 2**64-1, not None",
        ),
        (lambda p: p.terminate("session-1", None), "cell_id must be a string, not None"),
    ],
)
def test_bad_arguments_are_refused_locally_and_nothing_is_sent(
    command: object, message: str
) -> None:
    wire = Wire()
    open_session(wire)
    with pytest.raises(UsageError) as info:
        command(wire.proto)  # type: ignore[operator]
    assert str(info.value).startswith(message)
    wire.quiet()
    assert wire.proto.failure is None


def test_a_schema_deeper_than_the_hosts_limit_is_refused_locally(wire: Wire) -> None:
    open_session(wire)
    schema: dict[str, object] = {}
    for _ in range(130):
        schema = {"properties": schema}
    with pytest.raises(UsageError, match=r"tools\[0\]\.input_schema nests deeper than"):
        wire.proto.execute("session-1", "x", tools=[ToolDefinition("t", input_schema=schema)])
    wire.quiet()


def test_duplicate_open_is_refused_locally(wire: Wire) -> None:
    open_session(wire)
    with pytest.raises(UsageError, match="^code-mode session session-1 is already open$"):
        wire.proto.open_session("session-1")
    wire.quiet()
