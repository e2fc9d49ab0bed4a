"""The reference host: one code-mode connection served over a Trio stream.

:func:`serve_connection` is a thin Trio shell over the sans-IO
:class:`~codemode_trio.protocol.host_protocol.HostProtocol`. The machine decides every protocol
question; this module owns what takes time: one task per running cell (the
:class:`~codemode_trio.host.runtime.CellRuntime`), one task per pending observation (an execute's
initial response or a wait, each racing its yield deadline), tool calls parked until the
client's ``delegate/response``, and a single writer that sends the machine's frames in order.

Timing follows host 0.171.0: a ``null`` yield means 10 s; a session's ``maxYieldTimeMs`` caps
every deadline; a deadline of 10 s or more fires one second late, as the reference does. A
finished cell with an unacknowledged notification produces no result until the client
acknowledges it, not even at the deadline.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import sys
from typing import TextIO

import attrs
import trio

from ..protocol.content import CellLimits, ContentItem, RuntimeResponse, ToolDefinition
from ..protocol.host_protocol import (
    CancelRequested,
    ConnectionClosed,
    DelegateAnswered,
    DelegateRefused,
    ExecuteRequested,
    FatalClientError,
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
from ..protocol.lanes import Lane
from ..protocol.messages import DelegateResult, NotificationDelivered, ToolResult, WireError, WireOk
from ..protocol.toolnames import bind_tools
from .bulk import PAIRING_TIMEOUT_S, BulkPairing
from .output import truncate_output, with_script_error
from .runtime import JSON, MISSING, CellOutcome, CellRuntime, Missing, ToolCallRejected

__all__ = ["DEFAULT_YIELD_MS", "serve_connection"]

#: The yield deadline of an execute whose ``yield_time_ms`` is ``null``.
DEFAULT_YIELD_MS = 10_000
# Deadlines of this length or more fire a second late on the reference host (SPEC §6.2).
_LATE_YIELD_MS = 10_000
_LATE_BY_MS = 1_000

_CALLBACKS = "codex_code_mode_runtime::cell_actor::callbacks"
# Delegate requests one cell may issue in one burst. Host 0.171.0 drops the connection silently
# (exit 0, nothing on stderr) when a script issues calls faster than its per-cell queue drains:
# 180 calls at once always passed, 200 failed half the time, 240 mostly failed (SPEC §13.3).
CELL_BURST_LIMIT = 200
# Requests closer together than this belong to one burst. A synchronous loop in the script
# issues them microseconds apart, but on a loaded machine the isolate's thread can be paused
# for several scheduler slices mid-burst; a script that waits longer between batches is paced.
CELL_BURST_GAP = 0.05
# How long a dying connection may spend sending the answers queued before its end.
_DRAIN_SECONDS = 5.0


class _Log:
    """Warnings on stderr in the reference host's shape (never on stdout)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def warn(self, target: str, message: str) -> None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        print(f"{stamp}  WARN {target}: {message}", file=self.stream, flush=True)


@attrs.define(eq=False)
class _Session:
    session_id: str
    max_yield_ms: int | None
    max_heap_size_bytes: int | None
    server_truncation: bool
    store: dict[str, str] = attrs.Factory(dict)
    cells: dict[str, _Cell] = attrs.Factory(dict)


@attrs.define(eq=False)
class _Observer:
    """A pending observation of a cell: the execute's initial response, or a wait."""

    request_id: int
    initial: bool
    deadline: float
    budget: int | None
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


