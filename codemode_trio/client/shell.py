r"""The Trio shell around :class:`~codemode_trio.protocol.client_protocol.ClientProtocol`.

All protocol state lives in the machine, which is synchronous: whichever task has something to
apply applies it directly, and Trio's single thread makes that safe without locks.

.. code-block:: text

    reader task ── bytes ──►┐
    caller tasks ─ commands ►│  ClientProtocol  ──events──► reply slots, delegate tasks,
    cancelled callers ──────►│  (the rules)               cell_closed hooks
    delegate tasks ─ results►┘        │
                                      └─ bytes ─► Outbox: written at once, or through the
                                                  writer task's bounded memory channel

- The **reader** applies each read to the machine and dispatches the events at once.
- A **caller** applies its command, awaits its reply slot under a deadline, and when it is
  cancelled applies ``abandon`` from its ``except`` block (no await needed there).
- **One task per delegate call**, run by the
  :class:`~codemode_trio.client.delegate_runner.DelegateRunner` every transport shares; a
  finished call hands its outcome to the machine and writes the reply itself.

So whatever changes protocol state is applied in the order it happened, and a delegate's
result can never overtake a ``delegate/cancel`` read before it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from .._oserror import describe_stream_error
from ..errors import ConnectionFailed, HostError, SessionClosed
from ..protocol.client_events import (
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
from ..protocol.client_protocol import ClientProtocol
from ..protocol.content import RuntimeResponse, ToolCall
from ..protocol.errors import HostProtocolViolation
from ..protocol.lanes import Lane
from ..transport.streams import StreamFailure
from .cellscope import CellScope
from .config import ConnectionConfig
from .deadlines import CellHold
from .delegate_runner import DelegateRunner, DelegateTask, fatal_reason
from .delegates import Delegate, NoopDelegate
from .lifecycle import Lifecycle
from .outbox import Outbox
from .requests import ShellRequests, StartedReply
from .slots import ReplySlot

__all__ = ["ClientShell", "EofDetails", "StartedReply"]

logger = logging.getLogger("codemode_trio.connection")

_RECEIVE_SIZE = 256 * 1024
# How long an EOF description may take (it may wait for the process to exit).
_EOF_DETAILS_TIMEOUT = 2.0

#: Called when the host's stream ends, to describe why (e.g. the process's exit status and
#: the tail of its stderr). Returns ``None`` when there is nothing to add.
EofDetails = Callable[[], Awaitable[str | None]]


class _CellState:
    """What the shell keeps per live cell: its hold and its scope."""

    __slots__ = ("hold", "scope")

    def __init__(self, scope: CellScope | None) -> None:
        self.hold = CellHold()
        # The execute caller's context, budget and trace (None for a cell nobody executed
        # through this shell, e.g. one a replayed transcript starts).
        self.scope = scope


class ClientShell(ShellRequests):
    """Tasks, reply slots, deadlines and delegates around one :class:`ClientProtocol`.

    Created by :func:`~codemode_trio.open_connection` after the handshake; sessions talk to it.
    """

    def __init__(
        self,
        proto: ClientProtocol,
        stream: trio.abc.Stream,
        *,
        config: ConnectionConfig,
        lifecycle: Lifecycle,
        describe_eof: EofDetails | None,
        bulk: trio.abc.Stream | None = None,
    ) -> None:
        self.proto = proto
        self.config = config
        self.lifecycle = lifecycle
        self._stream = stream
        # The bulk lane of a dual-websocket connection: its own stream, reader and outbox
        # (with room for a result of every delegate call the host may have pending, as the
        # handshake set that limit), next to the control ones.
        self._bulk = bulk
        bulk_capacity = max(config.bulk_outgoing_capacity, proto.max_pending_delegates)
        self.bulk_outbox = Outbox(bulk, bulk_capacity, self.fail) if bulk is not None else None
        self._describe_eof = describe_eof
        self._slots: dict[Operation, ReplySlot[Any]] = {}
        self._initial_slots: dict[Operation, ReplySlot[RuntimeResponse]] = {}
        self._calls: dict[int, DelegateTask] = {}
        self._runner = DelegateRunner(self._finish, self._fatal)
        self._delegates: dict[str, Delegate] = {}
        self._cleanups: dict[str, trio.Event] = {}
        self._cells: dict[tuple[str, str], _CellState] = {}
        # An execute's scope, from the caller's command until the host starts the cell.
        self._pending_scopes: dict[Operation, CellScope] = {}
        # Live cells with a trace: while there are none, observations skip the lookup.
        self._traced = 0
        self.outbox = Outbox(stream, config.outgoing_capacity, self.fail)
        self._services = trio.CancelScope()
        self._service_nursery: trio.Nursery | None = None
        #: A BaseException (SystemExit, KeyboardInterrupt...) a delegate raised: it ends the
        #: connection and is raised again, as itself, when the connection's block exits.
        self.fatal_exception: BaseException | None = None
        #: Set once the connection's tasks have all finished.
        self.stopped = trio.Event()

    # ------------------------------------------------------------------ running

    async def run_tasks(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the reader, the writer and the delegate nursery until the connection ends."""
        try:
            with self._services:
                async with trio.open_nursery() as services:
                    self._service_nursery = services
                    await services.start(self._runner.serve, name="codemode-trio delegates")
                    services.start_soon(
                        self.outbox.run_writer,
                        self.lifecycle.wait_failed,
                        name="codemode-trio writer",
                    )
                    services.start_soon(self._read, name="codemode-trio reader")
                    if self._bulk is not None:
                        assert self.bulk_outbox is not None
                        services.start_soon(
                            self.bulk_outbox.run_writer,
                            self.lifecycle.wait_failed,
                            name="codemode-trio bulk writer",
                        )
                        services.start_soon(
                            self._read, self._bulk, Lane.BULK, name="codemode-trio bulk reader"
                        )
                    task_status.started()
                    # Anything the handshake's read brought after connection/ready.
                    self._pump()
        except Exception as exc:
            # Our own tasks never raise by design; if one does, it is a bug: say so loudly,
            # and fail the connection rather than the caller's nursery.
            logger.exception("code-mode connection task crashed")
            while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            self.fail(f"code-mode connection task failed: {exc!r}")
        finally:
            self.fail("code-mode connection driver stopped unexpectedly")
            self.outbox.close()
            if self.bulk_outbox is not None:
                self.bulk_outbox.close()
            try:
                try:
                    if self._bulk is not None:
                        await trio.aclose_forcefully(self._bulk)
                finally:
                    # When the caller's scope is cancelled the close above raises Cancelled
                    # (after closing its socket): the control stream must be closed all the same.
                    await trio.aclose_forcefully(self._stream)
            finally:
                self.stopped.set()

    def close(self, reason: str = "code-mode host connection closed") -> None:
        """Fail the connection with ``reason`` (idempotent) and stop its tasks."""
        self.fail(reason)

    def fail(self, reason: str) -> None:
        """Fail the connection: the first reason ever recorded wins."""
        self.lifecycle.record_failure(reason)
        self.proto.fail(self.lifecycle.reason())
        self._pump()
        self._services.cancel()

    # ------------------------------------------------------------------ the machine

    def _pump(self) -> None:
        """Dispatch every event the machine produced, then send what it queued."""
        proto = self.proto
        while not isinstance(event := proto.next_event(), NeedData):
            self._dispatch(event)
        data = proto.data_to_send()
        if data:
            self.outbox.push(data)
        bulk = self.bulk_outbox
        if bulk is not None:
            data = proto.data_to_send(Lane.BULK)
            if data:
                bulk.push(data)

    def _dispatch(self, event: Event) -> None:
        match event:
            case DelegateStarted(call=call):  # the hot path comes first
                self._start_delegate(call)
            case CellObserved(op=op, outcome=outcome):
                slot = self._slots.pop(op, None)
                if slot is not None:
                    slot.set(outcome)
                if self._traced:
                    self._observed(op, outcome.response)
            case InitialResult(op=op, response=response):
                initial = self._initial_slots.pop(op, None)
                if initial is not None:
                    initial.set(response)
                if self._traced:
                    self._observed(op, response)
            case CellStarted(op=op):
                self._on_cell_started(op)
            case CellReleased(session_id=session_id, cell_id=cell_id):
                self._on_cell_released(session_id, cell_id)
            case DelegateRevoked(call=call):
                self._revoke(call)
            case OperationFailed():
                self._on_failed(event)
            case SessionOpened(op=op) | SessionShutDown(op=op):
                slot = self._slots.pop(op, None)
                if slot is not None:
                    slot.set(None)
            case SessionReleased(session_id=session_id):
                self._on_session_released(session_id)
            case InternalRequest(op=op):
                self._watch_internal(op)
            case Failed(reason=reason):
                self.lifecycle.record_failure(reason)
                self._services.cancel()

    def _on_cell_started(self, op: Operation) -> None:
        slot = self._slots.pop(op, None)
        assert op.cell_id is not None
        scope = self._pending_scopes.pop(op, None)
        if scope is not None and scope.trace is not None:
            scope.trace.started(op.cell_id)
            self._traced += 1
        self._cells[(op.session_id, op.cell_id)] = _CellState(scope)
        initial: ReplySlot[RuntimeResponse] = ReplySlot()
        self._initial_slots[op] = initial
        if slot is not None:
            slot.set((op.cell_id, initial))

    def _on_failed(self, event: OperationFailed) -> None:
        op = event.op
        slot: ReplySlot[Any] | None = self._slots.pop(op, None)
        if slot is None:
            slot = self._initial_slots.pop(op, None)
        if slot is None:
            return
        if event.fault is Fault.CONNECTION:
            # The machine fails with the first reason; Failed(reason) comes after these.
            self.lifecycle.record_failure(event.message)
            slot.fail(ConnectionFailed(self.lifecycle.reason()))
        elif event.fault is Fault.SESSION:
            slot.fail(SessionClosed(event.message))
        else:
            slot.fail(HostError(event.message))

    def _observed(self, op: Operation, response: RuntimeResponse) -> None:
        """Hand a traced cell's observation to its trace (the final one ends its span)."""
        if op.cell_id is None:
            return
        cell = self._cells.get((op.session_id, op.cell_id))
        if cell is not None and cell.scope is not None and cell.scope.trace is not None:
            cell.scope.trace.observed(response)

    def _on_cell_released(self, session_id: str, cell_id: str) -> None:
        cell = self._cells.pop((session_id, cell_id), None)
        if cell is not None and cell.scope is not None and cell.scope.trace is not None:
            self._traced -= 1
            cell.scope.trace.closed()
        delegate = self._delegates.get(session_id)
        if delegate is None:
            return
        try:
            delegate.cell_closed(cell_id)
        except Exception:
            # A broken hook must not take the connection (or other cells) down with it.
            logger.exception("cell_closed(%r) raised; ignored", cell_id)

    def _on_session_released(self, session_id: str) -> None:
        self._delegates.pop(session_id, None)
        cleanup = self._cleanups.pop(session_id, None)
        if cleanup is not None:
            cleanup.set()

    def _watch_internal(self, op: Operation) -> None:
        """Give a request the machine sent on its own a deadline like any other."""
        slot: ReplySlot[Any] = ReplySlot()
        self._slots[op] = slot
        what = "terminate" if op.kind is OperationKind.TERMINATE else "shutdown"
        nursery = self._service_nursery
        if nursery is not None:
            nursery.start_soon(
                self._expect_internal_reply,
                slot,
                f"code-mode host timed out waiting for {what} response",
                name=f"codemode-trio internal {what} {op.request_id}",
            )

    async def _expect_internal_reply(self, slot: ReplySlot[Any], reason: str) -> None:
        with trio.move_on_after(self.config.transport_timeout):
            await slot.wait_done()
            return
        self._timed_out(reason)

    # ------------------------------------------------------------------ the reader

    async def _read(self, stream: trio.abc.Stream | None = None, lane: Lane = Lane.CONTROL) -> None:
        """Apply what the host sends on one lane (the control one unless told otherwise)."""
        if stream is None:
            stream = self._stream
        proto = self.proto
        while True:
            try:
                data = await stream.receive_some(_RECEIVE_SIZE)
            except StreamFailure as exc:
                self.fail(exc.reason)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self.fail(f"failed to read code-mode host message: {describe_stream_error(exc)}")
                return
            if not data:
                details = await self._eof_details()
                proto.receive_eof(details, lane)
                self._pump()
                return
            # A violation leaves the fail-stop events queued; the pump below applies them.
            try:  # noqa: SIM105 - not contextlib.suppress: this runs for every read
                proto.receive_data(data, lane)
            except HostProtocolViolation:
                pass
            self._pump()

    async def _eof_details(self) -> str | None:
        if self._describe_eof is None:
            return None
        with trio.move_on_after(_EOF_DETAILS_TIMEOUT):
            details: str | None = await self._describe_eof()
            return details
        return None

    # ------------------------------------------------------------------ delegates

    def _start_delegate(self, call: DelegateCall) -> None:
        delegate = self._delegates.get(call.session_id)
        if delegate is None:  # not `or`: a ToolRegistry without tools is falsy
            delegate = _NO_DELEGATE
        request = call.request
        key = (call.session_id, call.cell_id)
        cell = self._cells.get(key)
        context = hold = order = None
        if cell is not None:
            hold = cell.hold
            scope = cell.scope
            if scope is not None:
                context = scope.context
                # Only a cell with a budget counts its tool calls (most have none).
                if scope.remaining is not None and type(request) is ToolCall:
                    refusal = scope.admit(request.name)
                    if refusal is not None:
                        delegate = refusal
                if scope.trace is not None:
                    delegate = scope.trace.wrap(delegate)
            if type(request) is not ToolCall:
                order = key  # a cell's notifications reach the delegate in order
            hold.enter()
        task = DelegateTask(call, request, delegate, hold)
        self._calls[call.id] = task
        name = (
            f"delegate {call.id} tools.{request.name}"
            if type(request) is ToolCall
            else f"delegate {call.id} notify"
        )
        self._runner.start(task, context, name, order)

    def _hold(self, session_id: str, cell_id: str) -> CellHold | None:
        cell = self._cells.get((session_id, cell_id))
        return cell.hold if cell is not None else None

    def _revoke(self, call: DelegateCall) -> None:
        task = self._calls.pop(call.id, None)
        if task is not None:
            self._runner.revoke(task)

    def _finish(self, task: DelegateTask, ok: bool, value: Any, message: str) -> None:
        """Hand a call's outcome to the machine and send the reply it queued."""
        call: DelegateCall = task.call
        if self._calls.get(call.id) is not task:
            return  # no longer the machine's call: nothing to answer
        del self._calls[call.id]
        proto = self.proto
        if not ok:
            proto.reject_delegate(call, message)
        elif type(task.request) is ToolCall:
            proto.complete_tool_call(call, value)
        else:
            proto.complete_notification(call)
        self._pump()

    def _fatal(self, exc: BaseException) -> None:
        if self.fatal_exception is None:
            self.fatal_exception = exc
        self.fail(fatal_reason(exc))


_NO_DELEGATE = NoopDelegate()
