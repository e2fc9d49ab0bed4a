"""A gRPC session's own streams and its delegate calls, under :mod:`~codemode_trio.grpc.session`.

The ``OpenSession`` lease stream carries the session's events (tool-call cancellations,
notifications, closed cells); the ``SubscribeToToolCalls`` stream carries the cells' tool calls.
One task per session reads both, and hands each call to the session's delegates as it arrives.

Tool calls are answered with ``CompleteToolCall``; notifications are acknowledged with
``AcknowledgeNotification`` once the delegate returned (as the stdio protocol answers them).
Each runs in a task of the :class:`~codemode_trio.client.delegate_runner.DelegateRunner`, in the
connection's nursery rather than the session's, so that the end of the session revokes its
calls without waiting for them. The answer is awaited in the call's task under its own scope,
whose deadline becomes the transport timeout once nothing can revoke the call any more: a
deadline scope of its own is a measurable share of the cost of a tool call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import trio
from google.protobuf.message import Message

from .. import tracing
from ..client.cellscope import BudgetSpent, CellScope
from ..client.config import ConnectionConfig
from ..client.delegate_runner import DelegateRunner, DelegateTask
from ..client.delegates import Delegate, describe_delegate_error
from ..errors import CodeModeError, ConnectionFailed, HostProtocolViolation
from ..protocol.content import ToolCall
from ..protocol.ids import RecentIds
from . import codemode_pb2 as pb
from .calls import GrpcChannel, GrpcStatusError, ServerStream, traceparent_metadata
from .convert import encode_json, notification_from_pb, tool_call_from_pb

__all__ = ["REMEMBERED_IDS", "SessionDelegates", "SessionHost", "SessionStreams"]

logger = logging.getLogger("codemode_trio.grpc")

# How many ids of early cancellations and closed cells are remembered (a bound on memory for a
# long session; far more than can be in flight at once).
REMEMBERED_IDS = 4096
_ACK = "AcknowledgeNotification"


class SessionHost(Protocol):
    """What a session needs from its connection (a :class:`~codemode_trio.grpc.GrpcConnection`)."""

    channel: GrpcChannel
    config: ConnectionConfig
    nursery: trio.Nursery

    @property
    def alive(self) -> bool:
        """Whether the connection is up."""

    @property
    def failure(self) -> str | None:
        """The connection's first failure, or ``None``."""

    def check_alive(self) -> None:
        """Raise ``ConnectionFailed`` if the connection is dead."""

    def timed_out(self, operation: str) -> ConnectionFailed:
        """Fail the connection for a host that did not answer in time; return the error."""

    def forget_session(self, session: Any) -> None:
        """The session (a ``GrpcSession``) closed: the connection stops tracking it."""

    def delegate_raised(self, exc: BaseException) -> None:
        """A delegate raised a ``BaseException``: fail the connection; its opener raises it."""

    def violation(self, text: str) -> HostProtocolViolation:
        """Fail the connection for a host that broke the API; return the error to raise."""

    def host_deadline(self, seconds: float, operation: str) -> AbstractContextManager[None]:
        """Bound a wait on the host; expiry fails the whole connection."""