@attrs.define(eq=False)
class _Cell:
    session: _Session
    cell_id: str
    tools: dict[str, ToolDefinition]
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    output: list[ContentItem] = attrs.Factory(list)
    outcome: CellOutcome | None = None
    ready_at: float | None = None
    # The result was ready while an observer was watching: it was not buffered.
    ready_watched: bool = False
    terminated: bool = False
    # The output a terminate collected; a pending observation reports the same items.
    terminated_output: tuple[ContentItem, ...] | None = None
    observer: _Observer | None = None
    # An initial response past its deadline that waits only for the notifications'
    # acknowledgement; it no longer blocks a wait (HostProtocol.detach_initial).
    detached: _Observer | None = None
    calls: dict[int, trio.Event] = attrs.Factory(dict)
    answers: dict[int, WireOk[DelegateResult] | WireError] = attrs.Factory(dict)
    notes: set[int] = attrs.Factory(set)
    # Delegate requests sent and neither answered nor cancelled, by delegate id.
    outstanding: set[int] = attrs.Factory(set)
    # The current burst of delegate requests (see CELL_BURST_LIMIT) and when it last grew.
    burst: int = 0
    burst_at: float = -math.inf
    changed: trio.Event = attrs.Factory(trio.Event)

    @property
    def result_ready(self) -> bool:
        """The script ended and every notification it sent was acknowledged."""
        return self.outcome is not None and not self.notes

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def take_output(self) -> tuple[ContentItem, ...]:
        items = tuple(self.output)
        self.output.clear()
        return items

    def bound(self, items: tuple[ContentItem, ...], budget: int | None) -> tuple[ContentItem, ...]:
        return truncate_output(items, budget) if self.session.server_truncation else items


class _Hooks:
    """What one cell's script reaches through its globals (the runtime calls these)."""

    def __init__(self, server: _Server, cell: _Cell) -> None:
        self._server = server
        self._cell = cell

    def emit(self, item: ContentItem) -> None:
        if not self._cell.terminated:
            self._cell.output.append(item)

    def yield_control(self) -> None:
        # The observation is answered now, with the output so far: later output is the
        # next observer's, as on the reference host.
        if not self._cell.terminated:
            self._server.yield_now(self._cell)

    def notify(self, text: str) -> None:
        cell = self._cell
        if cell.terminated:
            return
        server = self._server
        try:
            did = server.protocol.send_notification(cell.session.session_id, cell.cell_id, text)
        except DelegateRefused as exc:
            raise ToolCallRejected(exc.message) from None
        cell.notes.add(did)
        server.queued_delegate(cell, did)

    async def call_tool(self, binding: str, input: JSON) -> JSON:
        cell = self._cell
        tool = cell.tools.get(binding)
        if tool is None:
            raise ToolCallRejected(f"TypeError: tools.{binding} is not a function")
        if cell.terminated:
            await trio.sleep_forever()  # the cell's scope is cancelled: this unwinds it
        server = self._server
        try:
            did = server.protocol.call_tool(cell.session.session_id, cell.cell_id, tool, input)
        except DelegateRefused as exc:
            raise ToolCallRejected(exc.message) from None
        cell.calls[did] = answered = trio.Event()
        server.queued_delegate(cell, did)
        try:
            await answered.wait()
        finally:
            cell.calls.pop(did, None)
        result = cell.answers.pop(did)
        if isinstance(result, WireError):
            raise ToolCallRejected(result.message)
        if type(result.value) is not ToolResult:
            raise ToolCallRejected("code-mode client returned an invalid tool result")
        return result.value.result

    def store(self, key: str, value: JSON) -> None:
        # Kept as JSON text: later changes to the script's object must not reach the store.
        self._cell.session.store[key] = json.dumps(value)

    def load(self, key: str) -> JSON | Missing:
        stored = self._cell.session.store.get(key)
        return MISSING if stored is None else json.loads(stored)


