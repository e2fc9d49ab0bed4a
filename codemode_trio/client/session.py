"""Sessions and started cells: the caller-facing half of the protocol.

A :class:`Session` is an async context manager; leaving it sends ``session/shutdown``, which
terminates the session's cells on the host and does not wait for delegate calls to finish.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

import attrs
import trio

from .. import tracing
from ..errors import SessionClosed
from ..protocol.content import ContentItem, RuntimeResponse, ToolDefinition, WaitOutcome
from .cellscope import CellScope, check_max_tool_calls
from .delegates import Delegate
from .session_surface import SessionSurface
from .shell import ClientShell
from .slots import ReplySlot

__all__ = [
    "DEFAULT_WAIT_YIELD_TIME_MS",
    "DEFAULT_YIELD_TIME_MS",
    "Session",
    "StartedCell",
    "observe_to_the_end",
]

#: The host's default yield deadline, used when ``yield_time_ms`` is ``None``.
DEFAULT_YIELD_TIME_MS = 10_000
DEFAULT_WAIT_YIELD_TIME_MS = 10_000


@attrs.define(eq=False, repr=False, weakref_slot=False)
class StartedCell:
    """A cell the host has started (``execution/started`` arrived).

    It does not wait for the first output: ``await cell.initial_response()`` does. The initial
    response is kept, so awaiting it again (for instance after a cancelled await) returns the
    same value instead of losing it. Created by :meth:`Session.execute`, not by applications.
    """

    _shell: ClientShell
    session_id: str
    cell_id: str
    _initial: ReplySlot[RuntimeResponse]
    _yield_time_ms: int | None

    def __repr__(self) -> str:
        return f"<StartedCell {self.cell_id!r} of session {self.session_id!r}>"

    async def initial_response(self) -> RuntimeResponse:
        """Wait for the cell's first observation (``yielded``, ``result`` or ``terminated``).

        Raises :class:`~codemode_trio.HostError` if the host reported an error instead (the
        cell's output is then lost and the cell closed), or
        :class:`~codemode_trio.ConnectionFailed`. Waiting is bounded by the yield deadline plus
        the transport allowance, not counting time the host spends waiting on this cell's
        delegate calls; past it the host is declared hung and the connection fails.
        """
        yield_ms = DEFAULT_YIELD_TIME_MS if self._yield_time_ms is None else self._yield_time_ms
        return await self._shell.initial_response(
            self.session_id, self.cell_id, self._initial, yield_ms
        )


class Session(SessionSurface):
    """An open code-mode session on a :class:`~codemode_trio.Connection`.

    Cells run JavaScript with ``tools.NAME(...)`` bound to the session's delegate. Use
    :meth:`run` for the common case (execute and wait through every yield), or
    :meth:`execute` / :meth:`wait` / :meth:`terminate` for full control.
    """

    def __init__(
        self, shell: ClientShell, session_id: str, delegate: Delegate, cleaned_up: trio.Event
    ) -> None:
        """Created by :meth:`Connection.open_session`; not by applications."""
        super().__init__(delegate, cleaned_up)
        self._shell = shell
        self.session_id = session_id
        self._closed = False
        self._shutdown: ReplySlot[None] | None = None
        self._call_ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Session {self.session_id!r}>"

    def _check_open(self) -> None:
        if self._closed:
            # The session-layer wording of the reference client (no hyphen, unlike the driver's).
            raise SessionClosed("code mode session is shutting down")

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
    ) -> StartedCell:
        """Start ``source`` (a JavaScript module body) as a new cell.

        ``tools`` are the tool definitions the cell may call; by default the session
        delegate's ``definitions()`` if it has them. ``yield_time_ms`` is the initial yield
        deadline (host default 10 s). Returns as soon as the host assigns the cell id.
        ``max_tool_calls`` caps the cell's tool calls: the ones past it are rejected, the
        cell goes on.

        Every delegate call of the cell runs in a copy of the :mod:`contextvars` context of
        the task that called this.

        Cancelling this call sends ``operation/cancel``; if the host starts the cell anyway it
        is terminated, so no cell is left running unobserved.
        """
        self._check_open()
        budget = check_max_tool_calls(max_tool_calls)
        tool_tuple = self.default_tools() if tools is None else _tool_tuple(tools)
        cell_id, initial = await self._shell.execute(
            self.session_id,
            source,
            tool_call_id=tool_call_id
            if tool_call_id is not None
            else f"{self.session_id}-call-{next(self._call_ids)}",
            tools=tool_tuple,
            yield_time_ms=yield_time_ms,
            max_output_tokens=max_output_tokens,
            catalog_revision=catalog_revision,
            scope=CellScope(budget, tracing.start_cell(self.session_id)),
        )
        return StartedCell(self._shell, self.session_id, cell_id, initial, yield_time_ms)

    async def wait(
        self,
        cell_id: str,
        *,
        yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_output_tokens: int | None = None,
    ) -> WaitOutcome:
        """Observe a cell for up to ``yield_time_ms`` and return what it produced since.

        ``yield_time_ms`` is how long the *host* lets the cell run before it answers (a
        protocol field, not a client timeout). Only call it after the cell's initial response
        has arrived (the host refuses a second observer). Cancelling a wait sends
        ``operation/cancel``; the next wait on the same cell is held back until the host has
        retired the cancelled one.
        """
        self._check_open()
        return await self._shell.wait(self.session_id, cell_id, yield_time_ms, max_output_tokens)

    async def terminate(self, cell_id: str, *, max_output_tokens: int | None = None) -> WaitOutcome:
        """Terminate a cell; returns the output not yet delivered (``live`` False if unknown).

        Not cancellable on the wire: if the caller is cancelled the terminate still happens.
        """
        self._check_open()
        return await self._shell.terminate(self.session_id, cell_id, max_output_tokens)

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

        The returned response is the last observation (``result`` or ``terminated``). Output
        delivered by earlier yields is folded into its ``content_items`` so nothing is lost.
        If the caller is cancelled, the cell is terminated. ``max_tool_calls`` is
        :meth:`execute`'s.
        """
        cell = await self.execute(
            source, tools=tools, yield_time_ms=yield_time_ms, max_tool_calls=max_tool_calls
        )
        return await observe_to_the_end(
            cell,
            self.wait,
            wait_yield_time_ms,
            lambda: self._shell.terminate_nowait(self.session_id, cell.cell_id),
        )

    def request_yield(self, cell_id: str) -> None:
        """Ask the host to answer the cell's pending observation *now* (``operation/yield``).

        The in-flight :meth:`wait` on the cell (or its pending initial response) returns at
        once as ``yielded`` with the output so far; the script keeps running. Needs the
        ``yield-observation`` capability (hosts before 0.160 kill the connection on it). Does
        nothing if no observation of the cell is in flight.
        """
        self._check_open()
        self._shell.request_yield(self.session_id, cell_id)

    async def aclose(self) -> None:
        """Shut the session down (``session/shutdown``); idempotent.

        The host terminates every live cell; their delegate calls are revoked without waiting
        for them. If the caller is cancelled, the shutdown is still carried out. Concurrent
        callers share one shutdown and its result.
        """
        shell = self._shell
        if self._closed:
            slot = self._shutdown
            if slot is None:
                return  # closed while the connection was already dead
        else:
            self._closed = True
            if not shell.lifecycle.alive:
                # A dead binding: its cells are closed as the connection unwinds; return after
                # that, so cell_closed has run for all of them.
                with trio.move_on_after(shell.config.transport_timeout):
                    await self._cleaned_up.wait()
                return
            # Applied at once: the frame is on its way even if we are being cancelled now.
            self._shutdown = slot = shell.begin_shutdown(self.session_id)
        await shell.await_shutdown(slot)


class _Observable(Protocol):
    cell_id: str

    async def initial_response(self) -> RuntimeResponse: ...


async def observe_to_the_end(
    cell: _Observable,
    wait: Callable[..., Awaitable[WaitOutcome]],
    wait_yield_time_ms: int,
    abandon: Callable[[], None],
) -> RuntimeResponse:
    """Wait through a started cell's yields; return its final response with all its output.

    The output of earlier yields is folded into the returned ``content_items``. If the caller
    is cancelled (or anything else goes wrong), ``abandon()`` runs first: nobody else knows the
    cell, so it is stopped rather than left running. Shared by every transport's ``run``.
    """
    items: list[ContentItem] = []
    try:
        response = await cell.initial_response()
        while response.kind == "yielded":
            items.extend(response.content_items)
            response = (await wait(cell.cell_id, yield_time_ms=wait_yield_time_ms)).response
    except BaseException:
        abandon()
        raise
    if items:
        response = attrs.evolve(response, content_items=(*items, *response.content_items))
    return response


def _tool_tuple(tools: Iterable[ToolDefinition]) -> tuple[ToolDefinition, ...]:
    try:
        return tuple(tools)
    except TypeError:
        # Not iterable: the machine names the problem (and refuses it) with the same words.
        return tools  # type: ignore[return-value]
