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

from collections import deque

from .client_commands import (
    DEFAULT_WAIT_YIELD_TIME_MS,
    FAILED,
    HANDSHAKE,
    HOST_TO_CLIENT,
    READY,
    CellRecord,
    ClientCommands,
    FrameObserver,
    SessionRecord,
)
from .client_events import (
    NEED_DATA,
    CellObserved,
    CellReleased,
    CellStarted,
    DelegateCall,
    DelegateRevoked,
    DelegateStarted,
    Event,
    Fault,
    InitialResult,
    NeedData,
    Operation,
    OperationFailed,
    OperationKind,
    SessionOpened,
    SessionReleased,
    SessionShutDown,
)
from .errors import ConnectionUnusable, HandshakeError, HostProtocolViolation, ProtocolViolation
from .handshake import DELEGATE_CAPACITY_4096, HandshakeResult, evaluate_handshake
from .ids import RequestId
from .lanes import WRONG_LANE_FROM_HOST, Lane, bulk_pairing_token, host_message_lane
from .messages import (
    CellClosed,
    ConnectionReady,
    ConnectionRejected,
    DelegateCancel,
    DelegateRequest,
    ExecutionStarted,
    HostMessage,
    InitialResponse,
    OperationResponse,
    SessionClosedResponse,
    SessionReady,
    WaitCompleted,
    WireError,
    WireOk,
)

__all__ = ["DEFAULT_WAIT_YIELD_TIME_MS", "ClientProtocol", "FrameObserver"]

# What an invalid answer to each request is called in the reference client's error text.
_ANSWERS = {
    OperationKind.OPEN: "open-session",
    OperationKind.EXECUTE: "execute",
    OperationKind.WAIT: "cell",
    OperationKind.TERMINATE: "cell",
    OperationKind.SHUTDOWN: "shutdown",
}
_OBSERVATIONS = (OperationKind.WAIT, OperationKind.TERMINATE)


class ClientProtocol(ClientCommands):
    """The client side of one connection (see the module docstring)."""

    # ------------------------------------------------------------------ observation

    @property
    def handshake_complete(self) -> bool:
        """True once ``connection/ready`` was accepted."""
        return self._state == READY or (self._state == FAILED and self.protocol_version is not None)

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
        if self._state == FAILED:
            return
        self.bytes_received += len(data)
        bulk = lane is Lane.BULK
        if bulk and not self._lanes and data:
            # Nothing may arrive there before the handshake granted the lane.
            self._violation(WRONG_LANE_FROM_HOST)
        try:
            payloads = (self._bulk_decoder if bulk else self._decoder).feed(data)
        except ProtocolViolation as exc:
            what = "message" if self._state == READY else "hello"
            self._violation(f"failed to read code-mode host {what}: {exc}")
        observe = self._on_frame
        for payload in payloads:
            self.frames_received += 1
            if observe is not None:
                observe(HOST_TO_CLIENT, payload)
            try:
                message = self._decode_host(payload)
            except ProtocolViolation as exc:
                what = "message" if self._state == READY else "hello"
                self._violation(f"failed to read code-mode host {what}: {exc}")
            if self._state == READY:
                if self._lanes and host_message_lane(message) is not lane:
                    self._violation(WRONG_LANE_FROM_HOST)
                self._handle(message)
            else:
                self._complete_handshake(message)
            if self._state == FAILED:
                assert self._failure is not None
                raise HostProtocolViolation(self._failure)

    def receive_eof(self, details: str | None = None, lane: Lane = Lane.CONTROL) -> None:
        """The host closed its side (either lane). ``details`` may say why (exit status, stderr).

        During the handshake this raises :class:`ConnectionUnusable` (``code-mode host exited
        during handshake``); afterwards it fails the connection with ``code-mode host closed
        its stdout (...)``, naming the delegate calls in flight and a frame cut short.
        """
        if self._state == FAILED:
            return
        notes = [details] if details else []
        if self._state == HANDSHAKE:
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
        self._state = READY

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
        if self._state == READY:
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
        session = SessionRecord(op.session_id)
        self._sessions[op.session_id] = session
        if op.abandoned:
            # The caller gave up, but the host committed the session: shut it down ourselves.
            self._begin_shutdown(session, internal=True)
            return
        op.delivered = True
        self._events.append(SessionOpened(op))

    def _on_execution_started(
        self, request_id: int, op: Operation, session: SessionRecord | None, cell_id: str
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
        session.cells[cell_id] = CellRecord(session, cell_id)
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

    def _release_cell(self, cell: CellRecord) -> None:
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
            if self._state != READY:
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
            if self._state != READY:
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
