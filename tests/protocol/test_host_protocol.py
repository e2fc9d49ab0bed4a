"""HostProtocol: the host role's rules, driven synchronously (no trio)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from codemode_trio.protocol import (
    CellClosed,
    ConnectionHello,
    ConnectionReady,
    ConnectionRejected,
    DelegateCancel,
    DelegateRequest,
    DelegateResponse,
    ExecuteRequest,
    ExecutionStarted,
    FrameDecoder,
    HostMessage,
    InitialResponse,
    InvalidHello,
    MissingRequiredCapability,
    NoCompatibleVersion,
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
    TextItem,
    ToolCall,
    ToolDefinition,
    ToolResult,
    WaitCompleted,
    WaitRequest,
    WireError,
    WireOk,
    decode_host_message,
    encode_client_frame,
    encode_frame,
)
from codemode_trio.protocol.host_protocol import (
    CancelRequested,
    ClientMessageReader,
    ConnectionClosed,
    DelegateAnswered,
    DelegateRefused,
    ExecuteRequested,
    FatalClientError,
    HelloReceived,
    HostCommandError,
    HostProtocol,
    NeedData,
    SessionOpenRequested,
    ShutdownRequested,
    TerminateRequested,
    WaitRequested,
    YieldRequested,
)

ALL = (
    "session-cell-execution-resource-limits",
    "yield-observation",
    "bounded-output-v1",
    "delegate-capacity-4096",
    "tool-catalog-revision-v1",
)
ECHO = ToolDefinition("echo", "echo tool")


class Clock:
    """A settable nanosecond clock."""

    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Peer:
    """A HostProtocol with a client's view: send client messages, read host messages."""

    def __init__(self, *, byte_by_byte: bool = False, **kwargs: Any) -> None:
        self.clock = Clock()
        self.host = HostProtocol(clock=self.clock, **kwargs)
        self.byte_by_byte = byte_by_byte
        self.frames = FrameDecoder()
        self.next_id = 1

    def feed(self, data: bytes) -> list[Any]:
        events: list[Any] = []
        chunks = [data[i : i + 1] for i in range(len(data))] if self.byte_by_byte else [data]
        for chunk in chunks:
            self.host.receive_data(chunk)
            events.extend(self.drain())
        return events

    def drain(self) -> list[Any]:
        events = []
        while not isinstance(event := self.host.next_event(), NeedData | ConnectionClosed):
            events.append(event)
        return events

    def send(self, *messages: Any) -> list[Any]:
        return self.feed(b"".join(encode_client_frame(m) for m in messages))

    def request(self, request: Any, request_id: int | None = None) -> tuple[int, list[Any]]:
        if request_id is None:
            request_id = self.next_id
            self.next_id += 1
        return request_id, self.send(OperationRequest(RequestId(request_id), request))

    def out(self) -> list[HostMessage]:
        return [
            decode_host_message(p, strict=True) for p in self.frames.feed(self.host.data_to_send())
        ]

    def ready(self, optional: tuple[str, ...] = ALL) -> None:
        (event,) = self.send(ConnectionHello((1,), (), optional))
        assert isinstance(event, HelloReceived)
        self.host.answer_hello()
        self.out()

    def open(self, session_id: str = "s1") -> None:
        rid, events = self.request(OpenSessionRequest(session_id))
        assert events == [SessionOpenRequested(RequestId(rid), session_id, None, False)]
        self.host.accept_session(rid)
        assert self.out() == [OperationResponse(RequestId(rid), WireOk(SessionReady(session_id)))]

    def execute(
        self, session_id: str = "s1", tools: tuple[ToolDefinition, ...] = (), **kwargs: Any
    ) -> tuple[int, str]:
        rid, events = self.request(ExecuteRequest(session_id, "src", "call-9", tools, **kwargs))
        (event,) = events
        assert isinstance(event, ExecuteRequested)
        cell_id = self.host.start_cell(rid)
        assert self.out() == [OperationResponse(RequestId(rid), WireOk(ExecutionStarted(cell_id)))]
        return rid, cell_id