class SessionDelegates:
    """The running delegate calls of one gRPC session, and how each is answered."""

    __slots__ = ("_calls", "_channel", "_notes", "_runner", "_session_id", "_timeout", "delegate")

    def __init__(self, delegate: Delegate, connection: SessionHost, session_id: str) -> None:
        self.delegate = delegate
        self._channel = connection.channel
        self._timeout = connection.config.transport_timeout
        self._session_id = session_id
        # invocation_id -> its tool call's task; notification_id -> its notification's task.
        self._calls: dict[str, DelegateTask] = {}
        self._notes: dict[str, DelegateTask] = {}

        def expired(task: DelegateTask) -> None:
            # The host did not answer in time (it fails the connection); nobody to raise to.
            connection.timed_out("CompleteToolCall" if type(task.request) is ToolCall else _ACK)

        self._runner = DelegateRunner(
            self._answer, connection.delegate_raised, on_timeout=expired, nursery=connection.nursery
        )

    @property
    def active(self) -> int:
        """Delegate calls running now (or, for notifications, waiting for their turn)."""
        return len(self._calls) + len(self._notes)

    def open(self, session_id: str) -> None:
        """The host named the session: its answers carry this id."""
        self._session_id = session_id

    def start_tool_call(self, call: pb.ToolCall, cell: CellScope | None) -> None:
        """Start a tool call from the subscription (``cell`` is its execute's scope, if ours)."""
        delegate = self.delegate
        context = None
        if cell is not None:
            context = cell.context
            # Counted in arrival order, here; a call over the budget is refused in its task.
            refusal = cell.admit(call.tool_name.name)
            if refusal is not None:
                delegate = refusal
            if cell.trace is not None:
                delegate = cell.trace.wrap(delegate)
        try:
            request = tool_call_from_pb(call)
        except HostProtocolViolation as exc:
            # Input that is not JSON: the call is answered with that error, as a failed task.
            request = ToolCall(call.cell_id, call.runtime_tool_call_id, call.tool_name.name)
            delegate = BudgetSpent(describe_delegate_error(exc))
        task = DelegateTask(call, request, delegate)
        self._calls[call.invocation_id] = task
        self._runner.start(task, context, f"delegate tools.{request.name}")

    def cancel_tool_call(self, invocation_id: str) -> bool:
        """Revoke a tool call; False if it has not arrived (yet)."""
        task = self._calls.pop(invocation_id, None)
        if task is None:
            return False
        self._runner.revoke(task)
        return True

    def start_notification(self, note: pb.Notification, cell: CellScope | None) -> None:
        """Start a notification from the lease stream, after the cell's earlier ones."""
        delegate = self.delegate
        context = None
        if cell is not None:
            context = cell.context
            if cell.trace is not None:
                delegate = cell.trace.wrap(delegate)
        task = DelegateTask(note, notification_from_pb(note), delegate)
        self._notes[note.notification_id] = task
        self._runner.start(task, context, "delegate notify", note.cell_id)

    def cancel_notification(self, notification_id: str) -> None:
        """Revoke a notification (running or waiting for its turn)."""
        task = self._notes.pop(notification_id, None)
        if task is not None:
            self._runner.revoke(task)

    def close_cell(self, cell_id: str) -> None:
        """Revoke the tool calls of a closed cell: nobody waits for their answers."""
        for invocation_id, task in list(self._calls.items()):
            if task.call.cell_id == cell_id:
                del self._calls[invocation_id]
                self._runner.revoke(task)

    def revoke_all(self) -> None:
        """Revoke every call (the session ended)."""
        for table in (self._calls, self._notes):
            for task in table.values():
                self._runner.revoke(task)
            table.clear()

    def _answer(
        self, task: DelegateTask, ok: bool, value: Any, message: str
    ) -> Awaitable[None] | None:
        request: Message
        response: type[Message]
        if type(task.request) is ToolCall:
            call: pb.ToolCall = task.call
            self._calls.pop(call.invocation_id, None)
            complete = pb.CompleteToolCallRequest(
                session_id=self._session_id, invocation_id=call.invocation_id
            )
            if ok:
                try:
                    complete.succeeded.output_json = encode_json(value, "tool result")
                except Exception as exc:
                    complete.failed.message = describe_delegate_error(exc)
            else:
                complete.failed.message = message
            method, request, response = "CompleteToolCall", complete, pb.CompleteToolCallResponse
        else:
            note: pb.Notification = task.call
            self._notes.pop(note.notification_id, None)
            # Acknowledged after notify returned, as the stdio protocol answers it.
            method, response = _ACK, pb.AcknowledgeNotificationResponse
            request = pb.AcknowledgeNotificationRequest(
                session_id=self._session_id, notification_id=note.notification_id
            )
        # Nothing revokes the call any more: its own scope bounds the wait for the host.
        task.scope.deadline = trio.current_time() + self._timeout
        return self.unary_logged(method, request, response)

    async def unary_logged(
        self, method: str, request: Message, response_type: type[Message]
    ) -> None:
        """The call, with its failures logged (a status) or dropped (a dead connection)."""
        try:
            await self._channel.unary(method, request, response_type)
        except GrpcStatusError as exc:
            logger.debug("%s in session %s: %s", method, self._session_id, exc)
        except ConnectionFailed:
            pass


