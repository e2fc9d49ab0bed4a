"""A gRPC session's delegate calls: tool calls and notifications, run by the shared runner.

Tool calls arrive on the session's ``SubscribeToToolCalls`` stream and are answered with
``CompleteToolCall``; notifications arrive on the lease stream and are acknowledged with
``AcknowledgeNotification`` once the delegate returned (as the stdio protocol answers them).
Each runs in a task of the :class:`~codemode_trio.client.delegate_runner.DelegateRunner`, in the
connection's nursery rather than the session's, so that the end of the session revokes its
calls without waiting for them. The answer is awaited in the call's task under its own scope,
whose deadline becomes the transport timeout once nothing can revoke the call any more: a
deadline scope of its own is a measurable share of the cost of a tool call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from google.protobuf.message import Message

from ..client.cellscope import BudgetSpent, CellScope
from ..client.delegate_runner import DelegateRunner, DelegateTask
from ..client.delegates import Delegate, describe_delegate_error
from ..errors import ConnectionFailed, HostProtocolViolation
from ..protocol.content import ToolCall
from . import codemode_pb2 as pb
from .calls import GrpcChannel, GrpcStatusError
from .convert import encode_json, notification_from_pb, tool_call_from_pb

__all__ = ["SessionDelegates"]

logger = logging.getLogger("codemode_trio.grpc")


class SessionDelegates:
    """The running delegate calls of one gRPC session, and how each is answered."""

    __slots__ = ("_calls", "_channel", "_notes", "_runner", "_session_id", "_timeout", "delegate")

    def __init__(
        self,
        delegate: Delegate,
        channel: GrpcChannel,
        nursery: trio.Nursery,
        *,
        timeout: float,
        on_fatal: Callable[[BaseException], None],
        on_timeout: Callable[[str], object],
    ) -> None:
        self.delegate = delegate
        self._channel = channel
        self._timeout = timeout
        self._session_id = ""
        # invocation_id -> its tool call's task; notification_id -> its notification's task.
        self._calls: dict[str, DelegateTask] = {}
        self._notes: dict[str, DelegateTask] = {}

        def timed_out(task: DelegateTask) -> None:
            # The host did not answer in time (it fails the connection); nobody to raise to.
            on_timeout("CompleteToolCall" if type(task.request) is ToolCall else _ACK)

        self._runner = DelegateRunner(self._answer, on_fatal, on_timeout=timed_out, nursery=nursery)

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


_ACK = "AcknowledgeNotification"