def result(cell_id: str, text: str | None = None, **kwargs: Any) -> RuntimeResponse:
    items = () if text is None else (TextItem(text),)
    return RuntimeResponse("result", cell_id, items, **kwargs)


def outcome(message: HostMessage) -> Any:
    assert isinstance(message, OperationResponse)
    assert isinstance(message.result, WireOk)
    assert isinstance(message.result.value, WaitCompleted)
    return message.result.value.outcome


def error_of(message: HostMessage) -> str:
    assert isinstance(message, OperationResponse | InitialResponse)
    assert isinstance(message.result, WireError)
    return message.result.message


# ----------------------------------------------------------------------------- handshake


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_ready_grants_the_sorted_intersection_of_offered_capabilities(byte_by_byte: bool) -> None:
    peer = Peer(byte_by_byte=byte_by_byte)
    (event,) = peer.send(
        ConnectionHello((2, 1), ("yield-observation",), ("x-foo", *ALL[2:], ALL[0]))
    )
    assert isinstance(event, HelloReceived)
    assert event.verdict == ConnectionReady(1, tuple(sorted(ALL)))
    assert peer.out() == []  # nothing is sent before the command
    peer.host.answer_hello()
    assert peer.out() == [ConnectionReady(1, tuple(sorted(ALL)))]
    assert peer.host.capabilities == frozenset(ALL)


def test_version_is_judged_before_capabilities() -> None:
    peer = Peer()
    (event,) = peer.send(ConnectionHello((2,), ("a-unknown",), ()))
    assert event.verdict == ConnectionRejected(NoCompatibleVersion((1,)))


def test_rejection_names_the_smallest_missing_capability_and_reads_no_more() -> None:
    peer = Peer()
    hello = ConnectionHello((1,), ("z-unknown", "a-unknown", "yield-observation"), ())
    later = OperationRequest(RequestId(1), OpenSessionRequest("s1"))
    (event,) = peer.send(hello, later)
    assert event.verdict == ConnectionRejected(MissingRequiredCapability("a-unknown"))
    peer.host.answer_hello()
    assert peer.out() == [ConnectionRejected(MissingRequiredCapability("a-unknown"))]
    assert peer.host.rejected
    assert isinstance(peer.host.next_event(), ConnectionClosed)
    assert peer.out() == []


def test_a_first_message_that_is_not_a_hello_is_rejected_as_invalid_hello() -> None:
    peer = Peer()
    (event,) = peer.send(OperationCancel(RequestId(3)))
    assert event == HelloReceived(
        None, ConnectionRejected(InvalidHello("first message must be connection/hello"))
    )


def test_nothing_after_the_hello_is_read_until_it_is_answered() -> None:
    peer = Peer()
    events = peer.send(
        ConnectionHello((1,), (), ()), OperationRequest(RequestId(1), ShutdownRequest("s"))
    )
    assert [type(e) for e in events] == [HelloReceived]
    peer.host.answer_hello()
    assert peer.out() == [ConnectionReady(1, ())]
    assert peer.drain() == []  # the shutdown of an unknown session is answered by the rules
    assert error_of(peer.out()[0]) == "unknown code-mode session s"


def test_second_hello_is_fatal_and_the_machine_stays_failed() -> None:
    peer = Peer()
    peer.ready()
    with pytest.raises(FatalClientError) as info:
        peer.send(ConnectionHello((1,), (), ()))
    assert info.value.stderr_text() == "Error: received a second code-mode client hello\n"
    with pytest.raises(FatalClientError):
        peer.host.next_event()
    assert peer.out() == []


def test_undecodable_first_frame_is_fatal_with_the_hello_context() -> None:
    peer = Peer()
    with pytest.raises(FatalClientError) as info:
        peer.feed(encode_frame(b""))
    assert info.value.context == "failed to read code-mode client hello"
    assert info.value.cause is not None
    assert info.value.cause.startswith("failed to decode code-mode IPC frame: ")


