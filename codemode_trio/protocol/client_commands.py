"""The client machine's state and its commands: everything a caller applies to it.

:class:`~codemode_trio.protocol.client_protocol.ClientProtocol` is this class plus what the host
sends (bytes in, events out); here are the commands (bytes out), each checked before anything is
queued, the caller's fate (``claim``, ``abandon``), delegate outcomes and ``fail``. It never
imports trio. Use :class:`~codemode_trio.protocol.client_protocol.ClientProtocol`, not this.
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
    CellReleased,
    DelegateCall,
    DelegateRevoked,
    Event,
    Failed,
    Fault,
    InternalRequest,
    Operation,
    OperationFailed,
    OperationKind,
    SessionReleased,
)
from .codec import encode_client_message, encode_tool_result, host_message_decoder
from .content import CellLimits, ToolDefinition
from .errors import (
    ConnectionUnusable,
    EncodeError,
    HostProtocolViolation,
    SessionUnavailable,
    UsageError,
)
from .framing import FrameDecoder, encode_frame
from .handshake import (
    ALL_CAPABILITIES,
    BOUNDED_OUTPUT,
    SESSION_LIMITS,
    TOOL_CATALOG_REVISION,
    YIELD_OBSERVATION,
    build_hello,
)
from .ids import I64_MAX, RecentIds, RequestId
from .lanes import DUAL_WEBSOCKET, Lane
from .messages import (
    ClientMessage,
    ExecuteRequest,
    HostRequest,
    NotificationDelivered,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationYield,
    ShutdownRequest,
    TerminateRequest,
    ToolResult,
    WaitRequest,
    WireError,
    WireOk,
)
from .values import JSON

__all__ = [
    "CLIENT_TO_HOST",
    "DEFAULT_WAIT_YIELD_TIME_MS",
    "FAILED",
    "HANDSHAKE",
    "HOST_TO_CLIENT",
    "READY",
    "CellRecord",
    "ClientCommands",
    "FrameObserver",
    "SessionRecord",
]

#: Called with ``("client->host" | "host->client", payload)`` for every frame (transcripts).
FrameObserver = Callable[[str, bytes], None]

#: The host's default wait deadline (a wait's ``yield_time_ms`` is required on the wire).
DEFAULT_WAIT_YIELD_TIME_MS = 10_000

CLIENT_TO_HOST = "client->host"
HOST_TO_CLIENT = "host->client"

# The machine's states: handshake until connection/ready, then ready until it fails for good.
HANDSHAKE = "handshake"
READY = "ready"
FAILED = "failed"


class CellRecord:
    """A live cell: from ``execution/started`` until it is released."""

    __slots__ = ("cell_id", "delegate_ids", "session")

    def __init__(self, session: SessionRecord, cell_id: str) -> None:
        """A cell of ``session`` with no delegate calls yet."""
        self.session = session
        self.cell_id = cell_id
        self.delegate_ids: set[int] = set()


class SessionRecord:
    """An open (or closing) session and its live cells."""

    __slots__ = ("cells", "closing", "pending_executes", "session_id")

    def __init__(self, session_id: str) -> None:
        """A session the host just opened."""
        self.session_id = session_id
        self.closing = False
        self.cells: dict[str, CellRecord] = {}
        self.pending_executes = 0


class ClientCommands:
    """The commands half of :class:`~codemode_trio.protocol.client_protocol.ClientProtocol`."""

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
        self._decode_host = host_message_decoder(strict=strict)
        self._table = DelegateTable(
            max_active=max_pending_delegates,
            max_parked=max_parked_delegates,
            recent=recent_delegate_ids,
        )
        self._on_frame = on_frame
        self._decoder = FrameDecoder()
        self._out: list[bytes] = []
        self._events: deque[Event] = deque()
        self._state = HANDSHAKE
        self._failure: str | None = None
        #: What the host granted (empty until the handshake completes).
        self.capabilities: frozenset[str] = frozenset()
        #: The negotiated protocol version (``None`` until the handshake completes).
        self.protocol_version: int | None = None
        self._next_request_id = 1
        self._session_numbers = 0
        self._sessions: dict[str, SessionRecord] = {}
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
        if op.abandoned or op.internal or self._state == FAILED:
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
        if self._table.finish(call) and self._state == READY:
            try:
                payload = encode_tool_result(call.id, result)  # the common reply's fast path
            except Exception:  # the full path words the error reply
                self._reply_delegate(call.id, WireOk(ToolResult(result)))
                return
            # The bulk lane's, as any tool reply.
            self._queue_payload(payload, Lane.BULK if self._lanes else Lane.CONTROL)

    def complete_notification(self, call: DelegateCall) -> None:
        """Acknowledge notification ``call`` (dropped if the call was revoked)."""
        if self._table.finish(call) and self._state == READY:
            self._reply_delegate(call.id, WireOk(NotificationDelivered()))

    def reject_delegate(self, call: DelegateCall, message: str) -> None:
        """Answer ``call`` with an error; JavaScript sees ``message`` as the rejection."""
        if self._table.finish(call) and self._state == READY:
            self._reply_delegate(call.id, WireError(str(message)))

    def is_active(self, call: DelegateCall) -> bool:
        """Whether ``call`` is still waiting for its outcome (not answered, not revoked)."""
        return self._table.is_active(call)

    def fail(self, reason: str) -> None:
        """Fail the connection for a local reason (idempotent: the first reason wins)."""
        if self._state == FAILED:
            return
        self._failure = reason
        self._state = FAILED
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

    def _begin_shutdown(self, session: SessionRecord, *, internal: bool) -> Operation:
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
        if self._state != READY:
            if self._state == HANDSHAKE:
                raise UsageError("the handshake is not complete")
            raise ConnectionUnusable(self._failure or "code-mode host connection closed")

    def _require_capability(self, capability: str, what: str) -> None:
        if capability not in self.capabilities:
            raise UsageError(
                f"code-mode host does not support {what}: missing `{capability}` capability"
            )

    def _require_ready(self, session_id: str) -> SessionRecord:
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
