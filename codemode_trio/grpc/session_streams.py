"""A gRPC session's own streams: the lease and the tool-call subscription, read to the end.

The ``OpenSession`` lease stream carries the session's events (tool-call cancellations,
notifications, closed cells); the ``SubscribeToToolCalls`` stream carries the cells' tool calls.
One task per session reads both, and hands each call to the session's delegates as it arrives.
"""

from __future__ import annotations

import contextlib
import logging
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

import trio

from .. import tracing
from ..client.cellscope import CellScope
from ..client.config import ConnectionConfig
from ..errors import CodeModeError, ConnectionFailed, HostProtocolViolation
from ..protocol.ids import RecentIds
from . import codemode_pb2 as pb
from .calls import GrpcChannel, GrpcStatusError, ServerStream, traceparent_metadata
from .delegation import SessionDelegates

__all__ = ["REMEMBERED_IDS", "SessionStreams", "StreamHost"]

logger = logging.getLogger("codemode_trio.grpc")

# How many ids of early cancellations and closed cells are remembered (a bound on memory for a
# long session; far more than can be in flight at once).
REMEMBERED_IDS = 4096


class StreamHost(Protocol):
    """What a session's streams need from the connection."""

    channel: GrpcChannel
    config: ConnectionConfig

    def violation(self, text: str) -> HostProtocolViolation:
        """Fail the connection for a host that broke the API; return the error to raise."""

    def host_deadline(self, seconds: float, operation: str) -> AbstractContextManager[None]:
        """Bound a wait on the host; expiry fails the whole connection."""


class SessionStreams:
    """The stream-reading side of :class:`~codemode_trio.grpc.GrpcSession` (its base class)."""

    _connection: StreamHost
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