def test_oversize_header_is_fatal_once_the_four_header_bytes_arrive() -> None:
    peer = Peer()
    peer.ready()
    with pytest.raises(FatalClientError) as info:
        peer.feed((64 * 1024 * 1024 + 1).to_bytes(4, "little"))
    assert info.value.stderr_text() == (
        "Error: failed to read code-mode client message\n\nCaused by:\n"
        "    code-mode IPC frame length 67108865 exceeds 67108864 bytes\n"
    )


def test_eof_at_a_frame_boundary_closes_cleanly() -> None:
    peer = Peer()
    peer.ready()
    peer.host.receive_eof()
    assert isinstance(peer.host.next_event(), ConnectionClosed)


def test_eof_inside_a_frame_is_early_eof() -> None:
    peer = Peer()
    peer.ready()
    peer.feed(b"\x05\x00\x00\x00{")
    peer.host.receive_eof()
    with pytest.raises(FatalClientError) as info:
        peer.host.next_event()
    assert (info.value.context, info.value.cause) == (
        "failed to read code-mode client message",
        "early eof",
    )


# ----------------------------------------------------------------------------- request ids


def test_reusing_an_in_flight_request_id_is_fatal() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, _ = peer.execute()
    with pytest.raises(FatalClientError) as info:
        peer.request(WaitRequest("s1", "1", 10), rid)
    assert str(info.value) == "duplicate code-mode request ID RequestId(1)".replace("1)", f"{rid})")


def test_a_finished_id_is_refused_within_the_window_and_reusable_after_it() -> None:
    peer = Peer()
    peer.ready()
    peer.request(ShutdownRequest("nope"), -5)
    for request_id in range(1, 4096):
        peer.request(ShutdownRequest("nope"), request_id)
    peer.out()
    with pytest.raises(FatalClientError, match=r"RequestId\(-5\)"):
        peer.request(ShutdownRequest("nope"), -5)

    fresh = Peer()
    fresh.ready()
    fresh.request(ShutdownRequest("nope"), -5)
    for request_id in range(1, 4097):
        fresh.request(ShutdownRequest("nope"), request_id)
    fresh.request(ShutdownRequest("nope"), -5)  # the 4097th-newest id is forgotten
    assert error_of(fresh.out()[-1]) == "unknown code-mode session nope"


def test_reader_alone_applies_the_same_checks() -> None:
    reader = ClientMessageReader()
    reader.receive_data(encode_client_frame(ConnectionHello((1,), (), ())))
    assert isinstance(reader.next_message(), ConnectionHello)
    frame = encode_client_frame(OperationRequest(RequestId(7), ShutdownRequest("s")))
    reader.receive_data(frame + frame)
    assert isinstance(reader.next_message(), OperationRequest)
    with pytest.raises(FatalClientError, match=r"RequestId\(7\)"):
        reader.next_message()


# ----------------------------------------------------------------------------- sessions


def test_session_open_rules() -> None:
    peer = Peer()
    peer.ready()
    peer.open("s1")
    _, events = peer.request(OpenSessionRequest("s1"))
    assert events == []
    assert error_of(peer.out()[0]) == "code-mode session ID `s1` is already open"
    rid, _ = peer.request(ShutdownRequest("s1"))
    peer.host.close_session(rid)
    peer.out()
    peer.request(OpenSessionRequest("s1"))
    assert error_of(peer.out()[0]) == "code-mode session ID `s1` was reused"


def test_a_session_id_opened_4096_ids_ago_may_be_reopened() -> None:
    peer = Peer()
    peer.ready()
    peer.open("old")
    for n in range(4095):
        peer.open(f"s{n}")
    peer.request(OpenSessionRequest("old"))
    assert error_of(peer.out()[0]) == "code-mode session ID `old` is already open"
    rid, _ = peer.request(ShutdownRequest("old"))
    peer.host.close_session(rid)
    peer.out()
    peer.open("s-last")  # the 4097th open pushes "old" out of the window
    peer.open("old")


