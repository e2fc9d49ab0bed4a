"""Sessions and started cells: the caller-facing half of the protocol.

A :class:`Session` is an async context manager; leaving it sends ``session/shutdown``, which
terminates the session's cells on the host and does not wait for delegate calls to finish.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import SessionClosed, UsageError
from ..protocol._wire import is_opt_u64
from ..protocol.content import ContentItem, RuntimeResponse, ToolDefinition, WaitOutcome
from ..protocol.handshake import BOUNDED_OUTPUT, TOOL_CATALOG_REVISION, YIELD_OBSERVATION
from .commands import ExecuteCommand, ShutdownCommand, TerminateCommand, WaitCommand, YieldCommand
from .delegates import Delegate
from .slots import ReplySlot

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["DEFAULT_WAIT_YIELD_TIME_MS", "Session", "StartedCell"]


def check_u64(value: int | None, what: str) -> None:
    """Refuse a value the host would reject fatally as a ``u64`` (nothing is sent)."""
    if not is_opt_u64(value):
        raise UsageError(f"{what} must be an integer from 0 to 2**64-1, not {value!r}")


#: The host's default yield deadline, used when ``yield_time_ms`` is ``None``.
DEFAULT_YIELD_TIME_MS = 10_000
DEFAULT_WAIT_YIELD_TIME_MS = 10_000


class StartedCell:
    """A cell the host has started (``execution/started`` arrived).

    It does not wait for the first output: ``await cell.initial_response()`` does. The initial
    response is kept, so awaiting it again (for instance after a cancelled await) returns the
    same value instead of losing it.
    """

    __slots__ = ("_initial", "_session", "_yield_time_ms", "cell_id", "session_id")

    def __init__(self, cell_id: str, initial: ReplySlot[RuntimeResponse], session_id: str) -> None:
        """Created by the driver when ``execution/started`` arrives; not by applications."""
        self.cell_id = cell_id
        self.session_id = session_id
        self._initial = initial
        self._session: Session | None = None
        self._yield_time_ms: int | None = None

    def __repr__(self) -> str:
        return f"<StartedCell {self.cell_id!r} of session {self.session_id!r}>"

    async def initial_response(self) -> RuntimeResponse:
        """Wait for the cell's first observation (``yielded``, ``result`` or ``terminated``).

        Raises :class:`~codemode_trio.HostError` if the host reported an error instead (the
        cell's output is then lost and the cell closed), or
        :class:`~codemode_trio.ConnectionFailed`. Waiting is bounded: past the yield deadline
        plus the transport allowance the host is declared hung and the connection fails.
        """
        if self._initial.done:
            return self._initial.result()
        session = self._session
        if session is None:  # only in driver-level tests: no deadline to apply
            return await self._initial.wait()
        conn = session._connection
        yield_ms = DEFAULT_YIELD_TIME_MS if self._yield_time_ms is None else self._yield_time_ms
        return await conn._await_reply(
            self._initial,
            limit=conn._config.wait_deadline(yield_ms),
            timeout_reason="code-mode host timed out waiting for initial response",
        )


class Session:
    """An open code-mode session on a :class:`~codemode_trio.Connection`.

    Cells run JavaScript with ``tools.NAME(...)`` bound to the session's delegate. Use
    :meth:`run` for the common case (execute and wait through every yield), or
    :meth:`execute` / :meth:`wait` / :meth:`terminate` for full control.
    """

    def __init__(
        self, connection: Connection, session_id: str, delegate: Delegate, cleaned_up: trio.Event
    ) -> None:
        self._connection = connection
        self._cleaned_up = cleaned_up
        self.session_id = session_id
        self.delegate = delegate
        self._closed = False
        self._shutdown: ReplySlot[None] | None = None
        self._call_ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Session {self.session_id!r}>"

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def cleaned_up(self) -> bool:
        """True once every cell of the session was closed locally (shutdown or failure)."""
        return self._cleaned_up.is_set()

    async def wait_cleaned_up(self) -> None:
        """Wait until every cell of the session is closed locally.

        That happens when ``session/closed`` arrives or the connection fails; it never waits
        for delegate calls to finish (they are revoked).
        """
        await self._cleaned_up.wait()

    def _check_open(self) -> None:
        if self._closed:
            # The session-layer wording of the reference client (no hyphen, unlike the driver's).
            raise SessionClosed("code mode session is shutting down")

    def _default_tools(self) -> tuple[ToolDefinition, ...]:
        definitions = getattr(self.delegate, "definitions", None)
        return tuple(definitions()) if callable(definitions) else ()

    async def execute(
        self,
        source: str,
        *,
        tools: Iterable[ToolDefinition] | None = None,
        tool_call_id: str | None = None,
        yield_time_ms: int | None = None,
        max_output_tokens: int | None = None,
        catalog_revision: int | None = None,
    ) -> StartedCell:
        """Start ``source`` (a JavaScript module body) as a new cell.

        ``tools`` are the tool definitions the cell may call; by default the session
        delegate's ``definitions()`` if it has them. ``yield_time_ms`` is the initial yield
        deadline (host default 10 s). Returns as soon as the host assigns the cell id.

        Cancelling this call sends ``operation/cancel``; if the host starts the cell anyway it
        is terminated, so no cell is left running unobserved.
        """
        self._check_open()
        conn = self._connection
        if max_output_tokens is not None and (
            type(max_output_tokens) is not int or not -(2**31) <= max_output_tokens < 2**31
        ):
            raise UsageError(
                "failed to encode code-mode execute request: max_output_tokens does not fit i32"
            )
        check_u64(yield_time_ms, "yield_time_ms")
        check_u64(catalog_revision, "catalog_revision")
        if catalog_revision is not None:
            conn._require_capability(TOOL_CATALOG_REVISION, "catalog_revision")
        tool_tuple = self._default_tools() if tools is None else tuple(tools)
        slot: ReplySlot[StartedCell] = ReplySlot()
        command = ExecuteCommand(
            self.session_id,
            source,
            tool_call_id
            if tool_call_id is not None
            else f"{self.session_id}-call-{next(self._call_ids)}",
            tool_tuple,
            yield_time_ms,
            max_output_tokens,
            catalog_revision,
            slot,
        )
        started = await conn._call(
            command,
            slot,
            cancellable=True,
            limit=conn._config.transport_timeout,
            timeout_reason="code-mode host timed out waiting for execute response",
        )
        conn._claim(slot)
        started._session = self
        started._yield_time_ms = yield_time_ms
        return started

    async def wait(
        self,
        cell_id: str,
        *,
        yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_output_tokens: int | None = None,
    ) -> WaitOutcome:
        """Observe a cell for up to ``yield_time_ms`` and return what it produced since.

        Only call it after the cell's initial response has arrived (the host refuses a
        second observer). Cancelling a wait sends ``operation/cancel``; the next wait on the
        same cell is held back until the host has retired the cancelled one.
        """
        self._check_open()
        conn = self._connection
        check_u64(yield_time_ms, "yield_time_ms")
        check_u64(max_output_tokens, "max_output_tokens")
        if max_output_tokens is not None:
            conn._require_capability(BOUNDED_OUTPUT, "max_output_tokens on wait")
        slot: ReplySlot[WaitOutcome] = ReplySlot()
        command = WaitCommand(self.session_id, cell_id, yield_time_ms, max_output_tokens, slot)
        return await conn._call(
            command,
            slot,
            cancellable=True,
            limit=conn._config.wait_deadline(yield_time_ms),
            timeout_reason="code-mode host timed out waiting for wait response",
        )

    async def terminate(self, cell_id: str, *, max_output_tokens: int | None = None) -> WaitOutcome:
        """Terminate a cell; returns the output not yet delivered (``live`` False if unknown).

        Not cancellable on the wire: if the caller is cancelled the terminate still happens.
        """
        self._check_open()
        conn = self._connection
        check_u64(max_output_tokens, "max_output_tokens")
        if max_output_tokens is not None:
            conn._require_capability(BOUNDED_OUTPUT, "max_output_tokens on terminate")
        slot: ReplySlot[WaitOutcome] = ReplySlot()
        command = TerminateCommand(self.session_id, cell_id, max_output_tokens, slot)
        return await conn._call(
            command,
            slot,
            cancellable=False,
            limit=conn._config.transport_timeout,
            timeout_reason="code-mode host timed out waiting for terminate response",
        )

    async def run(
        self,
        source: str,
        *,
        tools: Iterable[ToolDefinition] | None = None,
        yield_time_ms: int | None = None,
        wait_yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
    ) -> RuntimeResponse:
        """Execute ``source`` and wait through every yield; return the final response.

        The returned response is the last observation (``result`` or ``terminated``). Output
        delivered by earlier yields is folded into its ``content_items`` so nothing is lost.
        If the caller is cancelled, the cell is terminated.
        """
        cell = await self.execute(source, tools=tools, yield_time_ms=yield_time_ms)
        items: list[ContentItem] = []
        try:
            response = await cell.initial_response()
            while response.kind == "yielded":
                items.extend(response.content_items)
                outcome = await self.wait(cell.cell_id, yield_time_ms=wait_yield_time_ms)
                response = outcome.response
        except BaseException:
            # Nobody else knows this cell: stop it rather than leave it running.
            self._connection._terminate_nowait(self.session_id, cell.cell_id)
            raise
        if items:
            response = attrs.evolve(response, content_items=(*items, *response.content_items))
        return response

    def request_yield(self, cell_id: str) -> None:
        """Ask the host to answer the cell's pending observation *now* (``operation/yield``).

        The in-flight :meth:`wait` on the cell (or its pending initial response) returns at
        once as ``yielded`` with the output so far; the script keeps running. Needs the
        ``yield-observation`` capability (hosts before 0.160 kill the connection on it). Does
        nothing if no observation of the cell is in flight.
        """
        self._check_open()
        self._connection._require_capability(YIELD_OBSERVATION, "request_yield")
        self._connection._post(YieldCommand(self.session_id, cell_id))

    async def aclose(self) -> None:
        """Shut the session down (``session/shutdown``); idempotent.

        The host terminates every live cell; their delegate calls are revoked without waiting
        for them. If the caller is cancelled, the shutdown is still carried out. Concurrent
        callers share one shutdown and its result.
        """
        conn = self._connection
        if self._closed:
            slot = self._shutdown
            if slot is None:
                return  # closed while the connection was already dead
        else:
            self._closed = True
            if not conn.alive:
                # A dead binding: its cells are closed as the driver unwinds; return after
                # that, so cell_closed has run for all of them.
                with trio.move_on_after(conn._config.transport_timeout):
                    await self._cleaned_up.wait()
                return
            slot = ReplySlot()
            self._shutdown = slot
            # Posted as a notice: it must be sent even if we are being cancelled right now.
            conn._post(ShutdownCommand(self.session_id, slot))
        await conn._await_reply(
            slot,
            limit=conn._config.transport_timeout,
            timeout_reason="code-mode host timed out waiting for shutdown response",
        )
