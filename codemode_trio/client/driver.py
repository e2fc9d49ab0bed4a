r"""The connection driver: ONE task that owns every piece of protocol state.

Nothing else reads or writes the session registry, the pending-request table, the live cells or
the delegate table, so no locks are needed: the driver handles one item at a time, and all its
handlers are synchronous. Around it:

- the **reader** task decodes frames and ``await``\\ s a slot in the driver's inbox;
- the **writer** task takes encoded frames from the outgoing channel and writes them. The driver
  never awaits the writer: it ``send_nowait``\\ s, and a full queue means the host stopped
  reading, which fails the connection;
- **delegate tasks**: one per ``delegate/request``, each inside its own :class:`trio.CancelScope`
  in the connection's delegate nursery. Revoking a call cancels its scope and forgets it; the
  driver never waits for it to finish.

Failure is fail-stop: the first failure reason is recorded, every waiter gets it, every live cell
is closed exactly once (``cell_closed`` called once per cell) and every delegate call is revoked.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import attrs
import trio

from ..errors import ConnectionFailed, HostError, SessionClosed, UsageError
from ..protocol.codec import encode_client_message
from ..protocol.content import Notification, RuntimeResponse, ToolCall, WaitOutcome
from ..protocol.errors import EncodeError
from ..protocol.framing import encode_frame
from ..protocol.ids import DelegateRequestId, RequestId
from ..protocol.messages import (
    CellClosed,
    ClientMessage,
    ConnectionReady,
    ConnectionRejected,
    DelegateCancel,
    DelegateRequest,
    DelegateResponse,
    DelegateResult,
    ExecuteRequest,
    ExecutionStarted,
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
from .commands import (
    Abandon,
    Claim,
    DelegateDone,
    ExecuteCommand,
    FailNotice,
    HostEof,
    HostEvent,
    InboxItem,
    Notice,
    OpenCommand,
    ShutdownCommand,
    TerminateCommand,
    WaitCommand,
    Wake,
    YieldCommand,
)
from .config import ConnectionConfig
from .delegates import Delegate, ToolError, describe_delegate_error
from .lifecycle import Lifecycle
from .slots import ReplySlot

__all__ = ["DelegateCall", "Driver"]

logger = logging.getLogger("codemode_trio.driver")


# --------------------------------------------------------------------------- driver state


@attrs.define(eq=False)
class _Cell:
    """A live cell: from ``execution/started`` until it is closed."""

    session: _Session
    cell_id: str
    delegate_calls: set[int] = attrs.field(factory=set)


@attrs.define(eq=False)
class _Session:
    session_id: str
    delegate: Delegate
    closing: bool = False
    cells: dict[str, _Cell] = attrs.field(factory=dict)
    pending_executes: int = 0
    # Set once every cell of the session has been closed locally (shutdown or failure).
    cleaned_up: trio.Event = attrs.field(factory=trio.Event)


@attrs.define(eq=False)
class DelegateCall:
    """One running delegate call: its scope is the handle that cancels it."""

    id: int
    cell: _Cell
    scope: trio.CancelScope
    revoked: bool = False


@attrs.define(eq=False)
class _Pending:
    """A request sent to the host and not yet answered."""

    kind: str  # "open" | "execute" | "wait" | "terminate" | "shutdown"
    slot: ReplySlot[Any] | None
    session_id: str
    cell_id: str | None = None
    delegate: Delegate | None = None
    cleaned_up: trio.Event | None = None
    cancellable: bool = False
    # True once operation/cancel was sent for it (at most one cancel frame per request).
    reported: bool = False


@attrs.define(eq=False)
class _Initial:
    session_id: str
    cell_id: str
    slot: ReplySlot[RuntimeResponse]


@attrs.define(eq=False)
class _Unclaimed:
    session_id: str
    cell_id: str


class Driver:
    """Owns the protocol state of one connection; see the module docstring for the shape."""

    def __init__(
        self,
        *,
        config: ConnectionConfig,
        capabilities: frozenset[str],
        lifecycle: Lifecycle,
        inbox: trio.MemoryReceiveChannel[InboxItem],
        notices: trio.MemoryReceiveChannel[Notice],
        outgoing: trio.MemorySendChannel[bytes],
        delegate_nursery: trio.Nursery,
        max_pending_delegates: int,
        on_fail: Any,
        post: Any,
    ) -> None:
        self._config = config
        self._capabilities = capabilities
        self._lifecycle = lifecycle
        self._inbox = inbox
        self._notices = notices
        self._outgoing = outgoing
        self._delegate_nursery = delegate_nursery
        self._max_pending_delegates = max_pending_delegates
        self._on_fail = on_fail
        # Posts a notice and wakes the driver (Connection._post); used by delegate tasks.
        self._post = post

        self._next_request_id = 1
        self._sessions: dict[str, _Session] = {}
        self._opening: set[str] = set()
        self._pending: dict[int, _Pending] = {}
        self._initial: dict[int, _Initial] = {}
        self._unclaimed: dict[int, _Unclaimed] = {}
        # Opens delivered to a caller that has not yet taken the Session (request id -> id).
        self._unclaimed_opens: dict[int, str] = {}
        self._deferred_waits: deque[WaitCommand] = deque()
        self._parked: deque[DelegateRequest] = deque()
        self._delegates: dict[int, DelegateCall] = {}
        # A bounded FIFO of delegate ids seen, to catch a host reusing one. Ids of active calls
        # are always caught through _delegates, even after they fall out of this window.
        self._recent_delegate_ids: deque[int] = deque()
        self._recent_delegate_set: set[int] = set()
        self._failed = False
        #: Set when the driver has stopped and its cleanup (``fail``) has run.
        self.stopped = trio.Event()

    # ----------------------------------------------------------------------- observation

    def statistics(self) -> dict[str, int]:
        """Counts of the driver's live state."""
        return {
            "pending_requests": len(self._pending),
            "pending_initial_responses": len(self._initial),
            "active_delegates": len(self._delegates),
            "parked_delegates": len(self._parked),
            "deferred_waits": len(self._deferred_waits),
            "sessions": len(self._sessions),
            "live_cells": sum(len(s.cells) for s in self._sessions.values()),
        }

    # ----------------------------------------------------------------------- main loop

    async def run(self) -> None:
        """Handle inbox items until the connection fails or the task is cancelled."""
        try:
            while not self._failed:
                item = await self._inbox.receive()
                self._sweep()
                if self._failed:
                    self._refuse(item)
                    break
                self._handle(item)
                if isinstance(item, HostEvent) and not self._failed:
                    self._flush_deferred_waits()
                    self._dispatch_parked()
        finally:
            # Whatever stopped the loop (failure, cancellation of the driver alone, a bug),
            # the cleanup runs: a no-op if the connection already failed.
            self.fail("code-mode connection driver stopped unexpectedly")
            self.stopped.set()

    def _sweep(self) -> None:
        """Act on every notice posted since the last item (cancellations first, in order)."""
        while not self._failed:
            try:
                notice = self._notices.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            self._handle_notice(notice)

    def _handle(self, item: InboxItem) -> None:
        if isinstance(item, HostEvent):
            self._handle_host_message(item.message)
        elif isinstance(item, HostEof):
            in_flight = len(self._delegates) + len(self._parked)
            details = [item.details] if item.details else []
            details.append(f"{in_flight} delegate call{'s' if in_flight != 1 else ''} in flight")
            if item.truncated:
                details.append(item.truncated)
            self.fail(f"code-mode host closed its stdout ({'; '.join(details)})")
        elif isinstance(item, Wake):
            pass
        else:
            self._handle_command(item)

    # ----------------------------------------------------------------------- sending

    def _queue(self, message: ClientMessage) -> bool:
        """Encode and queue a frame for the writer; on failure fail the connection."""
        try:
            frame = encode_frame(encode_client_message(message))
        except EncodeError as exc:  # pragma: no cover - callers pre-encode what can be too big
            self.fail(f"failed to encode code-mode IPC frame: {exc}")
            return False
        return self._queue_frame(frame)

    def _queue_frame(self, frame: bytes) -> bool:
        try:
            self._outgoing.send_nowait(frame)
        except trio.WouldBlock:
            self.fail("code-mode host outgoing queue is full")
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.fail("code-mode host writer closed")
            return False
        return True

    def _send_request(
        self,
        request: Any,
        pending: _Pending,
        *,
        too_large: str = "code-mode request exceeds the IPC frame limit",
    ) -> bool:
        """Allocate an id, encode, register the pending entry, then queue the frame.

        The id is only consumed once the frame encodes, so an oversize request leaves no gap.
        """
        request_id = RequestId(self._next_request_id)
        try:
            frame = encode_frame(encode_client_message(OperationRequest(request_id, request)))
        except EncodeError as exc:
            if pending.slot is not None:
                pending.slot.fail(UsageError(f"{too_large}: {exc}"))
            return False
        self._next_request_id += 1
        if pending.slot is not None:
            pending.slot.request_id = request_id
        # Registered before queueing: if queueing fails the connection, fail() reaches it too.
        self._pending[request_id] = pending
        return self._queue_frame(frame)

    # ----------------------------------------------------------------------- commands

    def _require_ready(self, session_id: str, slot: ReplySlot[Any] | None) -> _Session | None:
        session = self._sessions.get(session_id)
        if session is None:
            if slot is not None:
                slot.fail(SessionClosed(f"unknown code-mode session {session_id}"))
            return None
        if session.closing:
            if slot is not None:
                slot.fail(SessionClosed("code-mode session is shutting down"))
            return None
        return session

    def _handle_command(self, command: Any) -> None:
        slot = getattr(command, "slot", None)
        if slot is not None and slot.abandoned:
            # The caller gave up before the command was ever sent: nothing to cancel or undo.
            if isinstance(command, TerminateCommand | ShutdownCommand):
                command.slot = None  # not cancellable: still carry it out
            else:
                return
        if isinstance(command, OpenCommand):
            self._on_open(command)
        elif isinstance(command, ExecuteCommand):
            self._on_execute(command)
        elif isinstance(command, WaitCommand):
            self._on_wait(command)
        elif isinstance(command, TerminateCommand):
            self._on_terminate(command)
        elif isinstance(command, ShutdownCommand):
            self._on_shutdown(command)
        elif isinstance(command, YieldCommand):
            self._on_yield(command)

    def _on_open(self, command: OpenCommand) -> None:
        session_id = command.session_id
        if session_id in self._sessions or session_id in self._opening:
            command.slot.fail(UsageError(f"code-mode session {session_id} is already open"))
            return
        request = OpenSessionRequest(
            session_id,
            None if command.limits is None or command.limits.is_default else command.limits,
            command.output_truncation,
        )
        pending = _Pending(
            "open",
            command.slot,
            session_id,
            delegate=command.delegate,
            cancellable=True,
            cleaned_up=command.cleaned_up,
        )
        if self._send_request(request, pending):
            self._opening.add(session_id)

    def _on_execute(self, command: ExecuteCommand) -> None:
        session = self._require_ready(command.session_id, command.slot)
        if session is None:
            return
        request = ExecuteRequest(
            command.session_id,
            command.source,
            command.tool_call_id,
            command.tools,
            command.yield_time_ms,
            command.max_output_tokens,
            command.catalog_revision,
        )
        pending = _Pending("execute", command.slot, command.session_id, cancellable=True)
        if self._send_request(
            request, pending, too_large="code-mode execute request exceeds the IPC frame limit"
        ):
            session.pending_executes += 1

    def _cancelled_wait_pending(self, session_id: str, cell_id: str) -> bool:
        return any(
            p.kind == "wait" and p.reported and p.session_id == session_id and p.cell_id == cell_id
            for p in self._pending.values()
        )

    def _on_wait(self, command: WaitCommand) -> None:
        if self._require_ready(command.session_id, command.slot) is None:
            return
        if self._cancelled_wait_pending(command.session_id, command.cell_id):
            # The host must never see two waits on one cell: hold this one until the cancelled
            # wait has been answered (with its error or a result).
            self._deferred_waits.append(command)
            return
        self._send_wait(command)

    def _send_wait(self, command: WaitCommand) -> None:
        request = WaitRequest(
            command.session_id, command.cell_id, command.yield_time_ms, command.max_output_tokens
        )
        pending = _Pending(
            "wait", command.slot, command.session_id, command.cell_id, cancellable=True
        )
        self._send_request(request, pending)

    def _on_terminate(self, command: TerminateCommand) -> None:
        if self._require_ready(command.session_id, command.slot) is None:
            return
        request = TerminateRequest(command.session_id, command.cell_id, command.max_output_tokens)
        self._send_request(
            request, _Pending("terminate", command.slot, command.session_id, command.cell_id)
        )

    def _on_shutdown(self, command: ShutdownCommand) -> None:
        session = self._sessions.get(command.session_id)
        if session is None:
            if command.slot is not None:
                command.slot.fail(SessionClosed(f"unknown code-mode session {command.session_id}"))
            return
        if session.closing:
            if command.slot is not None:
                command.slot.fail(SessionClosed("code-mode session is already closing"))
            return
        self._begin_shutdown(session, command.slot)

    def _begin_shutdown(self, session: _Session, slot: ReplySlot[None] | None) -> None:
        # Closing first, so every later execute/wait/terminate is refused locally.
        session.closing = True
        self._send_request(
            ShutdownRequest(session.session_id), _Pending("shutdown", slot, session.session_id)
        )

    def _on_yield(self, command: YieldCommand) -> None:
        for request_id, pending in self._pending.items():
            if (
                pending.kind == "wait"
                and not pending.reported
                and pending.session_id == command.session_id
                and pending.cell_id == command.cell_id
            ):
                self._queue(OperationYield(RequestId(request_id)))
                return
        for request_id, initial in self._initial.items():
            if initial.session_id == command.session_id and initial.cell_id == command.cell_id:
                self._queue(OperationYield(RequestId(request_id)))
                return

    # ----------------------------------------------------------------------- notices

    def _handle_notice(self, notice: Notice) -> None:
        if isinstance(notice, Abandon):
            self._on_abandon(notice.slot)
        elif isinstance(notice, Claim):
            if notice.slot.request_id is not None:
                self._unclaimed.pop(notice.slot.request_id, None)
                self._unclaimed_opens.pop(notice.slot.request_id, None)
        elif isinstance(notice, FailNotice):
            self.fail(notice.reason)
        elif isinstance(notice, DelegateDone):
            self._on_delegate_done(notice.call, notice.result)
        else:
            self._handle_command(notice)

    def _on_abandon(self, slot: ReplySlot[Any]) -> None:
        request_id = slot.request_id
        if request_id is None:
            return  # never sent: _handle_command drops it when it comes
        pending = self._pending.get(request_id)
        if pending is not None and pending.slot is slot:
            if pending.cancellable and not pending.reported:
                pending.reported = True
                self._queue(OperationCancel(RequestId(request_id)))
            return
        opened = self._unclaimed_opens.pop(request_id, None)
        if opened is not None:
            session = self._sessions.get(opened)
            if session is not None and not session.closing:
                self._begin_shutdown(session, None)
            return
        unclaimed = self._unclaimed.pop(request_id, None)
        if unclaimed is not None:
            # Delivered but never taken: cancel the execute and terminate the orphaned cell so
            # nothing runs on with nobody to observe it.
            self._queue(OperationCancel(RequestId(request_id)))
            self._terminate_abandoned(unclaimed.session_id, unclaimed.cell_id)

    def _terminate_abandoned(self, session_id: str, cell_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            self.fail(f"code-mode host admitted an abandoned cell in unknown session {session_id}")
            return
        if session.closing:
            return  # the session's shutdown terminates it
        self._send_request(
            TerminateRequest(session_id, cell_id), _Pending("terminate", None, session_id, cell_id)
        )

    # ----------------------------------------------------------------------- host messages

    def _handle_host_message(self, message: Any) -> None:
        kind = type(message)
        if kind is OperationResponse:
            self._on_response(message)
        elif kind is InitialResponse:
            self._on_initial_response(message)
        elif kind is DelegateRequest:
            self._on_delegate_request(message)
        elif kind is DelegateCancel:
            self._on_delegate_cancel(message.id)
        elif kind is CellClosed:
            self._on_cell_closed(message)
        elif kind is ConnectionReady or kind is ConnectionRejected:
            self.fail("code-mode host sent a second handshake response")

    def _on_response(self, message: OperationResponse) -> None:
        pending = self._pending.pop(message.id, None)
        if pending is None:
            self.fail(f"code-mode host returned unknown request ID {RequestId(message.id)!r}")
            return
        handler = {
            "open": self._on_open_response,
            "execute": self._on_execute_response,
            "wait": self._on_cell_response,
            "terminate": self._on_cell_response,
            "shutdown": self._on_shutdown_response,
        }[pending.kind]
        handler(message, pending)

    def _fail_with_reply(self, pending: _Pending, reason: str) -> None:
        if pending.slot is not None:
            pending.slot.fail(ConnectionFailed(reason))
        self.fail(reason)

    def _on_open_response(self, message: OperationResponse, pending: _Pending) -> None:
        session_id = pending.session_id
        self._opening.discard(session_id)
        result = message.result
        if type(result) is WireError:
            if pending.slot is not None:
                pending.slot.fail(HostError(result.message))
            return
        value = result.value  # type: ignore[union-attr]
        if type(value) is not SessionReady or value.session_id != session_id:
            self._fail_with_reply(
                pending, "code-mode host returned an invalid open-session response"
            )
            return
        assert pending.delegate is not None
        assert pending.cleaned_up is not None
        session = _Session(session_id, pending.delegate, cleaned_up=pending.cleaned_up)
        self._sessions[session_id] = session
        if pending.slot is None or not pending.slot.set(None):
            # The caller gave up, but the host committed the session: shut it down ourselves.
            self._begin_shutdown(session, None)
        else:
            # Delivered, but the caller may be cancelled before it takes the Session; until
            # it claims it, an abandonment still shuts the session down.
            self._unclaimed_opens[message.id] = session_id

    def _on_execute_response(self, message: OperationResponse, pending: _Pending) -> None:
        session = self._sessions.get(pending.session_id)
        if session is not None:
            session.pending_executes -= 1
        result = message.result
        slot = pending.slot
        assert slot is not None
        if type(result) is WireError:
            slot.fail(HostError(result.message))
            return
        value = result.value  # type: ignore[union-attr]
        if type(value) is not ExecutionStarted:
            self._fail_with_reply(pending, "code-mode host returned an invalid execute response")
            return
        cell_id = value.cell_id
        if session is None:
            slot.fail(SessionClosed("code-mode session closed during execute"))
            return
        if cell_id in session.cells:
            self._fail_with_reply(
                pending,
                f"code-mode host reused live cell {cell_id} in session {session.session_id}",
            )
            return
        session.cells[cell_id] = _Cell(session, cell_id)
        initial: ReplySlot[RuntimeResponse] = ReplySlot()
        self._initial[message.id] = _Initial(session.session_id, cell_id, initial)
        from .session import StartedCell  # local: session.py imports this module

        started = StartedCell(cell_id, initial, session.session_id)
        if not slot.set(started):
            # The caller was cancelled: the cell is running with nobody to observe it.
            self._terminate_abandoned(session.session_id, cell_id)
            return
        self._unclaimed[message.id] = _Unclaimed(session.session_id, cell_id)

    def _on_cell_response(self, message: OperationResponse, pending: _Pending) -> None:
        result = message.result
        slot = pending.slot
        what = "wait" if pending.kind == "wait" else "terminate"
        if type(result) is WireError:
            if slot is not None:
                slot.fail(HostError(result.message))
            return
        value = result.value  # type: ignore[union-attr]
        if type(value) is not WaitCompleted:
            self._fail_with_reply(pending, "code-mode host returned an invalid cell response")
            return
        outcome: WaitOutcome = value.outcome
        got = outcome.response.cell_id
        if got != pending.cell_id:
            self._fail_with_reply(
                pending,
                f"code-mode host returned cell {got} for request targeting {pending.cell_id}",
            )
            return
        if slot is not None and not slot.set(outcome) and not slot.done:
            logger.debug("dropping %s response for an abandoned caller", what)

    def _on_shutdown_response(self, message: OperationResponse, pending: _Pending) -> None:
        result = message.result
        if type(result) is WireError:
            # The reference client treats a failed shutdown as fatal: the session's state on
            # the host is unknown from here on.
            self._fail_with_reply(pending, result.message)
            return
        value = result.value  # type: ignore[union-attr]
        if type(value) is not SessionClosedResponse or value.session_id != pending.session_id:
            self._fail_with_reply(pending, "code-mode host returned an invalid shutdown response")
            return
        session = self._sessions.pop(pending.session_id, None)
        if session is not None:
            self._close_session_locally(session)
        if pending.slot is not None:
            pending.slot.set(None)

    def _close_session_locally(self, session: _Session) -> None:
        for request_id in [
            r for r, u in self._unclaimed.items() if u.session_id == session.session_id
        ]:
            del self._unclaimed[request_id]
        for cell in list(session.cells.values()):
            self._close_cell(cell)
        session.cleaned_up.set()

    def _on_initial_response(self, message: InitialResponse) -> None:
        initial = self._initial.pop(message.id, None)
        if initial is None:
            self.fail(
                "code-mode host returned initial response for unknown request ID "
                f"{RequestId(message.id)!r}"
            )
            return
        result = message.result
        if type(result) is WireError:
            initial.slot.fail(HostError(result.message))
            return
        response: RuntimeResponse = result.value  # type: ignore[union-attr]
        if response.cell_id != initial.cell_id:
            reason = (
                f"code-mode host returned initial response for cell {response.cell_id} "
                f"instead of {initial.cell_id}"
            )
            initial.slot.fail(ConnectionFailed(reason))
            self.fail(reason)
            return
        initial.slot.set(response)

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
        self._close_cell(cell)

    def _close_cell(self, cell: _Cell) -> None:
        """Remove a cell, revoke its delegate calls and tell its delegate (exactly once)."""
        session = cell.session
        if session.cells.pop(cell.cell_id, None) is None:
            return
        for call_id in list(cell.delegate_calls):
            call = self._delegates.get(call_id)
            if call is not None:
                self._revoke(call)
        try:
            session.delegate.cell_closed(cell.cell_id)
        except Exception:
            # A broken hook must not take the connection (or other cells) down with it.
            logger.exception("cell_closed(%r) raised; ignored", cell.cell_id)

    # ----------------------------------------------------------------------- delegates

    def _on_delegate_request(self, message: DelegateRequest) -> None:
        session = self._sessions.get(message.session_id)
        cell = session.cells.get(message.cell_id) if session is not None else None
        if cell is None:
            if session is not None and session.pending_executes > 0:
                # The cell's execution/started may still be on its way: park the call and run
                # it as soon as the cell is admitted (or drop it if the host cancels it first).
                # The reference caps parked calls at 1024 whatever the delegate capacity.
                if len(self._parked) >= self._config.max_pending_delegates:
                    self.fail("code-mode host exceeded deferred cross-socket message limit")
                    return
                self._parked.append(message)
                return
            reason = (
                f"code-mode host delegated for unknown session {message.session_id}"
                if session is None
                else f"code-mode host delegated for unknown cell {message.cell_id} "
                f"in session {message.session_id}"
            )
            self._reply_delegate(message.id, WireError(reason))
            return
        delegate_id = message.id
        if delegate_id in self._delegates or delegate_id in self._recent_delegate_set:
            self.fail(f"duplicate code-mode delegate request ID {DelegateRequestId(delegate_id)!r}")
            return
        self._remember_delegate_id(delegate_id)
        if len(self._delegates) >= self._max_pending_delegates:
            self._reply_delegate(
                delegate_id,
                WireError(
                    f"code-mode host exceeded the limit of {self._max_pending_delegates} "
                    "pending delegate calls"
                ),
            )
            return
        call = DelegateCall(delegate_id, cell, trio.CancelScope())
        self._delegates[delegate_id] = call
        cell.delegate_calls.add(delegate_id)
        self._delegate_nursery.start_soon(
            self._run_delegate,
            call,
            cell.session.delegate,
            message.request,
        )

    def _remember_delegate_id(self, delegate_id: int) -> None:
        self._recent_delegate_ids.append(delegate_id)
        self._recent_delegate_set.add(delegate_id)
        if len(self._recent_delegate_ids) > self._config.recent_delegate_ids:
            self._recent_delegate_set.discard(self._recent_delegate_ids.popleft())

    async def _run_delegate(
        self, call: DelegateCall, delegate: Delegate, request: ToolCall | Notification
    ) -> None:
        """One delegate call, in its own cancel scope. Runs in the delegate nursery."""
        result: WireOk[DelegateResult] | WireError | None = None
        # The try sits OUTSIDE the scope: a delegate whose own nursery fails during
        # cancellation raises a group of [Cancelled, error]; the scope strips the Cancelled and
        # what is left must still be caught here, not crash the delegate nursery.
        try:
            with call.scope:
                if type(request) is ToolCall:
                    result = WireOk(ToolResult(await delegate.invoke_tool(request)))
                else:
                    await delegate.notify(request)  # type: ignore[arg-type]
                    result = WireOk(NotificationDelivered())
        except ToolError as exc:
            # A deliberate rejection for the script, not a bug: no traceback.
            logger.debug("delegate call %d rejected: %s", call.id, exc)
            result = WireError(describe_delegate_error(exc))
        except Exception as exc:
            if call.revoked:
                logger.debug("revoked delegate call %d raised %r", call.id, exc, exc_info=True)
            else:
                logger.warning("delegate call %d raised %r", call.id, exc, exc_info=True)
            result = WireError(describe_delegate_error(exc))
        if call.revoked or result is None:
            return  # revoked: its completion path is cut, no reply is ever sent
        # Hand the result to the driver without another trip through the scheduler: the notice
        # channel never blocks (at most one result per active call is ever in it).
        self._post(DelegateDone(call, result))

    def _on_delegate_done(self, call: DelegateCall, result: WireOk[Any] | WireError) -> None:
        if self._delegates.get(call.id) is not call:
            return
        del self._delegates[call.id]
        call.cell.delegate_calls.discard(call.id)
        self._reply_delegate(call.id, result)

    def _reply_delegate(self, delegate_id: int, result: WireOk[Any] | WireError) -> None:
        response_id = DelegateRequestId(delegate_id)
        try:
            frame = encode_frame(encode_client_message(DelegateResponse(response_id, result)))
        except EncodeError as exc:
            text = str(exc)
            reason = (
                f"code-mode delegate response exceeds the IPC frame limit: {exc}"
                if "exceeds" in text
                else f"code-mode delegate result is not valid JSON: {exc}"
            )
            try:
                frame = encode_frame(
                    encode_client_message(DelegateResponse(response_id, WireError(reason)))
                )
            except EncodeError as second:  # pragma: no cover - an error text this big is a bug
                self.fail(f"failed to encode code-mode delegate error response: {second}")
                return
        self._queue_frame(frame)

    def _on_delegate_cancel(self, delegate_id: int) -> None:
        for index, parked in enumerate(self._parked):
            if parked.id == delegate_id:
                del self._parked[index]
                return
        call = self._delegates.get(delegate_id)
        if call is not None:
            self._revoke(call)

    def _revoke(self, call: DelegateCall) -> None:
        """Cancel a call's scope and forget it, without waiting for it to finish."""
        call.revoked = True
        call.scope.cancel()
        if self._delegates.get(call.id) is call:
            del self._delegates[call.id]
        call.cell.delegate_calls.discard(call.id)

    def _dispatch_parked(self) -> None:
        """One FIFO pass over parked delegate requests: run those whose cell is now known."""
        for _ in range(len(self._parked)):
            if self._failed:
                return
            message = self._parked.popleft()
            session = self._sessions.get(message.session_id)
            ready = (
                session is None or message.cell_id in session.cells or session.pending_executes == 0
            )
            if ready:
                self._on_delegate_request(message)
            else:
                self._parked.append(message)

    def _flush_deferred_waits(self) -> None:
        if not self._deferred_waits:
            return
        waits, self._deferred_waits = self._deferred_waits, deque()
        for command in waits:
            if self._failed:
                command.slot.fail(ConnectionFailed(self._lifecycle.reason()))
                continue
            if command.slot.abandoned:
                command.slot.fail(HostError("code-mode request cancelled"))
            elif self._cancelled_wait_pending(command.session_id, command.cell_id):
                self._deferred_waits.append(command)
            else:
                self._on_wait(command)

    # ----------------------------------------------------------------------- failure

    def _refuse(self, item: InboxItem) -> None:
        slot = getattr(item, "slot", None)
        if isinstance(slot, ReplySlot):
            slot.fail(ConnectionFailed(self._lifecycle.reason()))

    def fail(self, reason: str) -> None:
        """Fail the connection (idempotent): the first reason ever recorded wins.

        Every waiter gets the reason, every live cell is closed exactly once, every delegate
        call is revoked, and the connection's tasks are cancelled. Nothing here awaits.
        """
        if self._failed:
            return
        self._failed = True
        self._lifecycle.record_failure(reason)
        error = ConnectionFailed(self._lifecycle.reason())
        for pending in self._pending.values():
            if pending.slot is not None:
                pending.slot.fail(error)
        self._pending.clear()
        for initial in self._initial.values():
            initial.slot.fail(error)
        self._initial.clear()
        for command in self._deferred_waits:
            command.slot.fail(error)
        self._deferred_waits.clear()
        self._parked.clear()
        self._unclaimed.clear()
        self._unclaimed_opens.clear()
        for call in list(self._delegates.values()):
            self._revoke(call)
        for session in list(self._sessions.values()):
            for cell in list(session.cells.values()):
                self._close_cell(cell)
            session.cleaned_up.set()
        self._sessions.clear()
        # Commands still queued for us would otherwise wait forever.
        while True:
            try:
                item = self._inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            self._refuse(item)
        while True:
            try:
                notice = self._notices.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            self._refuse(notice)  # type: ignore[arg-type]
        self._inbox.close()
        self._notices.close()
        self._on_fail()