def test_open_carries_limits_and_truncation_mode() -> None:
    peer = Peer()
    peer.ready()
    _, (event,) = peer.request(OpenSessionRequest("s1", output_truncation="server"))
    assert event.server_truncation


def test_requests_for_an_unknown_session_are_answered_by_the_rules() -> None:
    peer = Peer()
    peer.ready()
    for request in (
        ExecuteRequest("zz", "src"),
        WaitRequest("zz", "1", 0),
        TerminateRequest("zz", "1"),
        ShutdownRequest("zz"),
    ):
        _, events = peer.request(request)
        assert events == []
        assert error_of(peer.out()[0]) == "unknown code-mode session zz"


# ----------------------------------------------------------------------------- cells


def test_cell_ids_count_per_session_and_close_after_the_result() -> None:
    peer = Peer()
    peer.ready()
    peer.open("a")
    peer.open("b")
    assert peer.execute("a")[1] == "1"
    rid, cell = peer.execute("a")
    assert cell == "2"
    assert peer.execute("b")[1] == "1"
    peer.clock.now += 500
    peer.host.send_initial_response(rid, result("2", "hi"))
    initial, closed = peer.out()
    assert initial == InitialResponse(
        RequestId(rid),
        WireOk(result("2", "hi", result_buffered_for_ns=0, code_mode_host_duration_ns=500)),
    )
    assert closed == CellClosed("a", "2")
    assert peer.host.active_cells == 2


def test_wait_before_the_initial_response_has_an_active_observer() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    _, cell = peer.execute()
    _, events = peer.request(WaitRequest("s1", cell, 100))
    assert events == []
    assert error_of(peer.out()[0]) == "exec cell 1 already has an active observer"


def test_wait_on_a_missing_cell_is_missing_cell_not_an_error() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    peer.request(WaitRequest("s1", "", 100))
    missing = outcome(peer.out()[0])
    assert not missing.live
    assert missing.response == result(
        "",
        None,
        error_text="exec cell  not found",
        result_buffered_for_ns=0,
        code_mode_host_duration_ns=0,
    )


def test_second_concurrent_wait_is_refused_and_the_first_still_completes() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute()
    peer.host.send_initial_response(rid, RuntimeResponse("yielded", cell))
    peer.out()
    first, (event,) = peer.request(WaitRequest("s1", cell, 100, 7))
    assert event == WaitRequested(RequestId(first), "s1", cell, 100, 7)
    peer.request(WaitRequest("s1", cell, 100))
    assert error_of(peer.out()[0]) == "exec cell 1 already has an active observer"
    peer.host.answer_wait(first, result(cell, "done"))
    done, closed = peer.out()
    assert outcome(done).live
    assert closed == CellClosed("s1", cell)
    peer.request(WaitRequest("s1", cell, 100))
    assert not outcome(peer.out()[0]).live


def test_a_command_for_a_request_not_pending_names_what_was_expected() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    with pytest.raises(
        HostCommandError, match=r"^RequestId\(99\) is not a pending initial response$"
    ):
        peer.host.send_initial_response(99, RuntimeResponse("result", "1"))
    with pytest.raises(HostCommandError, match=r"^RequestId\(99\) is not a pending wait$"):
        peer.host.answer_wait(99, result("1"))


