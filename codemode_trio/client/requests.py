"""What callers ask of the host through the shell, and how they wait for its answers.

Each request is a command applied to the machine by the caller's own task, then a wait on the
reply slot under a deadline (an expired one fails the whole connection); a cancelled caller
abandons the operation from its ``except`` block, with no await needed there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import trio

from ..errors import ConnectionFailed, SessionClosed
from ..protocol.client_events import Operation
from ..protocol.client_protocol import ClientProtocol
from ..protocol.content import CellLimits, RuntimeResponse, ToolDefinition, WaitOutcome
from ..protocol.errors import ConnectionUnusable, SessionUnavailable
from .cellscope import CellScope
from .config import ConnectionConfig
from .deadlines import CellHold, ReplyTimedOut, await_reply
from .delegates import Delegate
from .lifecycle import Lifecycle
from .slots import ReplySlot

__all__ = ["ShellRequests", "StartedReply"]

logger = logging.getLogger("codemode_trio.connection")

T = TypeVar("T")
P = ParamSpec("P")

#: What an execute delivers to its caller: the cell id and the slot of its initial response.
StartedReply = tuple[str, ReplySlot[RuntimeResponse]]


class ShellRequests:
    """The request side of :class:`~codemode_trio.client.shell.ClientShell` (its base class)."""

    proto: ClientProtocol
    config: ConnectionConfig
    lifecycle: Lifecycle
    _slots: dict[Operation, ReplySlot[Any]]
    _delegates: dict[str, Delegate]
    _cleanups: dict[str, trio.Event]
    _pending_scopes: dict[Operation, CellScope]

    if TYPE_CHECKING:  # the shell's own: how commands reach the wire and the connection fails

        def _pump(self) -> None: ...
        def fail(self, reason: str) -> None: ...  # noqa: D102
        def _watch_internal(self, op: Operation) -> None: ...
        def _hold(self, session_id: str, cell_id: str) -> CellHold | None: ...

    def _command(self, command: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Apply a caller's command to the machine, raising the Trio-level error classes."""
        self.check_alive()
        try:
            return command(*args, **kwargs)
        except SessionUnavailable as exc:
            raise SessionClosed(*exc.args) from None
        except ConnectionUnusable:
            raise ConnectionFailed(self.lifecycle.reason()) from None

    def check_alive(self) -> None:
        """Raise :class:`ConnectionFailed` if the connection is dead."""
        if not self.lifecycle.alive:
            raise ConnectionFailed(self.lifecycle.reason())

    def _timed_out(self, reason: str) -> None:
        logger.warning("code-mode host request exceeded its deadline: %s", reason)
        self.fail(reason)

    async def _await_host(
        self,
        slot: ReplySlot[T],
        limit: float,
        timeout_reason: str,
        hold: CellHold | None = None,
        on_cancel: Callable[[], None] | None = None,
    ) -> T:
        """:func:`await_reply`, with an expired deadline failing the whole connection."""
        try:
            return await await_reply(slot, limit, hold, on_cancel)
        except ReplyTimedOut:
            self._timed_out(timeout_reason)
            raise ConnectionFailed(self.lifecycle.reason()) from None

    async def _request(
        self,
        op: Operation,
        *,
        limit: float,
        timeout_reason: str,
        claim: bool = False,
        hold: CellHold | None = None,
    ) -> Any:
        """Await the reply to ``op`` (already applied to the machine) under a deadline.

        A cancelled caller abandons the operation (the machine sends ``operation/cancel`` and
        cleans up what the host admits anyway). With ``claim``, a cancellation that arrives
        together with the reply still wins, so what was delivered is cleaned up, not lost.
        """
        slot: ReplySlot[Any] = ReplySlot()
        self._slots[op] = slot
        self._pump()

        def abandon() -> None:
            self._slots.pop(op, None)
            self.proto.abandon(op)
            self._pump()

        try:
            value = await self._await_host(slot, limit, timeout_reason, hold, abandon)
            if claim:
                await trio.lowlevel.checkpoint_if_cancelled()
        except ConnectionFailed:
            raise  # the deadline passed: the connection failed, nothing to abandon
        except BaseException:
            abandon()  # if the instant cancellation did not already (it is idempotent)
            raise
        if claim:
            self.proto.claim(op)
        return value

    def register_session(self, session_id: str, delegate: Delegate) -> trio.Event:
        """Route the session's delegate calls to ``delegate``; return its cleanup event."""
        self._delegates[session_id] = delegate
        cleanup = trio.Event()
        self._cleanups[session_id] = cleanup
        return cleanup

    async def open_session(
        self,
        delegate: Delegate,
        session_id: str | None,
        limits: CellLimits | None,
        output_truncation: str | None,
    ) -> tuple[str, trio.Event]:
        """Open a session; return its id and the event set once its cells are released."""
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller sends nothing
        op = self._command(
            self.proto.open_session, session_id, limits=limits, output_truncation=output_truncation
        )
        cleanup = self.register_session(op.session_id, delegate)
        try:
            await self._request(
                op,
                limit=self.config.transport_timeout,
                timeout_reason="code-mode host timed out waiting for open-session response",
                claim=True,
            )
        except BaseException:
            if not self.proto.knows_session(op.session_id):
                self._delegates.pop(op.session_id, None)
                self._cleanups.pop(op.session_id, None)
            raise
        return op.session_id, cleanup

    async def execute(
        self,
        session_id: str,
        source: str,
        *,
        tool_call_id: str,
        tools: tuple[ToolDefinition, ...],
        yield_time_ms: int | None,
        max_output_tokens: int | None,
        catalog_revision: int | None,
        scope: CellScope | None = None,
    ) -> StartedReply:
        """Start a cell; return its id and the slot of its initial response.

        ``scope`` (taken in the caller's task) is the context every delegate call of the cell
        runs in, its tool-call budget and its trace.
        """
        op: Operation | None = None
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            op = self._command(
                self.proto.execute,
                session_id,
                source,
                tool_call_id=tool_call_id,
                tools=tools,
                yield_time_ms=yield_time_ms,
                max_output_tokens=max_output_tokens,
                catalog_revision=catalog_revision,
            )
            if scope is not None:
                self._pending_scopes[op] = scope
            started: StartedReply = await self._request(
                op,
                limit=self.config.transport_timeout,
                timeout_reason="code-mode host timed out waiting for execute response",
                claim=True,
            )
        finally:
            # The cell's start takes the scope; if the host never started it, it ends here.
            if scope is not None:
                unclaimed = op is None or self._pending_scopes.pop(op, None) is not None
                if unclaimed and scope.trace is not None:
                    scope.trace.closed()
        return started

    async def initial_response(
        self, session_id: str, cell_id: str, slot: ReplySlot[RuntimeResponse], yield_ms: int
    ) -> RuntimeResponse:
        """Wait for a cell's initial response; the slot keeps it for later awaits."""
        if slot.done:
            return slot.result()
        return await self._await_host(
            slot,
            self.config.wait_deadline(yield_ms),
            "code-mode host timed out waiting for initial response",
            self._hold(session_id, cell_id),
        )

    async def wait(
        self, session_id: str, cell_id: str, yield_time_ms: int, max_output_tokens: int | None
    ) -> WaitOutcome:
        """Observe a cell (``session/wait``)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        op = self._command(
            self.proto.wait,
            session_id,
            cell_id,
            yield_time_ms=yield_time_ms,
            max_output_tokens=max_output_tokens,
        )
        outcome: WaitOutcome = await self._request(
            op,
            limit=self.config.wait_deadline(yield_time_ms),
            timeout_reason="code-mode host timed out waiting for wait response",
            hold=self._hold(session_id, cell_id),
        )
        return outcome

    async def terminate(
        self, session_id: str, cell_id: str, max_output_tokens: int | None
    ) -> WaitOutcome:
        """Terminate a cell (``session/terminate``); not cancellable on the wire."""
        await trio.lowlevel.checkpoint_if_cancelled()
        op = self._command(
            self.proto.terminate, session_id, cell_id, max_output_tokens=max_output_tokens
        )
        outcome: WaitOutcome = await self._request(
            op,
            limit=self.config.transport_timeout,
            timeout_reason="code-mode host timed out waiting for terminate response",
        )
        return outcome

    def terminate_nowait(self, session_id: str, cell_id: str) -> None:
        """Terminate a cell nobody will observe any more (from an ``except`` block)."""
        if not self.lifecycle.alive:
            return
        try:
            op = self.proto.terminate(session_id, cell_id)
        except (SessionUnavailable, ConnectionUnusable):
            return  # the session is closing (its shutdown terminates the cell) or dead
        op.internal = True
        self._watch_internal(op)
        self._pump()

    def begin_shutdown(self, session_id: str) -> ReplySlot[None]:
        """Send ``session/shutdown`` now; return the slot its answer goes to."""
        op = self._command(self.proto.shutdown, session_id)
        slot: ReplySlot[None] = ReplySlot()
        self._slots[op] = slot
        self._pump()
        return slot

    async def await_shutdown(self, slot: ReplySlot[None]) -> None:
        """Wait for a shutdown begun with :meth:`begin_shutdown` (shared by every caller)."""
        await self._await_host(
            slot,
            self.config.transport_timeout,
            "code-mode host timed out waiting for shutdown response",
        )

    def request_yield(self, session_id: str, cell_id: str) -> None:
        """Send ``operation/yield`` for the cell's in-flight observation, if any."""
        self._command(self.proto.request_yield, session_id, cell_id)
        self._pump()