class _Server:
    def __init__(
        self,
        stream: trio.abc.Stream,
        runtime: CellRuntime,
        nursery: trio.Nursery,
        log: _Log,
        bulk: BulkPairing | None = None,
    ) -> None:
        self.stream = stream
        self.runtime = runtime
        self.nursery = nursery
        self.log = log
        self.protocol = HostProtocol(
            clock=lambda: int(trio.current_time() * 1e9),
            bulk_token=None if bulk is None else bulk.token,
        )
        self.sessions: dict[str, _Session] = {}
        self._dirty = trio.Event()
        # The bulk lane (dual-websocket-v1): its pairing, its writer's wake-up, and the scope
        # that interrupts the control reader's read when the bulk reader saw the end.
        self.bulk = bulk
        self._bulk_dirty = trio.Event()
        self._read_scope: trio.CancelScope | None = None
        # Set to make the writer stop once everything queued so far is sent.
        self._draining = False
        # Set when the writer stopped: after a refused handshake (then the host exits 0), or
        # after draining.
        self.done = trio.Event()
        # Set when a cell's burst of delegate requests overflowed: the connection is dropped.
        self.overflowed = trio.Event()

    # ------------------------------------------------------------------ writing

    def flush(self) -> None:
        """Frames were queued on the machine: let the writers send them."""
        if not self.protocol.lanes:
            self._dirty.set()
            return
        # Two writers: wake only the one with something to send (a task switch each).
        protocol = self.protocol
        if self._draining or protocol.has_data_to_send(Lane.CONTROL):
            self._dirty.set()
        if protocol.has_data_to_send(Lane.BULK):
            self._bulk_dirty.set()

    def queued_delegate(self, cell: _Cell, delegate_id: int) -> None:
        """A cell sent a delegate request; too many in one burst drop the client."""
        # A burst is calls issued while earlier ones are still unanswered: a script that
        # awaits each call before the next (the common sequential loop) never makes one.
        now = trio.current_time()
        in_burst = bool(cell.outstanding) and now - cell.burst_at <= CELL_BURST_GAP
        cell.outstanding.add(delegate_id)
        cell.burst = cell.burst + 1 if in_burst else 1
        cell.burst_at = now
        if cell.burst > CELL_BURST_LIMIT:
            self.overflowed.set()
        self.flush()

    async def writer(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            if data := self.protocol.data_to_send():
                await self.stream.send_all(data)
            if self.protocol.rejected or self._draining:
                self.done.set()
                return

    async def drain(self) -> None:
        """Send what the machine queued before the connection ended, then stop the writer."""
        self._draining = True
        self.flush()
        with trio.move_on_after(_DRAIN_SECONDS):
            await self.done.wait()

    # ------------------------------------------------------------------ reading

    async def reader(self) -> None:
        """Feed the client's bytes to the machine and act on each event, in order.

        With a bulk lane, the bulk reader applies its own events; when it meets the end of the
        connection (EOF or a violation, which the machine repeats) it interrupts this read,
        so the end is reported here either way.
        """
        while True:
            if self._apply_events():
                return
            self.flush()
            with trio.CancelScope() as self._read_scope:
                data = await self.stream.receive_some(65536)
            if self._read_scope.cancelled_caught:
                continue
            if data:
                self.protocol.receive_data(bytes(data))
            else:
                self.protocol.receive_eof()

    def _apply_events(self) -> bool:
        """Act on every event the machine has; ``True`` once the client has gone."""
        while True:
            event = self.protocol.next_event()
            if isinstance(event, NeedData):
                return False
            if isinstance(event, ConnectionClosed):
                return True
            self.handle(event)

    async def _run_bulk(self, pairing: BulkPairing) -> None:
        """The bulk lane: wait for its socket, then read from it and write to it."""
        stream: trio.abc.Stream | None = None
        with trio.move_on_after(PAIRING_TIMEOUT_S):
            stream = await pairing.wait()
        if stream is None:
            print("timed out pairing code-mode host bulk websocket", file=self.log.stream)
            self.nursery.cancel_scope.cancel()
            return
        self.nursery.start_soon(self._read_bulk, stream)
        # A client that stops reading ends the connection, as on the control lane.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                await self._bulk_dirty.wait()
                self._bulk_dirty = trio.Event()
                if data := self.protocol.data_to_send(Lane.BULK):
                    await stream.send_all(data)
        self.nursery.cancel_scope.cancel()

    async def _read_bulk(self, stream: trio.abc.Stream) -> None:
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if data:
                self.protocol.receive_data(bytes(data), Lane.BULK)
            else:
                self.protocol.receive_eof(Lane.BULK)
            try:
                ended = self._apply_events()
            except FatalClientError:
                ended = True
            if ended:
                if self._read_scope is not None:
                    self._read_scope.cancel()
                return
            self.flush()

    def handle(self, event: HostEvent) -> None:
        if isinstance(event, DelegateAnswered):
            self._on_delegate_answered(event)
        elif isinstance(event, ExecuteRequested):
            self._on_execute(event)
        elif isinstance(event, WaitRequested):
            self._on_wait(event)
        elif isinstance(event, YieldRequested):
            self._on_yield(event)
        elif isinstance(event, CancelRequested):
            self._on_cancel(event)
        elif isinstance(event, TerminateRequested):
            self._on_terminate(event)
        elif isinstance(event, SessionOpenRequested):
            self._on_open(event)
        elif isinstance(event, ShutdownRequested):
            self._on_shutdown(event)
        elif isinstance(event, HelloReceived):
            self.protocol.answer_hello()
            if self.protocol.lanes and self.bulk is not None:
                self.nursery.start_soon(self._run_bulk, self.bulk)

    # ------------------------------------------------------------------ events

    def _on_open(self, event: SessionOpenRequested) -> None:
        limits = event.limits or CellLimits()
        self.sessions[event.session_id] = _Session(
            event.session_id,
            limits.max_yield_time_ms,
            limits.max_heap_size_bytes,
            event.server_truncation,
        )
        self.protocol.accept_session(event.request_id)

    def _deadline(self, session: _Session, yield_ms: int | None) -> float:
        ms = DEFAULT_YIELD_MS if yield_ms is None else yield_ms
        if session.max_yield_ms is not None and session.max_yield_ms <= ms:
            ms = session.max_yield_ms  # a deadline set by the session cap fires on time
        elif ms >= _LATE_YIELD_MS:
            ms += _LATE_BY_MS
        return trio.current_time() + ms / 1000

    def _on_execute(self, event: ExecuteRequested) -> None:
        session = self.sessions[event.session_id]
        cell_id = self.protocol.start_cell(event.request_id)
        cell = _Cell(session, cell_id, bind_tools(event.tools))
        session.cells[cell_id] = cell
        request = event.request
        deadline = self._deadline(session, request.yield_time_ms)
        observer = _Observer(event.request_id, True, deadline, request.max_output_tokens)
        cell.observer = observer
        self.nursery.start_soon(self._run_cell, cell, request.source, event.tools)
        if observer.deadline <= trio.current_time():
            # A zero deadline answers before the script runs at all, as the reference does.
            self._answer(cell, observer)
        else:
            self.nursery.start_soon(self._observe, cell, observer)

    def _on_wait(self, event: WaitRequested) -> None:
        cell = self.sessions[event.session_id].cells[event.cell_id]
        deadline = self._deadline(cell.session, event.yield_time_ms)
        observer = _Observer(event.request_id, False, deadline, event.max_output_tokens)
        cell.observer = observer
        self.nursery.start_soon(self._observe, cell, observer)

    def _on_yield(self, event: YieldRequested) -> None:
        cell = self.sessions[event.session_id].cells[event.cell_id]
        if cell.observer is not None and cell.observer.request_id == event.request_id:
            self.yield_now(cell)

    def yield_now(self, cell: _Cell) -> None:
        """Answer the cell's current observation with ``Yielded`` and the output so far."""
        observer = cell.observer
        if observer is None:
            return
        observer.scope.cancel()
        if cell.result_ready:
            self._answer(cell, observer)
        else:
            cell.observer = None
            items = cell.bound(cell.take_output(), observer.budget)
            self._send(observer, RuntimeResponse("yielded", cell.cell_id, items))
        self.flush()

    def _on_cancel(self, event: CancelRequested) -> None:
        # The machine already answered the wait; its output stays for the next observer.
        cell = self.sessions[event.session_id].cells.get(event.cell_id)
        observer = None if cell is None else cell.observer
        if cell is not None and observer is not None and observer.request_id == event.request_id:
            cell.observer = None
            observer.scope.cancel()

    def _on_terminate(self, event: TerminateRequested) -> None:
        cell = self.sessions[event.session_id].cells[event.cell_id]
        if cell.result_ready and not cell.terminated:
            response = self._final_response(cell, event.max_output_tokens)
            # Any observer still to be answered sees the cell as terminated.
            cell.terminated = True
            cell.wake()
            self.protocol.answer_terminate(event.request_id, response)
        else:
            self._terminate(cell)
            response = self._terminated_response(cell, event.max_output_tokens)
            self.protocol.answer_terminate(event.request_id, response)
            self._deliver_detached(cell)
        self._forget_if_closed(cell)

    def _on_shutdown(self, event: ShutdownRequested) -> None:
        session = self.sessions[event.session_id]
        # Cell by cell, as 0.171.0 does: its delegate cancels, its observer's Terminated, then
        # its cell/closed.
        for cell in sorted(session.cells.values(), key=lambda cell: int(cell.cell_id)):
            self._terminate(cell)
            observer = cell.observer
            if observer is not None:
                cell.observer = None
                observer.scope.cancel()
                self._send(observer, self._terminated_response(cell, observer.budget))
            self._deliver_detached(cell)
            if self.protocol.cell_is_open(session.session_id, cell.cell_id):
                self.protocol.close_cell(session.session_id, cell.cell_id)
        self.protocol.close_session(event.request_id)
        del self.sessions[event.session_id]

    def _on_delegate_answered(self, event: DelegateAnswered) -> None:
        session = self.sessions.get(event.session_id)
        cell = None if session is None else session.cells.get(event.cell_id)
        if cell is None:
            return
        did = int(event.delegate_id)
        cell.outstanding.discard(did)
        answered = cell.calls.get(did)
        if answered is not None:
            cell.answers[did] = event.result
            answered.set()
            return
        if did in cell.notes:
            cell.notes.discard(did)
            result = event.result
            if isinstance(result, WireError):
                self._undelivered(result.message)
            elif type(result.value) is not NotificationDelivered:
                self._undelivered("code-mode client returned an invalid notification result")
            if cell.result_ready and cell.detached is not None and cell.observer is None:
                self._deliver_detached(cell)
            cell.wake()

    # ------------------------------------------------------------------ cells

    async def _run_cell(self, cell: _Cell, source: str, tools: tuple[ToolDefinition, ...]) -> None:
        hooks = _Hooks(self, cell)
        outcome: CellOutcome | None = None
        with cell.scope:
            try:
                outcome = await self.runtime.run(
                    source, tools, hooks, max_heap_size_bytes=cell.session.max_heap_size_bytes
                )
            except ToolCallRejected as exc:
                outcome = CellOutcome(exc.message)
        if outcome is None or cell.terminated:
            return
        # Calls the script did not await die with it (newest first, as 0.171.0 orders them);
        # notifications still hold the result back until acknowledged.
        for did in sorted(cell.outstanding - cell.notes, reverse=True):
            self.protocol.cancel_delegate(did)
            cell.outstanding.discard(did)
        cell.outcome = outcome
        cell.ready_at = trio.current_time()
        cell.ready_watched = cell.observer is not None
        self.flush()
        cell.wake()

    def _terminate(self, cell: _Cell) -> None:
        cell.terminated = True
        cell.scope.cancel()
        for _ in cell.notes:
            self._undelivered("code mode delegate request cancelled")
        cell.notes.clear()
        cell.wake()
        # 0.171.0 reports the same output to the terminate and to the pending observation.
        cell.terminated_output = cell.take_output()

    def _undelivered(self, reason: str) -> None:
        self.log.warn(_CALLBACKS, f"failed to deliver code mode notification: {reason}")

    async def _observe(self, cell: _Cell, observer: _Observer) -> None:
        with observer.scope:
            with trio.move_on_at(observer.deadline):
                while not (cell.result_ready or cell.terminated):
                    await cell.changed.wait()
            # A finished script waits for its notifications' acknowledgement, deadline or not.
            blocked = cell.outcome is not None and not (cell.result_ready or cell.terminated)
            if blocked and observer.initial and cell.observer is observer:
                # 0.171.0 lets a wait attach meanwhile; the result still comes here.
                cell.observer = None
                cell.detached = observer
                self.protocol.detach_initial(observer.request_id)
                return
            while cell.outcome is not None and not (cell.result_ready or cell.terminated):
                await cell.changed.wait()
            if cell.observer is observer:
                self._answer(cell, observer)
                self.flush()

    def _answer(self, cell: _Cell, observer: _Observer) -> None:
        cell.observer = None
        if cell.detached is not None and not cell.terminated:
            # The result belongs to the detached initial response; the wait finds no cell,
            # and its answer goes first, as on 0.171.0.
            self.protocol.answer_wait_missing(observer.request_id)
            self._deliver_detached(cell)
            return
        self._reply(cell, observer)

    def _deliver_detached(self, cell: _Cell) -> None:
        """Send the detached initial response its final observation."""
        observer = cell.detached
        if observer is None:
            return
        cell.detached = None
        # Only ever detached with the script ended: the reply is its result or Terminated.
        self._reply(cell, observer)
        self.flush()

    def _reply(self, cell: _Cell, observer: _Observer) -> None:
        if cell.terminated:
            response = self._terminated_response(cell, observer.budget)
        elif cell.result_ready:
            response = self._final_response(cell, observer.budget)
        else:
            items = cell.bound(cell.take_output(), observer.budget)
            response = RuntimeResponse("yielded", cell.cell_id, items)
        self._send(observer, response)
        self._forget_if_closed(cell)

    def _send(self, observer: _Observer, response: RuntimeResponse) -> None:
        if observer.initial:
            self.protocol.send_initial_response(observer.request_id, response)
        else:
            self.protocol.answer_wait(observer.request_id, response)

    def _terminated_response(self, cell: _Cell, budget: int | None) -> RuntimeResponse:
        output = cell.terminated_output
        if output is None:
            output = cell.take_output()
        return RuntimeResponse("terminated", cell.cell_id, cell.bound(output, budget))

    def _final_response(self, cell: _Cell, budget: int | None) -> RuntimeResponse:
        assert cell.outcome is not None
        assert cell.ready_at is not None
        error_text = cell.outcome.error_text
        items = cell.take_output()
        if cell.session.server_truncation:
            items = with_script_error(items, error_text)
        buffered = 0 if cell.ready_watched else trio.current_time() - cell.ready_at
        items = cell.bound(items, budget)
        return RuntimeResponse("result", cell.cell_id, items, error_text, int(buffered * 1e9))

    def _forget_if_closed(self, cell: _Cell) -> None:
        if not self.protocol.cell_is_open(cell.session.session_id, cell.cell_id):
            cell.session.cells.pop(cell.cell_id, None)


async def serve_connection(
    stream: trio.abc.Stream,
    runtime: CellRuntime,
    *,
    stderr: TextIO | None = None,
    bulk: BulkPairing | None = None,
) -> int:
    """Serve one code-mode connection on ``stream``; return the reference host's exit status.

    ``bulk`` (WebSocket only) offers ``dual-websocket-v1`` with its token; when the client
    takes it, tool calls and their answers travel on the paired socket.

    0 after a clean EOF (at once, even with cells running), after a refused handshake, when
    the client stops reading, or when a cell's burst of delegate requests overflows (silently,
    as the reference host does; see :data:`CELL_BURST_LIMIT`); 1 after a client protocol
    violation, whose report (the reference host's ``Error: ...`` text) goes to ``stderr``
    once the answers to earlier messages are sent.
    """
    log = _Log(sys.stderr if stderr is None else stderr)
    status = 0
    async with trio.open_nursery() as nursery:
        server = _Server(stream, runtime, nursery, log, bulk)

        async def run_writer() -> None:
            # A client that stops reading ends the connection, as on the reference host.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await server.writer()
            nursery.cancel_scope.cancel()

        nursery.start_soon(run_writer)
        nursery.start_soon(_cancel_when, server.overflowed, nursery.cancel_scope)
        try:
            await server.reader()
            if server.protocol.rejected:
                await server.drain()  # the refusal goes out, then the host exits 0
        except FatalClientError as exc:
            # Frames answering earlier messages still go out, as on the reference host.
            with trio.CancelScope(shield=True):
                await server.drain()
            print(exc.stderr_text(), end="", file=log.stream, flush=True)
            status = 1
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        # Running cells die with the connection: nothing more is sent for them.
        nursery.cancel_scope.cancel()
    return status


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