def test_cancel_ends_a_wait_and_leaves_the_cell_running() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute()
    peer.host.send_initial_response(rid, RuntimeResponse("yielded", cell))
    peer.out()
    wait, _ = peer.request(WaitRequest("s1", cell, 10_000))
    events = peer.send(OperationCancel(RequestId(wait)))
    assert events == [CancelRequested(RequestId(wait), "s1", cell)]
    assert peer.out() == [
        OperationResponse(RequestId(wait), WireError("code-mode request cancelled"))
    ]
    assert not peer.host.is_pending(wait)
    with pytest.raises(HostCommandError):
        peer.host.answer_wait(wait, result(cell))
    _, (event,) = peer.request(WaitRequest("s1", cell, 10))
    assert isinstance(event, WaitRequested)


def test_cancel_of_an_execute_or_unknown_id_is_ignored() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, _ = peer.execute()
    assert peer.send(OperationCancel(RequestId(rid)), OperationCancel(RequestId(99))) == []
    assert peer.out() == []
    assert peer.host.is_pending(rid)


def test_yield_targets_a_pending_initial_response_or_wait() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute()
    assert peer.send(OperationYield(RequestId(rid))) == [YieldRequested(RequestId(rid), "s1", cell)]
    peer.host.send_initial_response(rid, RuntimeResponse("yielded", cell))
    assert peer.send(OperationYield(RequestId(rid))) == []  # already answered: ignored


def test_terminate_with_a_pending_initial_response_orders_cancel_terminate_initial_closed() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute(tools=(ECHO,))
    did = peer.host.call_tool("s1", cell, ECHO, {"a": 1})
    peer.out()
    term, (event,) = peer.request(TerminateRequest("s1", cell))
    assert event == TerminateRequested(RequestId(term), "s1", cell, None)
    terminated = RuntimeResponse("terminated", cell, (TextItem("so far"),))
    peer.host.answer_terminate(term, terminated)
    peer.host.send_initial_response(rid, RuntimeResponse("terminated", cell))
    cancel, term_answer, initial, closed = peer.out()
    assert cancel == DelegateCancel(did)
    assert outcome(term_answer).response.kind == "terminated"
    assert isinstance(initial, InitialResponse)
    assert closed == CellClosed("s1", cell)
    peer.request(TerminateRequest("s1", cell))
    assert not outcome(peer.out()[0]).live


# ----------------------------------------------------------------------------- delegates


def test_delegate_ids_count_per_connection_and_call_ids_per_cell() -> None:
    peer = Peer()
    peer.ready()
    peer.open("a")
    peer.open("b")
    _, a1 = peer.execute("a", (ECHO,))
    _, b1 = peer.execute("b", (ECHO,))
    first = peer.host.call_tool("a", a1, ECHO, 1)
    second = peer.host.call_tool("b", b1, ECHO, 2)
    third = peer.host.call_tool("a", a1, ECHO, 3)
    note = peer.host.send_notification("a", a1, "hello")
    assert (first, second, third, note) == (1, 2, 3, 4)
    assert peer.out() == [
        DelegateRequest(first, "a", ToolCall(a1, "tool-1", "echo", None, "function", 1)),
        DelegateRequest(second, "b", ToolCall(b1, "tool-1", "echo", None, "function", 2)),
        DelegateRequest(third, "a", ToolCall(a1, "tool-2", "echo", None, "function", 3)),
        DelegateRequest(note, "a", Notification("call-9", a1, "hello")),
    ]
    events = peer.send(
        DelegateResponse(second, WireOk(ToolResult({"ok": 1}))),
        DelegateResponse(second, WireOk(ToolResult("again"))),  # duplicate: ignored
        DelegateResponse(note, WireOk(NotificationDelivered())),
    )
    assert events == [
        DelegateAnswered(second, "b", b1, WireOk(ToolResult({"ok": 1}))),
        DelegateAnswered(note, "a", a1, WireOk(NotificationDelivered())),
    ]
    assert peer.host.pending_delegates == 2


