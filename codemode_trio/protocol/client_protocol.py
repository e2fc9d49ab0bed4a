r"""``ClientProtocol``: every rule of the client role, as a synchronous state machine.

Modelled on h11: bytes in, events out; commands in, bytes out. It never imports trio and never
performs I/O, so the same rules drive the Trio client, a test, or any other event loop.

.. code-block:: python

    proto = ClientProtocol()
    transport.write(proto.data_to_send())          # the hello
    proto.receive_data(transport.read())           # connection/ready
    op = proto.open_session("s1")                  # a command: returns the request's handle
    transport.write(proto.data_to_send())
    proto.receive_data(transport.read())
    while not isinstance(event := proto.next_event(), NeedData):
        ...                                        # SessionOpened(op), DelegateStarted(call), ...

Inputs, each applied in the order it happened (one ordering rule, no side channel):

- ``receive_data(bytes)`` / ``receive_eof(details)``: what the host sent;
- commands: :meth:`open_session`, :meth:`execute`, :meth:`wait`, :meth:`terminate`,
  :meth:`shutdown`, :meth:`request_yield`;
- the caller's fate: :meth:`abandon` (the caller went away: send ``operation/cancel`` once, and
  terminate or shut down what the host admits anyway) and :meth:`claim` (the caller took the
  session or the cell);
- delegate outcomes: :meth:`complete_tool_call`, :meth:`complete_notification`,
  :meth:`reject_delegate` (a revoked call's outcome is dropped: no reply after
  ``delegate/cancel``);
- :meth:`fail`: a local reason to give up (a deadline passed, the stream broke).

Outputs: :meth:`next_event` (see :mod:`~codemode_trio.protocol.client_events`) and
:meth:`data_to_send`.

Errors: a caller's mistake raises :class:`UsageError` and sends nothing;
a command on an unknown or closing session raises :class:`SessionUnavailable`; any command
after a failure raises :class:`ConnectionUnusable`. Whatever the host does wrong makes
``receive_data`` raise :class:`HostProtocolViolation` with the reference client's text, after
queueing the fail-stop events (every operation failed, every delegate call revoked, every live
cell released exactly once, then :class:`Failed`); the machine stays failed for good.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .checks import (
    check_cell_id,
    check_cell_limits,
    check_execute,
    check_opt_u64,
    check_output_truncation,
    check_session_id,
    check_u64,
)
from .client_delegates import DelegateTable, encode_reply
from .client_events import (
    NEED_DATA,
    CellObserved,
    CellReleased,
    CellStarted,
    DelegateCall,
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
    OperationKind,
    SessionOpened,
    SessionReleased,
    SessionShutDown,
)
from .codec import decode_host_message, encode_client_message
from .content import CellLimits, ToolDefinition
from .errors import (
    ConnectionUnusable,
    EncodeError,
    HandshakeError,
    HostProtocolViolation,
    ProtocolViolation,
    SessionUnavailable,
    UsageError,
)
from .framing import FrameDecoder, encode_frame
from .handshake import (
    ALL_CAPABILITIES,
    BOUNDED_OUTPUT,
    DELEGATE_CAPACITY_4096,
    SESSION_LIMITS,
    TOOL_CATALOG_REVISION,
    YIELD_OBSERVATION,
    HandshakeResult,
    build_hello,
    evaluate_handshake,
)
from .ids import I64_MAX, RequestId
from .lanes import (
    DUAL_WEBSOCKET,
    WRONG_LANE_FROM_HOST,
    Lane,
    bulk_pairing_token,
    host_message_lane,
)
from .messages import (
    CellClosed,
    ClientMessage,
    ConnectionReady,
    ConnectionRejected,
    DelegateCancel,
    DelegateRequest,
    ExecuteRequest,
    ExecutionStarted,
    HostMessage,
    HostRequest,
    InitialResponse,
    NotificationDelivered,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationResponse,
    OperationYield,
    SessionClosedResponse,
    SessionReady,
    ShutdownRequest,
    TerminateRequest,
    ToolResult,
    WaitCompleted,
    WaitRequest,
    WireError,
    WireOk,
)
from .recent_ids import RecentIds
from .values import JSON

__all__ = ["DEFAULT_WAIT_YIELD_TIME_MS", "ClientProtocol", "FrameObserver"]

#: Called with ``("client->host" | "host->client", payload)`` for every frame (transcripts).
FrameObserver = Callable[[str, bytes], None]

#: The host's default wait deadline (a wait's ``yield_time_ms`` is required on the wire).
DEFAULT_WAIT_YIELD_TIME_MS = 10_000

CLIENT_TO_HOST = "client->host"
HOST_TO_CLIENT = "host->client"


# What an invalid answer to each request is called in the reference client's error text.
_ANSWERS = {
    OperationKind.OPEN: "open-session",
    OperationKind.EXECUTE: "execute",
    OperationKind.WAIT: "cell",
    OperationKind.TERMINATE: "cell",
    OperationKind.SHUTDOWN: "shutdown",
}
_OBSERVATIONS = (OperationKind.WAIT, OperationKind.TERMINATE)

_HANDSHAKE = "handshake"
_READY = "ready"
_FAILED = "failed"


class _Cell:
    """A live cell: from ``execution/started`` until it is released."""

    __slots__ = ("cell_id", "delegate_ids", "session")

    def __init__(self, session: _Session, cell_id: str) -> None:
        self.session = session
        self.cell_id = cell_id
        self.delegate_ids: set[int] = set()


class _Session:
    __slots__ = ("cells", "closing", "pending_executes", "session_id")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.closing = False
        self.cells: dict[str, _Cell] = {}
        self.pending_executes = 0


class ClientProtocol:
    """The client side of one connection (see the module docstring)."""

    def __init__(
        self,
        *,
        capabilities: Iterable[str] = ALL_CAPABILITIES,
        strict: bool = False,
        max_pending_delegates: int = 1024,
        max_parked_delegates: int = 1024,
        recent_delegate_ids: int = 4096,
        recent_session_ids: int = 4096,
        on_frame: FrameObserver | None = None,
        websocket: bool = False,
    ) -> None:
        """Start the handshake: the hello is the first thing :meth:`data_to_send` returns.

        ``capabilities`` are offered as optional. ``strict`` decodes host messages strictly.
        ``max_pending_delegates`` is raised to 4096 when the host grants
        ``delegate-capacity-4096``. ``on_frame`` sees every frame's payload, both ways.
        ``websocket`` says the transport can open a second socket: only then may
        ``dual-websocket-v1`` be offered, and when the host grants it, :attr:`bulk_token`
        names the bulk lane to open (see :mod:`~codemode_trio.protocol.lanes`).
        """
        try:
            self._hello = build_hello(optional=capabilities)
        except ValueError as exc:
            raise UsageError(f"invalid capabilities: {exc}") from None
        if DUAL_WEBSOCKET in self._hello.optional_capabilities and not websocket:
            raise UsageError(
                f"invalid capabilities: `{DUAL_WEBSOCKET}` needs a WebSocket transport"
            )
        self._websocket = websocket
        #: The host's ``bulkConnectionToken`` once it granted ``dual-websocket-v1``, else ``None``.
        self.bulk_token: str | None = None
        # Two lanes once the host granted them: each has its own bytes, in and out.
        self._lanes = False
        self._bulk_decoder = FrameDecoder()
        self._bulk_out: list[bytes] = []
        self._strict = strict
        self._table = DelegateTable(
            max_active=max_pending_delegates,
            max_parked=max_parked_delegates,
            recent=recent_delegate_ids,
        )
        self._on_frame = on_frame
        self._decoder = FrameDecoder()
        self._out: list[bytes] = []
        self._events: deque[Event] = deque()
        self._state = _HANDSHAKE
        self._failure: str | None = None
        #: What the host granted (empty until the handshake completes).
        self.capabilities: frozenset[str] = frozenset()
        #: The negotiated protocol version (``None`` until the handshake completes).
        self.protocol_version: int | None = None
        self._next_request_id = 1
        self._session_numbers = 0
        self._sessions: dict[str, _Session] = {}
        self._opening: dict[str, Operation] = {}
        self._pending: dict[int, Operation] = {}
        self._initial: dict[int, Operation] = {}
        self._deferred_waits: deque[Operation] = deque()
        # Session ids chosen by callers: the host refuses to reopen one of its last 4096 ids,
        # so generated ids step around them (open sessions are caught through _sessions).
        self._recent_sessions: RecentIds[str] = RecentIds(recent_session_ids)
        self.frames_sent = 0
        self.frames_received = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self._queue(self._hello)

    # ------------------------------------------------------------------ observation

    @property
    def handshake_complete(self) -> bool:
        """True once ``connection/ready`` was accepted."""
        return self._state == _READY or (
            self._state == _FAILED and self.protocol_version is not None
        )

    @property
    def failure(self) -> str | None:
        """The first failure reason, or ``None`` while the connection is usable."""
        return self._failure

    @property
    def max_pending_delegates(self) -> int:
        """Delegate calls the host may have pending at once (4096 once it granted that)."""
        return self._table.max_active

    def statistics(self) -> dict[str, int]:
        """Counts of live protocol state and of traffic."""
        return {
            "pending_requests": len(self._pending),
            "pending_initial_responses": len(self._initial),
            "active_delegates": self._table.active,
            "parked_delegates": len(self._table.parked),
            "deferred_waits": len(self._deferred_waits),
            "sessions": len(self._sessions),
            "live_cells": sum(len(s.cells) for s in self._sessions.values()),
            "remembered_session_ids": len(self._recent_sessions),
            "remembered_delegate_ids": self._table.remembered,
            "frames_sent": self.frames_sent,
            "frames_received": self.frames_received,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }

    def knows_session(self, session_id: str) -> bool:
        """Whether ``session_id`` is open (or closing) on this connection."""
        return session_id in self._sessions

    def delegate_calls_in_flight(self) -> int:
        """Delegate calls being run or parked (for describing a dead host)."""
        return self._table.active + len(self._table.parked)

    # ------------------------------------------------------------------ bytes

    def data_to_send(self, lane: Lane = Lane.CONTROL) -> bytes:
        """Every byte queued for the host on ``lane`` since the last call (possibly ``b""``).

        The bulk lane has bytes only once the host granted ``dual-websocket-v1``.
        """
        out = self._out if lane is Lane.CONTROL else self._bulk_out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    def next_event(self) -> Event | NeedData:
        """The next event, or :class:`NeedData` when there is nothing more until new input."""
        events = self._events
        return events.popleft() if events else NEED_DATA

    def receive_data(self, data: bytes | bytearray | memoryview, lane: Lane = Lane.CONTROL) -> None:
        """Apply bytes the host sent on ``lane``.

        Raises :class:`HostProtocolViolation` (after queueing the fail-stop events) when the
        host broke the protocol, and :class:`HandshakeError` when it refused or botched the
        handshake. Bytes after a failure are ignored.
        """
        if self._state == _FAILED:
            return
        self.bytes_received += len(data)
        bulk = lane is Lane.BULK
        if bulk and not self._lanes and data:
            # Nothing may arrive there before the handshake granted the lane.
            self._violation(WRONG_LANE_FROM_HOST)
        try:
            payloads = (self._bulk_decoder if bulk else self._decoder).feed(data)
        except ProtocolViolation as exc:
            what = "message" if self._state == _READY else "hello"
            self._violation(f"failed to read code-mode host {what}: {exc}")
        observe = self._on_frame
        for payload in payloads:
            self.frames_received += 1
            if observe is not None:
                observe(HOST_TO_CLIENT, payload)
            try:
                message = decode_host_message(payload, strict=self._strict)
            except ProtocolViolation as exc:
                what = "message" if self._state == _READY else "hello"
                self._violation(f"failed to read code-mode host {what}: {exc}")
            if self._state == _READY:
                if self._lanes and host_message_lane(message) is not lane:
                    self._violation(WRONG_LANE_FROM_HOST)
                self._handle(message)
            else:
                self._complete_handshake(message)
            if self._state == _FAILED:
                assert self._failure is not None
                raise HostProtocolViolation(self._failure)

    def receive_eof(self, details: str | None = None, lane: Lane = Lane.CONTROL) -> None:
        """The host closed its side (either lane). ``details`` may say why (exit status, stderr).

        During the handshake this raises :class:`ConnectionUnusable` (``code-mode host exited
        during handshake``); afterwards it fails the connection with ``code-mode host closed
        its stdout (...)``, naming the delegate calls in flight and a frame cut short.
        """
        if self._state == _FAILED:
            return
        notes = [details] if details else []
        if self._state == _HANDSHAKE:
            reason = "code-mode host exited during handshake"
            self.fail(f"{reason} ({'; '.join(notes)})" if notes else reason)
            raise ConnectionUnusable(self._failure or reason)
        in_flight = self.delegate_calls_in_flight()
        notes.append(f"{in_flight} delegate call{'s' if in_flight != 1 else ''} in flight")
        try:
            (self._bulk_decoder if lane is Lane.BULK else self._decoder).eof()
        except ProtocolViolation as exc:
            notes.append(str(exc))
        self.fail(f"code-mode host closed its stdout ({'; '.join(notes)})")

    # ------------------------------------------------------------------ commands

    def open_session(
        self,
        session_id: str | None = None,
        *,
        limits: CellLimits | None = None,
        output_truncation: str | None = None,
    ) -> Operation:
        """Send ``session/open``; ``session_id`` ``None`` picks ``session-N``.

        ``limits`` need ``session-cell-execution-resource-limits``, ``output_truncation``
        (``"client"``/``"server"``) needs ``bounded-output-v1``.
        """
        self._require_usable()
        if limits is not None:
            limits = check_cell_limits(limits)
            if not limits.is_default and SESSION_LIMITS not in self.capabilities:
                raise UsageError(
                    "code-mode host does not support session resource limits: "
                    f"missing `{SESSION_LIMITS}` capability"
                )
        if output_truncation is not None:
            check_output_truncation(output_truncation)
            self._require_capability(BOUNDED_OUTPUT, "output truncation")
        if session_id is None:
            session_id = self._generate_session_id()
        else:
            check_session_id(session_id)
            if session_id in self._sessions or session_id in self._opening:
                raise UsageError(f"code-mode session {session_id} is already open")
            self._recent_sessions.add(session_id)
        request = OpenSessionRequest(
            session_id, None if limits is None or limits.is_default else limits, output_truncation
        )
        op = Operation(OperationKind.OPEN, session_id)
        self._send(op, request)
        self._opening[session_id] = op
        return op

    def execute(
        self,
        session_id: str,
        source: str,
        *,
        tool_call_id: str = "",
        tools: Sequence[ToolDefinition] = (),
        yield_time_ms: int | None = None,
        max_output_tokens: int | None = None,
        catalog_revision: int | None = None,
    ) -> Operation:
        """Send ``session/execute``: run ``source`` as a new cell of the session."""
        self._require_usable()
        definitions = check_execute(
            source, tool_call_id, tools, yield_time_ms, max_output_tokens, catalog_revision
        )
        if catalog_revision is not None:
            self._require_capability(TOOL_CATALOG_REVISION, "catalog_revision")
        session = self._require_ready(session_id)
        request = ExecuteRequest(
            session_id,
            source,
            tool_call_id,
            definitions,
            yield_time_ms,
            max_output_tokens,
            catalog_revision,
        )
        op = Operation(OperationKind.EXECUTE, session_id, yield_time_ms=yield_time_ms)
        self._send(op, request, what="code-mode execute request")
        session.pending_executes += 1
        return op

    def wait(
        self,
        session_id: str,
        cell_id: str,
        *,
        yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_output_tokens: int | None = None,
    ) -> Operation:
        """Send ``session/wait`` (held back while a cancelled wait on the cell is unanswered)."""
        self._require_usable()
        check_cell_id(cell_id)
        check_u64(yield_time_ms, "yield_time_ms")
        check_opt_u64(max_output_tokens, "max_output_tokens")
        if max_output_tokens is not None:
            self._require_capability(BOUNDED_OUTPUT, "max_output_tokens on wait")
        self._require_ready(session_id)
        op = Operation(
            OperationKind.WAIT,
            session_id,
            cell_id,
            yield_time_ms=yield_time_ms,
            max_output_tokens=max_output_tokens,
        )
        if self._cancelled_wait_pending(session_id, cell_id):
            # The host must never see two waits on one cell: hold this one until the
            # cancelled wait has been answered (with its error or a result).
            self._deferred_waits.append(op)
        else:
            self._send_wait(op)
        return op

    def terminate(
        self, session_id: str, cell_id: str, *, max_output_tokens: int | None = None
    ) -> Operation:
        """Send ``session/terminate``; answered with a wait outcome."""
        self._require_usable()
        check_cell_id(cell_id)
        check_opt_u64(max_output_tokens, "max_output_tokens")
        if max_output_tokens is not None:
            self._require_capability(BOUNDED_OUTPUT, "max_output_tokens on terminate")
        self._require_ready(session_id)
        op = Operation(
            OperationKind.TERMINATE, session_id, cell_id, max_output_tokens=max_output_tokens
        )
        self._send(op, TerminateRequest(session_id, cell_id, max_output_tokens))
        return op

    def shutdown(self, session_id: str) -> Operation:
        """Send ``session/shutdown``; every later command on the session is refused."""
        self._require_usable()
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionUnavailable(f"unknown code-mode session {session_id}")
        if session.closing:
            raise SessionUnavailable("code-mode session is already closing")
        return self._begin_shutdown(session, internal=False)

    def request_yield(self, session_id: str, cell_id: str) -> None:
        """Send ``operation/yield`` for the cell's in-flight observation, if it has one."""
        self._require_usable()
        self._require_capability(YIELD_OBSERVATION, "request_yield")
        for request_id, op in self._pending.items():
            if (
                op.kind is OperationKind.WAIT
                and not op.cancel_sent
                and op.cell_id == cell_id
                and op.session_id == session_id
            ):
                self._queue(OperationYield(RequestId(request_id)))
                return
        for request_id, op in self._initial.items():
            if op.cell_id == cell_id and op.session_id == session_id:
                self._queue(OperationYield(RequestId(request_id)))
                return

    def claim(self, op: Operation) -> None:
        """The caller took what :class:`SessionOpened`/:class:`CellStarted` delivered."""
        op.claimed = True

    def abandon(self, op: Operation) -> None:
        """The caller of ``op`` went away (cancelled, or its deadline passed).

        An open, execute or wait still in flight gets one ``operation/cancel``. A session or a
        cell the host admits anyway, or that was delivered but never claimed, is shut down or
        terminated, so nothing is left running with nobody to observe it.
        """
        if op.abandoned or op.internal or self._state == _FAILED:
            op.abandoned = True
            return
        op.abandoned = True
        request_id = op.request_id
        if request_id is None:
            # A wait still held back: nothing reached the host.
            with contextlib.suppress(ValueError):
                self._deferred_waits.remove(op)
            return
        if self._pending.get(request_id) is op:
            if op.kind in (OperationKind.OPEN, OperationKind.EXECUTE, OperationKind.WAIT):
                op.cancel_sent = True
                self._queue(OperationCancel(request_id))
            return
        if not op.delivered or op.claimed:
            return
        if op.kind is OperationKind.OPEN:
            session = self._sessions.get(op.session_id)
            if session is not None and not session.closing:
                self._begin_shutdown(session, internal=True)
        elif (
            op.kind is OperationKind.EXECUTE
            and op.cell_id is not None
            and op.session_id in self._sessions
        ):
            # Delivered but never taken: cancel the execute and terminate the orphaned cell.
            # (Once its session has closed, the unclaimed execute went with it: nothing to do.)
            self._queue(OperationCancel(request_id))
            self._terminate_abandoned(op.session_id, op.cell_id)

    def complete_tool_call(self, call: DelegateCall, result: JSON) -> None:
        """Answer tool call ``call`` with ``result`` (dropped if the call was revoked).

        A result that cannot be sent (not JSON, nested too deeply, over 64 MiB) is replaced by
        an error reply, so only this call is affected.
        """
        if self._table.finish(call) and self._state == _READY:
            self._reply_delegate(call.id, WireOk(ToolResult(result)))

    def complete_notification(self, call: DelegateCall) -> None:
        """Acknowledge notification ``call`` (dropped if the call was revoked)."""
        if self._table.finish(call) and self._state == _READY:
            self._reply_delegate(call.id, WireOk(NotificationDelivered()))

    def reject_delegate(self, call: DelegateCall, message: str) -> None:
        """Answer ``call`` with an error; JavaScript sees ``message`` as the rejection."""
        if self._table.finish(call) and self._state == _READY:
            self._reply_delegate(call.id, WireError(str(message)))

    def is_active(self, call: DelegateCall) -> bool:
        """Whether ``call`` is still waiting for its outcome (not answered, not revoked)."""
        return self._table.is_active(call)

    def fail(self, reason: str) -> None:
        """Fail the connection for a local reason (idempotent: the first reason wins)."""
        if self._state == _FAILED:
            return
        self._failure = reason
        self._state = _FAILED
        events = self._events
        for op in (*self._pending.values(), *self._initial.values(), *self._deferred_waits):
            events.append(OperationFailed(op, Fault.CONNECTION, reason))
        for call in self._table.revoke_all():
            events.append(DelegateRevoked(call))
        for session in self._sessions.values():
            for cell in session.cells.values():
                events.append(CellReleased(session.session_id, cell.cell_id))
            events.append(SessionReleased(session.session_id))
        events.append(Failed(reason))
        self._pending.clear()
        self._initial.clear()
        self._deferred_waits.clear()
        self._sessions.clear()
        self._opening.clear()
        self._out.clear()
        self._bulk_out.clear()

    # ------------------------------------------------------------------ sending

    def _queue(self, message: ClientMessage) -> None:
        payload = encode_client_message(message)
        self._queue_payload(payload)

    def _queue_payload(self, payload: bytes, lane: Lane = Lane.CONTROL) -> None:
        frame = encode_frame(payload)
        (self._out if lane is Lane.CONTROL else self._bulk_out).append(frame)
        self.frames_sent += 1
        self.bytes_sent += len(frame)
        if self._on_frame is not None:
            self._on_frame(CLIENT_TO_HOST, payload)

    def _send(
        self, op: Operation, request: HostRequest, *, what: str = "code-mode request"
    ) -> None:
        """Allocate an id, encode, register the operation, queue the frame.

        The id is consumed only once the frame encodes, so a refused request leaves no gap.
        """
        if self._next_request_id > I64_MAX:
            self.fail("code-mode host request ID space exhausted")
            raise ConnectionUnusable(self._failure or "code-mode host request ID space exhausted")
        request_id = RequestId(self._next_request_id)
        try:
            payload = encode_client_message(OperationRequest(request_id, request))
        except EncodeError as exc:
            text = str(exc)
            if "exceeds" in text:
                raise UsageError(f"{what} exceeds the IPC frame limit: {exc}") from None
            raise UsageError(f"failed to encode {what}: {exc}") from None
        self._next_request_id += 1
        op.request_id = request_id
        self._pending[request_id] = op
        self._queue_payload(payload)

    def _send_wait(self, op: Operation) -> None:
        assert op.cell_id is not None
        assert op.yield_time_ms is not None
        self._send(
            op, WaitRequest(op.session_id, op.cell_id, op.yield_time_ms, op.max_output_tokens)
        )

    def _begin_shutdown(self, session: _Session, *, internal: bool) -> Operation:
        # Closing first, so every later execute/wait/terminate is refused locally.
        session.closing = True
        op = Operation(OperationKind.SHUTDOWN, session.session_id, internal=internal)
        self._send(op, ShutdownRequest(session.session_id))
        if internal:
            self._events.append(InternalRequest(op))
        return op

    def _terminate_abandoned(self, session_id: str, cell_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            self._violation(
                f"code-mode host admitted an abandoned cell in unknown session {session_id}"
            )
            return
        if session.closing:
            return  # the session's shutdown terminates it
        op = Operation(OperationKind.TERMINATE, session_id, cell_id, internal=True)
        self._send(op, TerminateRequest(session_id, cell_id))
        self._events.append(InternalRequest(op))

    def _reply_delegate(self, delegate_id: int, result: WireOk[Any] | WireError) -> None:
        payload, bulk = encode_reply(delegate_id, result)
        self._queue_payload(payload, Lane.BULK if bulk and self._lanes else Lane.CONTROL)

    # ------------------------------------------------------------------ checks

    def _require_usable(self) -> None:
        if self._state != _READY:
            if self._state == _HANDSHAKE:
                raise UsageError("the handshake is not complete")
            raise ConnectionUnusable(self._failure or "code-mode host connection closed")

    def _require_capability(self, capability: str, what: str) -> None:
        if capability not in self.capabilities:
            raise UsageError(
                f"code-mode host does not support {what}: missing `{capability}` capability"
            )

    def _require_ready(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionUnavailable(f"unknown code-mode session {session_id}")
        if session.closing:
            raise SessionUnavailable("code-mode session is shutting down")
        return session

    def _generate_session_id(self) -> str:
        while True:
            self._session_numbers += 1
            session_id = f"session-{self._session_numbers}"
            if (
                session_id not in self._recent_sessions
                and session_id not in self._sessions
                and session_id not in self._opening
            ):
                return session_id

    def _cancelled_wait_pending(self, session_id: str, cell_id: str) -> bool:
        for op in self._pending.values():
            if (
                op.kind is OperationKind.WAIT
                and op.cancel_sent
                and op.cell_id == cell_id
                and op.session_id == session_id
            ):
                return True
        return False

    # ------------------------------------------------------------------ failure

    def _fail_answering(self, request_id: int, op: Operation, reason: str) -> None:
        """Fail because of the answer to ``op``: its caller gets the reason like the rest."""
        self._pending[request_id] = op
        self.fail(reason)

    def _violation(self, reason: str) -> None:
        """The host broke the protocol: fail, then raise the violation."""
        self.fail(reason)
        raise HostProtocolViolation(self._failure or reason)

    # ------------------------------------------------------------------ host messages

    def _complete_handshake(self, message: HostMessage) -> None:
        try:
            result: HandshakeResult = evaluate_handshake(self._hello, message)
        except HandshakeError as exc:
            self.fail(str(exc))
            raise
        assert type(message) is ConnectionReady
        try:
            token = bulk_pairing_token(message, websocket=self._websocket)
        except HandshakeError as exc:
            self.fail(str(exc))
            raise
        self.capabilities = result.capabilities
        self.protocol_version = result.version
        self.bulk_token = token
        self._lanes = token is not None
        if DELEGATE_CAPACITY_4096 in result.capabilities:
            self._table.max_active = max(self._table.max_active, 4096)
        self._state = _READY

    def _handle(self, message: HostMessage) -> None:
        match message:
            case DelegateRequest():
                self._on_delegate_request(message)
            case OperationResponse():
                self._on_response(message)
            case InitialResponse():
                self._on_initial_response(message)
            case CellClosed():
                self._on_cell_closed(message)
            case DelegateCancel():
                self._on_delegate_cancel(message.id)
            case ConnectionReady() | ConnectionRejected():
                self.fail("code-mode host sent a second handshake response")
                return
        if self._state == _READY:
            if self._deferred_waits:
                self._flush_deferred_waits()
            if self._table.parked:
                self._dispatch_parked()

    def _on_response(self, message: OperationResponse) -> None:
        op = self._pending.pop(message.id, None)
        if op is None:
            self.fail(f"code-mode host returned unknown request ID {RequestId(message.id)!r}")
            return
        kind = op.kind
        session = self._sessions.get(op.session_id)
        if kind is OperationKind.OPEN:
            self._opening.pop(op.session_id, None)
        elif kind is OperationKind.EXECUTE and session is not None:
            session.pending_executes -= 1
        match message.result:
            case WireError(message=text) if kind is OperationKind.SHUTDOWN:
                # The reference client treats a failed shutdown as fatal: the session's state
                # on the host is unknown from here on.
                self._fail_answering(message.id, op, text)
            case WireError(message=text):
                self._events.append(OperationFailed(op, Fault.HOST, text))
            case WireOk(value=SessionReady() as ready) if (
                kind is OperationKind.OPEN and ready.session_id == op.session_id
            ):
                self._on_session_ready(op)
            case WireOk(value=ExecutionStarted(cell_id=cell_id)) if kind is OperationKind.EXECUTE:
                self._on_execution_started(message.id, op, session, cell_id)
            case WireOk(value=WaitCompleted(outcome=outcome)) if kind in _OBSERVATIONS:
                got = outcome.response.cell_id
                if got != op.cell_id:
                    self._fail_answering(
                        message.id,
                        op,
                        f"code-mode host returned cell {got} for request targeting {op.cell_id}",
                    )
                else:
                    self._events.append(CellObserved(op, outcome))
            case WireOk(value=SessionClosedResponse() as closed) if (
                kind is OperationKind.SHUTDOWN and closed.session_id == op.session_id
            ):
                self._on_session_closed(op)
            case _:
                what = _ANSWERS[kind]
                self._fail_answering(
                    message.id, op, f"code-mode host returned an invalid {what} response"
                )

    def _on_session_ready(self, op: Operation) -> None:
        session = _Session(op.session_id)
        self._sessions[op.session_id] = session
        if op.abandoned:
            # The caller gave up, but the host committed the session: shut it down ourselves.
            self._begin_shutdown(session, internal=True)
            return
        op.delivered = True
        self._events.append(SessionOpened(op))

    def _on_execution_started(
        self, request_id: int, op: Operation, session: _Session | None, cell_id: str
    ) -> None:
        if session is None:
            self._events.append(
                OperationFailed(op, Fault.SESSION, "code-mode session closed during execute")
            )
            return
        if cell_id in session.cells:
            self._fail_answering(
                request_id,
                op,
                f"code-mode host reused live cell {cell_id} in session {session.session_id}",
            )
            return
        session.cells[cell_id] = _Cell(session, cell_id)
        op.cell_id = cell_id
        # Registered even for an abandoned cell, so its initial response is consumed quietly.
        self._initial[request_id] = op
        if op.abandoned:
            # The caller was cancelled: the cell runs with nobody to observe it.
            self._terminate_abandoned(session.session_id, cell_id)
            return
        op.delivered = True
        self._events.append(CellStarted(op))

    def _on_session_closed(self, op: Operation) -> None:
        session = self._sessions.pop(op.session_id, None)
        if session is not None:
            for cell in list(session.cells.values()):
                self._release_cell(cell)
            self._events.append(SessionReleased(session.session_id))
        self._events.append(SessionShutDown(op))

    def _on_initial_response(self, message: InitialResponse) -> None:
        op = self._initial.pop(message.id, None)
        if op is None:
            self.fail(
                "code-mode host returned initial response for unknown request ID "
                f"{RequestId(message.id)!r}"
            )
            return
        result = message.result
        if isinstance(result, WireError):
            self._events.append(OperationFailed(op, Fault.HOST, result.message))
            return
        response = result.value
        if response.cell_id != op.cell_id:
            # Back in the table, so the fail-stop fails this cell's waiter with the rest.
            self._initial[message.id] = op
            self.fail(
                f"code-mode host returned initial response for cell {response.cell_id} "
                f"instead of {op.cell_id}"
            )
            return
        self._events.append(InitialResult(op, response))

    def _on_cell_closed(self, message: CellClosed) -> None:
        session = self._sessions.get(message.session_id)
        if session is None:
            self.fail(
                f"code-mode host closed cell {message.cell_id} in unknown session "
                f"{message.session_id}"
            )
            return
        cell = session.cells.get(message.cell_id)
        if cell is None:
            self.fail(f"code-mode host closed unknown cell in session {message.session_id}")
            return
        self._release_cell(cell)

    def _release_cell(self, cell: _Cell) -> None:
        """Remove a cell, revoke its delegate calls, announce it (exactly once)."""
        session = cell.session
        if session.cells.pop(cell.cell_id, None) is None:
            return
        for call in self._table.revoke_cell(cell.delegate_ids):
            self._events.append(DelegateRevoked(call))
        self._events.append(CellReleased(session.session_id, cell.cell_id))

    # ------------------------------------------------------------------ delegates

    def _on_delegate_request(self, message: DelegateRequest) -> None:
        session = self._sessions.get(message.session_id)
        request = message.request
        cell_id = request.cell_id
        cell = session.cells.get(cell_id) if session is not None else None
        if cell is None:
            if session is not None and session.pending_executes > 0:
                # The cell's execution/started may still be on its way: park the call, run it
                # once the cell is admitted (or drop it if the host cancels it first).
                if not self._table.park(message):
                    self.fail("code-mode host exceeded deferred cross-socket message limit")
                return
            reason = (
                f"code-mode host delegated for unknown session {message.session_id}"
                if session is None
                else f"code-mode host delegated for unknown cell {cell_id} "
                f"in session {message.session_id}"
            )
            self._reply_delegate(message.id, WireError(reason))
            return
        match self._table.admit(message, cell.delegate_ids):
            case DelegateCall() as call:
                self._events.append(DelegateStarted(call))
            case WireError() as refusal:
                self._reply_delegate(message.id, refusal)
            case str(reason):
                self.fail(reason)

    def _on_delegate_cancel(self, delegate_id: int) -> None:
        call = self._table.cancel(delegate_id)
        if call is not None:
            self._events.append(DelegateRevoked(call))

    def _dispatch_parked(self) -> None:
        """One FIFO pass over parked delegate requests: run those whose cell is now known."""
        for message in self._table.unpark_all():
            if self._state != _READY:
                return
            session = self._sessions.get(message.session_id)
            if (
                session is None
                or message.request.cell_id in session.cells
                or session.pending_executes == 0
            ):
                self._on_delegate_request(message)
            else:
                self._table.park(message)

    def _flush_deferred_waits(self) -> None:
        waits, self._deferred_waits = self._deferred_waits, deque()
        for op in waits:
            if self._state != _READY:
                self._events.append(
                    OperationFailed(op, Fault.CONNECTION, self._failure or "connection failed")
                )
                continue
            assert op.cell_id is not None
            session = self._sessions.get(op.session_id)
            if session is None or session.closing:
                self._events.append(
                    OperationFailed(
                        op,
                        Fault.SESSION,
                        f"unknown code-mode session {op.session_id}"
                        if session is None
                        else "code-mode session is shutting down",
                    )
                )
            elif self._cancelled_wait_pending(op.session_id, op.cell_id):
                self._deferred_waits.append(op)
            else:
                self._send_wait(op)
