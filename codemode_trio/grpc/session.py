"""Sessions and started cells over the host's gRPC API, with the stdio Session's public API.

A session is three kinds of HTTP/2 streams: the ``OpenSession`` lease stream (session events:
tool-call cancellations, notifications, closed cells), one ``SubscribeToToolCalls`` stream
(the cells' tool calls), and one stream per call (``Execute``, ``Wait``, ``Terminate``,
``CompleteToolCall``...). One task per session reads the first two, and every delegate call
runs in the delegate runner the stdio transport uses too
(:mod:`~codemode_trio.grpc.session_streams`): a cancellation, a closed cell or the end of the
session *revokes* the call, so no result is ever sent for it.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterable
from typing import Generic, TypeVar

import trio
from google.protobuf.message import Message

from .. import tracing
from ..client.cellscope import CellScope, check_max_tool_calls
from ..client.delegates import Delegate
from ..client.session import DEFAULT_WAIT_YIELD_TIME_MS, DEFAULT_YIELD_TIME_MS, observe_to_the_end
from ..client.session_surface import SessionSurface
from ..errors import ConnectionFailed, HostError, SessionClosed, UsageError
from ..protocol.checks import check_opt_u64
from ..protocol.content import RuntimeResponse, ToolDefinition, WaitOutcome
from ..protocol.ids import RecentIds
from . import codemode_pb2 as pb
from .calls import GrpcStatusError, ServerStream, traceparent_metadata
from .convert import outcome_to_response, tool_definitions_to_pb, wait_response_to_outcome
from .framing import StatusCode
from .session_streams import REMEMBERED_IDS, SessionDelegates, SessionHost, SessionStreams

__all__ = ["GrpcSession", "GrpcStartedCell"]

logger = logging.getLogger("codemode_trio.grpc")

T = TypeVar("T")


class Reply(Generic[T]):
    """One value or one exception, delivered once; later deliveries are ignored."""

    __slots__ = ("_error", "_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        """True once a value or an error was delivered."""
        return self._event.is_set()

    def set(self, value: T) -> None:
        """Deliver ``value`` (ignored if already done)."""
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        """Deliver ``error`` (ignored if already done)."""
        if not self._event.is_set():
            self._error = error
            self._event.set()

    def result(self) -> T:
        """Return the value or raise the error; only when :attr:`done`."""
        assert self._event.is_set()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set() stored a T

    async def wait(self) -> T:
        """Wait for the delivery, then return the value or raise the error."""
        await self._event.wait()
        return self.result()


class GrpcStartedCell:
    """A cell the host has started (``ExecutionStarted`` arrived); see :class:`StartedCell`."""

    __slots__ = ("_initial", "_session", "_yield_time_ms", "cell_id", "execution_id", "session_id")

    def __init__(self, session: GrpcSession, execution_id: str, yield_time_ms: int | None) -> None:
        self._session = session
        self.session_id = session.session_id
        self.execution_id = execution_id
        self.cell_id = ""
        self._yield_time_ms = yield_time_ms
        self._initial: Reply[RuntimeResponse] = Reply()

    def __repr__(self) -> str:
        return f"<GrpcStartedCell {self.cell_id!r} of session {self.session_id!r}>"

    async def initial_response(self) -> RuntimeResponse:
        """Wait for the cell's first observation (``yielded``, ``result`` or ``terminated``).

        Kept once it arrived, so awaiting again returns the same value. A cell still running
        when its session was closed here reads ``terminated`` (the host sends nothing for it);
        one whose execution the host ended otherwise raises :class:`~codemode_trio.HostError`.
        A dead connection raises :class:`~codemode_trio.ConnectionFailed`.
        """
        if self._initial.done:
            return self._initial.result()
        conn = self._session._connection
        yield_ms = DEFAULT_YIELD_TIME_MS if self._yield_time_ms is None else self._yield_time_ms
        with conn.host_deadline(conn.config.wait_deadline(yield_ms), "initial"):
            return await self._initial.wait()


class GrpcSession(SessionStreams, SessionSurface):
    """An open code-mode session on a :class:`~codemode_trio.grpc.GrpcConnection`.

    The same API as :class:`~codemode_trio.Session`. ``session_id`` is the host's UUID: the
    session is a lease that another connection knowing the id may attach to.
    """

    def __init__(
        self, connection: SessionHost, delegate: Delegate, *, session_id: str = ""
    ) -> None:
        super().__init__(delegate, trio.Event())
        self._connection = connection
        self.session_id = session_id
        self._closed = False
        self._close_reply: Reply[None] | None = None
        self._scope = trio.CancelScope()
        # Live cells, and the ids of closed ones (cell_closed may overtake ExecutionStarted).
        self._cells: set[str] = set()
        self._closed_cells: RecentIds[str] = RecentIds(REMEMBERED_IDS)
        # execution_id -> the scope (caller's context, budget, trace) its execute took, and
        # cell_id -> its execution_id, until the cell closes.
        self._scopes: dict[str, CellScope] = {}
        self._cell_executions: dict[str, str] = {}
        self._delegates = SessionDelegates(delegate, connection, session_id)
        # Tool-call cancellations that overtook their calls (another stream): dropped on arrival.
        self._early_cancels: RecentIds[str] = RecentIds(REMEMBERED_IDS)
        # cell_id -> the pending observation: ("execution", id) or ("wait", id).
        self._observations: dict[str, tuple[str, str]] = {}
        # cell_id -> set once a cancelled wait on it was retired by CancelWait.
        self._retiring: dict[str, trio.Event] = {}
        self._call_ids = itertools.count(1)
        # True when this session holds the lease stream (it opened the session).
        self._owner = False
        # The session's own streams open now (lease, subscription): not requests awaiting replies.
        self._standing_streams = 0
        self.heartbeats = 0

    def __repr__(self) -> str:
        return f"<GrpcSession {self.session_id!r}>"

    @property
    def live_cells(self) -> int:
        """Cells started and not yet closed."""
        return len(self._cells)

    @property
    def standing_streams(self) -> int:
        """The session's long-lived streams open now (its lease and its subscription)."""
        return self._standing_streams

    @property
    def active_delegates(self) -> int:
        """Delegate calls running now: tool calls, and notifications running or queued."""
        return self._delegates.active

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("code mode session is shutting down")
        self._connection.check_alive()

    async def execute(
        self,
        source: str,
        *,
        tools: Iterable[ToolDefinition] | None = None,
        tool_call_id: str | None = None,
        yield_time_ms: int | None = None,
        max_output_tokens: int | None = None,
        catalog_revision: int | None = None,
        max_tool_calls: int | None = None,
    ) -> GrpcStartedCell:
        """Start ``source`` as a new cell; return once the host assigned its id.

        Tool calls may reach the delegate before this returns. Cancelling this call
        terminates the cell if the host starts it anyway. ``max_output_tokens`` is honoured
        only in a session opened with ``output_truncation="server"``. ``max_tool_calls`` and
        the context delegate calls run in are :meth:`Session.execute`'s.
        """
        self._check_open()
        check_opt_u64(yield_time_ms, "yield_time_ms")
        budget = check_max_tool_calls(max_tool_calls)
        if catalog_revision is not None:
            raise UsageError("catalog_revision is not part of the host's gRPC API")
        if max_output_tokens is not None and (
            type(max_output_tokens) is not int or not 0 <= max_output_tokens < 2**31
        ):
            raise UsageError(
                "failed to encode code-mode execute request: max_output_tokens does not fit i32"
            )
        tool_tuple = self.default_tools() if tools is None else tuple(tools)
        execution_id = str(uuid.uuid4())
        if tool_call_id is None:
            tool_call_id = f"{self.session_id}-call-{next(self._call_ids)}"
        request = pb.ExecuteRequest(
            session_id=self.session_id,
            execution_id=execution_id,
            tool_call_id=tool_call_id,
            source=source,
            enabled_tools=tool_definitions_to_pb(tool_tuple),
            yield_time_ms=yield_time_ms,
            max_output_tokens=max_output_tokens,
        )
        conn = self._connection
        # Already cancelled: send nothing (as on stdio) rather than start and then terminate.
        await trio.lowlevel.checkpoint_if_cancelled()
        cell = GrpcStartedCell(self, execution_id, yield_time_ms)
        started: Reply[str] = Reply()
        abandoned = trio.Event()
        # Registered before the request: the cell's tool calls may overtake its start.
        scope = CellScope(budget, tracing.start_cell(self.session_id))
        self._scopes[execution_id] = scope
        conn.nursery.start_soon(self._run_execute, request, cell, started, abandoned)
        try:
            with conn.host_deadline(conn.config.transport_timeout, "execute"):
                cell.cell_id = await started.wait()
        except BaseException:
            # The execution task terminates the cell if the host starts it after all.
            abandoned.set()
            raise
        return cell

    async def _run_execute(
        self,
        request: pb.ExecuteRequest,
        cell: GrpcStartedCell,
        started: Reply[str],
        abandoned: trio.Event,
    ) -> None:
        # Reads one Execute stream to its end; errors go to the caller, never to the nursery.
        channel = self._connection.channel
        scope = self._scopes.get(request.execution_id)
        trace = None if scope is None else scope.trace
        metadata = traceparent_metadata(None if trace is None else trace.traceparent())
        try:
            async with channel.server_stream(
                "Execute", request, pb.ExecuteEvent, metadata=metadata
            ) as call:
                event = await call.receive()
                if event is None or event.WhichOneof("event") != "started":
                    raise self._connection.violation(
                        "code-mode host returned an invalid execute response"
                    )
                cell_id = event.started.cell_id
                cell.cell_id = cell_id
                self._on_started(cell_id, request.execution_id, scope)
                self._observations[cell_id] = ("execution", request.execution_id)
                started.set(cell_id)
                if abandoned.is_set():
                    self._terminate_nowait(cell_id)
                await self._read_outcome(call, cell)
        except Exception as exc:
            started.fail(exc)
            cell._initial.fail(exc)
        finally:
            if not started.done or not cell._initial.done:
                error = ConnectionFailed(self._connection.failure or "code-mode connection closed")
                started.fail(error)
                cell._initial.fail(error)
            if self._observations.get(cell.cell_id) == ("execution", request.execution_id):
                del self._observations[cell.cell_id]
            if self._cell_executions.get(cell.cell_id) != request.execution_id:
                self._drop_scope(request.execution_id)  # never started: nobody will ask
            else:
                self._settle(cell.cell_id)

    def _on_started(self, cell_id: str, execution_id: str, scope: CellScope | None) -> None:
        # The lease stream and the Execute stream are read by different tasks: the cell's
        # cell_closed may be read before its start (a quick cell), and the session may have
        # ended before it. Either way the cell is over, and its hook runs here, once.
        if cell_id in self._closed_cells or self._cleaned_up.is_set():
            self._closed_cells.add(cell_id)
            self._cell_closed_hook(cell_id)
            return
        self._cells.add(cell_id)
        self._cell_executions[cell_id] = execution_id
        if scope is not None and scope.trace is not None:
            scope.trace.started(cell_id)

    async def _read_outcome(
        self, call: ServerStream[pb.ExecuteEvent], cell: GrpcStartedCell
    ) -> None:
        event = await call.receive()
        if event is None:
            # The host ends the execution without an outcome when the session closes; the
            # stdio host answers such a cell with `terminated`, and so do we.
            if self._closed:
                cell._initial.set(RuntimeResponse("terminated", cell.cell_id))
            else:
                cell._initial.fail(HostError("exec runtime ended unexpectedly"))
            return
        if event.WhichOneof("event") != "outcome":
            raise self._connection.violation("code-mode host returned an invalid execute response")
        response = outcome_to_response(event.outcome)
        cell._initial.set(response)
        self._observed(cell.cell_id, response)
        if await call.receive() is not None:
            raise self._connection.violation(
                "code-mode host sent more than one outcome for an execution"
            )

    async def wait(
        self,
        cell_id: str,
        *,
        yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_output_tokens: int | None = None,
    ) -> WaitOutcome:
        """Observe a cell for up to ``yield_time_ms``; see :meth:`Session.wait`.

        Cancelling a wait retires it on the host (``CancelWait``); the next wait on the same
        cell is held back until that is done, so it is never refused as a second observer.
        """
        self._check_open()
        check_opt_u64(yield_time_ms, "yield_time_ms")
        if max_output_tokens is not None:
            raise UsageError("max_output_tokens on wait is not part of the host's gRPC API")
        conn = self._connection
        limit = conn.config.wait_deadline(yield_time_ms)
        with conn.host_deadline(limit, "wait"):
            retiring = self._retiring.get(cell_id)
            if retiring is not None:
                await retiring.wait()
            wait_id = str(uuid.uuid4())
            request = pb.WaitRequest(
                session_id=self.session_id,
                cell_id=cell_id,
                wait_id=wait_id,
                yield_time_ms=yield_time_ms,
            )
            self._observations[cell_id] = ("wait", wait_id)
            answered = received = False
            try:
                response = await conn.channel.unary(
                    "Wait", request, pb.WaitResponse, grpc_timeout=limit
                )
                answered = received = True
            except GrpcStatusError:
                answered = True  # the host refused it: nothing to retire
                raise
            finally:
                if self._observations.get(cell_id) == ("wait", wait_id):
                    del self._observations[cell_id]
                if not answered and conn.alive and not self._closed:
                    self._retire_wait(cell_id, wait_id)
                if not received:
                    self._settle(cell_id)
        try:
            outcome = wait_response_to_outcome(response)
            self._observed(cell_id, outcome.response)
        finally:
            self._settle(cell_id)
        return outcome

    def _observed(self, cell_id: str, response: RuntimeResponse) -> None:
        # Hands the observation of a traced cell to its trace (a final one ends its span).
        execution_id = self._cell_executions.get(cell_id)
        if execution_id is not None:
            scope = self._scopes.get(execution_id)
            if scope is not None and scope.trace is not None:
                scope.trace.observed(response)

    def _settle(self, cell_id: str) -> None:
        # A closed cell's scope goes once no observation of it is pending: the lease stream's
        # cell_closed may overtake the outcome on the Execute stream, which ends the trace.
        if cell_id in self._closed_cells and cell_id not in self._observations:
            execution_id = self._cell_executions.pop(cell_id, None)
            if execution_id is not None:
                self._drop_scope(execution_id)

    def _drop_scope(self, execution_id: str) -> None:
        scope = self._scopes.pop(execution_id, None)
        if scope is not None and scope.trace is not None:
            scope.trace.closed()

    def _retire_wait(self, cell_id: str, wait_id: str) -> None:
        retired = trio.Event()
        self._retiring[cell_id] = retired
        request = pb.CancelWaitRequest(session_id=self.session_id, wait_id=wait_id)

        async def cancel_wait() -> None:
            try:
                await self._unary_quietly("CancelWait", request, pb.CancelWaitResponse)
            finally:
                retired.set()
                if self._retiring.get(cell_id) is retired:
                    del self._retiring[cell_id]

        self._connection.nursery.start_soon(cancel_wait)

    async def terminate(self, cell_id: str, *, max_output_tokens: int | None = None) -> WaitOutcome:
        """Terminate a cell; returns the output not yet delivered (``live`` False if unknown).

        Not cancellable: if the caller is cancelled the terminate still completes.
        """
        self._check_open()
        if max_output_tokens is not None:
            raise UsageError("max_output_tokens on terminate is not part of the host's gRPC API")
        conn = self._connection
        request = pb.TerminateRequest(session_id=self.session_id, cell_id=cell_id)
        limit = conn.config.transport_timeout
        # Shielded, with the terminate deadline as its bound.
        with trio.CancelScope(shield=True), conn.host_deadline(limit, "terminate"):
            response = await conn.channel.unary(
                "Terminate", request, pb.WaitResponse, grpc_timeout=limit
            )
        return wait_response_to_outcome(response)

    def _terminate_nowait(self, cell_id: str) -> None:
        request = pb.TerminateRequest(session_id=self.session_id, cell_id=cell_id)
        self._connection.nursery.start_soon(
            self._unary_quietly, "Terminate", request, pb.WaitResponse
        )

    async def run(
        self,
        source: str,
        *,
        tools: Iterable[ToolDefinition] | None = None,
        yield_time_ms: int | None = None,
        wait_yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_tool_calls: int | None = None,
    ) -> RuntimeResponse:
        """Execute ``source`` and wait through every yield; return the final response.

        Output of earlier yields is folded into the returned ``content_items``. If the caller
        is cancelled, the cell is terminated. ``max_tool_calls`` is :meth:`execute`'s.
        """
        cell = await self.execute(
            source, tools=tools, yield_time_ms=yield_time_ms, max_tool_calls=max_tool_calls
        )

        def abandon() -> None:
            if self._connection.alive and not self._closed:
                self._terminate_nowait(cell.cell_id)

        return await observe_to_the_end(cell, self.wait, wait_yield_time_ms, abandon)

    def request_yield(self, cell_id: str) -> None:
        """Ask the host to answer the cell's pending observation now (``YieldObservation``).

        The pending initial response or wait returns at once as ``yielded``; the script keeps
        running. Does nothing if no observation of the cell is in flight.
        """
        self._check_open()
        observation = self._observations.get(cell_id)
        if observation is None:
            return
        kind, observation_id = observation
        request = pb.YieldObservationRequest(session_id=self.session_id)
        if kind == "execution":
            request.execution_id = observation_id
        else:
            request.wait_id = observation_id
        self._connection.nursery.start_soon(
            self._unary_quietly, "YieldObservation", request, pb.YieldObservationResponse
        )

    async def aclose(self) -> None:
        """Close the session (``CloseSession``); idempotent, carried out even if cancelled.

        The host terminates its cells; their delegate calls are revoked without waiting.
        Concurrent callers share one close and its result. On a dead connection it only
        closes the session locally.
        """
        conn = self._connection
        limit = conn.config.transport_timeout
        reply = self._close_reply
        if reply is None:
            self._closed = True
            reply = self._close_reply = Reply()
            try:
                if conn.alive and not self._cleaned_up.is_set():
                    await self._close_on_host(limit)
            except ConnectionFailed:
                pass  # nothing left to close on a dead connection
            except BaseException as exc:
                reply.fail(exc)
                raise
            finally:
                self._scope.cancel()
            reply.set(None)
        # Shielded and bounded: cell_closed must have run for every cell when this returns.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(limit):
                await self._cleaned_up.wait()
            await reply.wait()

    async def _close_on_host(self, limit: float) -> None:
        conn = self._connection
        request = pb.CloseSessionRequest(session_id=self.session_id)
        with trio.CancelScope(shield=True), conn.host_deadline(limit, "shutdown"):
            try:
                await conn.channel.unary("CloseSession", request, pb.CloseSessionResponse)
            except GrpcStatusError as exc:
                # Already closed by the host or by another holder of the lease.
                if exc.code != StatusCode.NOT_FOUND:
                    raise
            # Closed: nothing the delegates still do can matter (the host may even hold the
            # lease stream open until pending notifications are acknowledged).
            self._delegates.revoke_all()
            if not self._owner:
                return  # attached: no lease stream of ours will end by itself
            # The lease stream ends after the close, delivering cell_closed on its way.
            with trio.move_on_after(limit):
                await self._cleaned_up.wait()

    def _close_cell(self, cell_id: str) -> None:
        self._closed_cells.add(cell_id)
        self._settle(cell_id)
        self._delegates.close_cell(cell_id)
        if cell_id in self._cells:
            self._cells.discard(cell_id)
            self._cell_closed_hook(cell_id)

    def _cell_closed_hook(self, cell_id: str) -> None:
        try:
            self.delegate.cell_closed(cell_id)
        except Exception:
            logger.exception("cell_closed(%r) of the delegate failed", cell_id)

    def _clean_up(self) -> None:
        self._closed = True
        self._delegates.revoke_all()
        self._cell_executions.clear()
        for execution_id in list(self._scopes):
            self._drop_scope(execution_id)
        for cell_id in sorted(self._cells):
            self._closed_cells.add(cell_id)
            self._cell_closed_hook(cell_id)
        self._cells.clear()
        self._cleaned_up.set()
        self._connection.forget_session(self)

    async def _unary_quietly(
        self, method: str, request: Message, response_type: type[Message]
    ) -> None:
        # A background call whose failure only matters to the log: the cell or session it
        # names may be gone by now (NOT_FOUND), or the connection may be failing.
        conn = self._connection
        try:
            with conn.host_deadline(conn.config.transport_timeout, method):
                await self._delegates.unary_logged(method, request, response_type)
        except ConnectionFailed:
            pass