class SessionStreams:
    """The stream-reading side of :class:`~codemode_trio.grpc.GrpcSession` (its base class)."""

    _connection: SessionHost
    _scope: trio.CancelScope
    _owner: bool
    _standing_streams: int
    _delegates: SessionDelegates
    _early_cancels: RecentIds[str]
    _closed_cells: RecentIds[str]
    _scopes: dict[str, CellScope]
    session_id: str
    heartbeats: int

    if TYPE_CHECKING:  # the session's own: what ends a cell, and the session

        def _close_cell(self, cell_id: str) -> None: ...
        def _clean_up(self) -> None: ...

    async def run_streams(
        self,
        open_request: pb.OpenSessionRequest | None,
        heartbeat_interval_s: int | None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open (or attach to) the session, subscribe, then read both streams until the end.

        Run by the connection with ``nursery.start``: errors before the session is usable go
        to the opener; later ones end the session (its cells close, its calls are revoked).
        """
        conn = self._connection
        channel = conn.channel
        started = False
        with self._scope:
            try:
                async with contextlib.AsyncExitStack() as stack:
                    events: ServerStream[pb.SessionEvent] | None = None
                    if open_request is not None:
                        self._owner = True
                        # Started by the opener (nursery.start copies its context): its
                        # current span, if tracing is on, is the parent of the host's.
                        metadata = traceparent_metadata(tracing.current_traceparent())
                        events = await stack.enter_async_context(
                            channel.server_stream(
                                "OpenSession", open_request, pb.SessionEvent, metadata=metadata
                            )
                        )
                        self._stand(stack)
                        self.session_id = await self._read_opened(events)
                        self._delegates.open(self.session_id)
                    subscribe = pb.SubscribeToToolCallsRequest(session_id=self.session_id)
                    if heartbeat_interval_s is not None:
                        subscribe.heartbeat_interval_s = heartbeat_interval_s
                    calls = await stack.enter_async_context(
                        channel.server_stream("SubscribeToToolCalls", subscribe, pb.ToolCall)
                    )
                    self._stand(stack)
                    with conn.host_deadline(conn.config.transport_timeout, "subscribe"):
                        # The headers mean the subscription is registered: only then may
                        # cells run, or their tool calls would find no subscriber.
                        await calls.headers()
                    task_status.started()
                    started = True
                    await self._pump(events, calls)
            except CodeModeError as exc:
                if not started:
                    raise
                self._log_end("session", exc)
            finally:
                self._clean_up()

    def _stand(self, stack: contextlib.AsyncExitStack) -> None:
        # Counts a stream just opened on ``stack`` until the stack closes it.
        self._standing_streams += 1

        def sit() -> None:
            self._standing_streams -= 1

        stack.callback(sit)

    async def _read_opened(self, events: ServerStream[pb.SessionEvent]) -> str:
        conn = self._connection
        with conn.host_deadline(conn.config.transport_timeout, "open-session"):
            first = await events.receive()
        if first is None or first.WhichOneof("event") != "opened":
            raise conn.violation("code-mode host returned an invalid open-session response")
        return first.opened.session_id

    async def _pump(
        self, events: ServerStream[pb.SessionEvent] | None, calls: ServerStream[pb.ToolCall]
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pump_calls, calls, nursery.cancel_scope)
            if events is None:
                await trio.sleep_forever()  # attached: the owner's stream carries the events
            else:
                try:
                    while (event := await events.receive()) is not None:
                        self._on_event(event)
                except CodeModeError as exc:
                    self._log_end("lease stream", exc)
            # The lease ended (closed here, by the host, or by another holder): stop everything.
            nursery.cancel_scope.cancel()

    async def _pump_calls(
        self, calls: ServerStream[pb.ToolCall], session_scope: trio.CancelScope
    ) -> None:
        try:
            # Each tool call is started from the connection's reader as it arrives: no task
            # switch between the host's ToolCall and the delegate's task.
            await calls.consume(self._on_tool_call)
        except CodeModeError as exc:
            self._log_end("tool-call subscription", exc)
            if not isinstance(exc, GrpcStatusError):
                session_scope.cancel()  # the connection is gone: so is the session

    def _log_end(self, what: str, exc: CodeModeError) -> None:
        # A dead connection is reported to every caller already; anything else is news.
        if not isinstance(exc, ConnectionFailed):
            logger.warning("%s of session %s ended: %s", what, self.session_id, exc)

    def _on_event(self, event: pb.SessionEvent) -> None:
        which = event.WhichOneof("event")
        if which == "tool_call_cancelled":
            invocation_id = event.tool_call_cancelled.invocation_id
            if not self._delegates.cancel_tool_call(invocation_id):
                # It may overtake its ToolCall (another stream): drop that call on arrival.
                self._early_cancels.add(invocation_id)
        elif which == "notification":
            note = event.notification
            # With its cell's scope, taken on arrival: the cell may close before its turn.
            self._delegates.start_notification(note, self._scopes.get(note.execution_id))
        elif which == "notification_cancelled":
            self._delegates.cancel_notification(event.notification_cancelled.notification_id)
        elif which == "cell_closed":
            self._close_cell(event.cell_closed.cell_id)

    def _on_tool_call(self, call: pb.ToolCall) -> None:
        if call.HasField("heartbeat"):
            self.heartbeats += 1
            return
        invocation_id = call.invocation_id
        if invocation_id in self._early_cancels:
            self._early_cancels.discard(invocation_id)
            return
        if call.cell_id in self._closed_cells:
            return  # delivered after its cell closed: nobody waits for the answer
        # Started from the connection's reader as it arrives: no task switch between the
        # host's ToolCall and the delegate's task.
        self._delegates.start_tool_call(call, self._scopes.get(call.execution_id))