@pytest.mark.parametrize(("optional", "cap"), [((), 1024), (ALL, 4096)])
def test_pending_delegate_cap(optional: tuple[str, ...], cap: int) -> None:
    peer = Peer()
    peer.ready(optional)
    peer.open()
    _, cell = peer.execute(tools=(ECHO,))
    for _ in range(cap):
        peer.host.call_tool("s1", cell, ECHO, None)
    peer.out()
    with pytest.raises(DelegateRefused, match="too many pending delegate calls"):
        peer.host.send_notification("s1", cell, "x")
    assert peer.out() == []


def test_a_finished_cell_cancels_its_outstanding_calls_before_its_result() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute(tools=(ECHO,))
    did = peer.host.call_tool("s1", cell, ECHO, {})
    peer.out()
    peer.host.send_initial_response(rid, result(cell, "end"))
    cancel, initial, closed = peer.out()
    assert cancel == DelegateCancel(did)
    assert isinstance(initial, InitialResponse)
    assert closed == CellClosed("s1", cell)
    assert peer.send(DelegateResponse(did, WireOk(ToolResult(1)))) == []  # late: ignored
    with pytest.raises(HostCommandError):
        peer.host.call_tool("s1", cell, ECHO, {})


# ----------------------------------------------------------------------------- shutdown


def test_shutdown_cancels_calls_closes_every_cell_then_answers() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    first, c1 = peer.execute(tools=(ECHO,))
    peer.host.send_initial_response(first, RuntimeResponse("yielded", c1))
    peer.out()
    second, c2 = peer.execute(tools=(ECHO,))
    did = peer.host.call_tool("s1", c1, ECHO, None)
    peer.out()
    rid, events = peer.request(ShutdownRequest("s1"))
    assert events == [ShutdownRequested(RequestId(rid), "s1")]
    with pytest.raises(HostCommandError, match="still has observers"):
        peer.host.close_session(rid)  # cell 2's initial response is still pending
    peer.host.send_initial_response(second, RuntimeResponse("terminated", c2))
    peer.host.close_session(rid)
    assert peer.out() == [
        InitialResponse(
            RequestId(second),
            WireOk(RuntimeResponse("terminated", c2, code_mode_host_duration_ns=0)),
        ),
        CellClosed("s1", c2),
        DelegateCancel(did),
        CellClosed("s1", c1),
        OperationResponse(RequestId(rid), WireOk(SessionClosedResponse("s1"))),
    ]
    assert peer.host.active_cells == 0
    peer.request(ShutdownRequest("s1"))
    assert error_of(peer.out()[0]) == "unknown code-mode session s1"


# ----------------------------------------------------------------------------- execute rules


def test_negative_max_output_tokens_is_an_operation_error() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    _, events = peer.request(ExecuteRequest("s1", "src", max_output_tokens=-1))
    assert events == []
    assert error_of(peer.out()[0]) == (
        "invalid code-mode execute request: number too small to fit in target type"
    )
    assert peer.execute()[1] == "1"  # a failed execute consumes no cell id


def test_catalog_revisions_follow_the_observed_sequence() -> None:
    a = (ToolDefinition("a"),)
    b = (ToolDefinition("b"),)
    peer = Peer()
    peer.ready()
    peer.open("s1")
    peer.open("s2")

    def run(session: str, revision: int, tools: tuple[ToolDefinition, ...]) -> Any:
        rid, events = peer.request(
            ExecuteRequest(session, "x", enabled_tools=tools, catalog_revision=revision)
        )
        if not events:
            return error_of(peer.out()[0])
        peer.host.answer_error(rid, "not run")
        peer.out()
        return [t.name for t in events[0].tools]

    assert run("s1", 5, ()) == "unknown code-mode catalog revision"
    assert run("s1", 5, a) == ["a"]
    assert run("s1", 5, a) == ["a"]
    assert run("s1", 5, b) == "conflicting code-mode catalog revision"
    assert run("s1", 5, ()) == ["a"]
    assert run("s1", 3, b) == ["b"]
    assert run("s1", 3, ()) == "unknown code-mode catalog revision"
    assert run("s1", 5, ()) == ["a"]
    assert run("s2", 3, ()) == "unknown code-mode catalog revision"
    assert run("s1", 0, ()) == "invalid code-mode catalog revision"


def test_commands_that_break_the_protocol_raise_and_send_nothing() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute()
    with pytest.raises(HostCommandError):
        peer.host.answer_wait(rid, result(cell))
    with pytest.raises(HostCommandError):
        peer.host.start_cell(rid)
    with pytest.raises(HostCommandError):
        peer.host.answer_hello()
    assert peer.out() == []


def test_host_protocol_imports_without_trio() -> None:
    script = (
        "import sys\n"
        "from codemode_trio.protocol import HostProtocol\n"
        "HostProtocol().receive_data(b'')\n"
        "print(sorted(m for m in ('trio', 'anyio') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_close_cell_cancels_calls_then_closes_a_cell_without_observers() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute(tools=(ECHO,))
    with pytest.raises(HostCommandError, match="still has observers"):
        peer.host.close_cell("s1", cell)
    peer.host.send_initial_response(rid, RuntimeResponse("yielded", cell))
    did = peer.host.call_tool("s1", cell, ECHO, None)
    peer.out()
    peer.host.close_cell("s1", cell)
    assert peer.out() == [DelegateCancel(did), CellClosed("s1", cell)]
    assert not peer.host.cell_is_open("s1", cell)


def test_outstanding_calls_are_cancelled_newest_first() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute(tools=(ECHO,))
    ids = [peer.host.call_tool("s1", cell, ECHO, n) for n in range(3)]
    peer.out()
    peer.host.send_initial_response(rid, RuntimeResponse("terminated", cell))
    assert peer.out()[:3] == [DelegateCancel(did) for did in reversed(ids)]


def test_a_detached_initial_response_lets_a_wait_attach_and_keeps_the_result() -> None:
    peer = Peer()
    peer.ready()
    peer.open()
    rid, cell = peer.execute()
    peer.host.detach_initial(rid)
    wait, (event,) = peer.request(WaitRequest("s1", cell, 300))
    assert isinstance(event, WaitRequested)
    peer.host.answer_wait_missing(wait)
    assert peer.host.cell_is_open("s1", cell)  # the initial response is still to come
    peer.host.send_initial_response(rid, result(cell, "x"))
    missing, initial, closed = peer.out()
    assert not outcome(missing).live
    assert outcome(missing).response.error_text == f"exec cell {cell} not found"
    assert isinstance(initial, InitialResponse)
    assert closed == CellClosed("s1", cell)


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_a_whole_session_reads_the_same_in_one_chunk_or_byte_by_byte(byte_by_byte: bool) -> None:
    peer = Peer(byte_by_byte=byte_by_byte)
    peer.ready()
    peer.open()
    rid, cell = peer.execute(tools=(ECHO,))
    did = peer.host.call_tool("s1", cell, ECHO, {"a": 1})
    note = peer.host.send_notification("s1", cell, "hi")
    events = peer.send(
        DelegateResponse(did, WireOk(ToolResult({"echo": 1}))),
        OperationYield(RequestId(rid)),
        DelegateResponse(note, WireOk(NotificationDelivered())),
    )
    assert events == [
        DelegateAnswered(did, "s1", cell, WireOk(ToolResult({"echo": 1}))),
        YieldRequested(RequestId(rid), "s1", cell),
        DelegateAnswered(note, "s1", cell, WireOk(NotificationDelivered())),
    ]
    peer.host.send_initial_response(rid, result(cell, "done"))
    shutdown, (event,) = peer.request(ShutdownRequest("s1"))
    assert event == ShutdownRequested(RequestId(shutdown), "s1")
    peer.host.close_session(shutdown)
    kinds = [type(m).__name__ for m in peer.out()]
    assert kinds == [
        "DelegateRequest",
        "DelegateRequest",
        "InitialResponse",
        "CellClosed",
        "OperationResponse",
    ]
