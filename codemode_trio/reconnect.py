"""``open_reconnecting_session``: one session whose calls survive host failures.

Each *generation* is a connection from ``opener()`` (``cm.open_host_process``, or a lambda over
``cm.open_grpc_connection``) and a session on it. When a generation fails, its failure reaches
callers once; the next call opens generation *n* + 1. Cell ids of generation 1 are the host's;
from generation 2 on they read ``g{n}:{id}``, so an id can never be confused with a cell of a
later host, and using one of an older generation raises :class:`~codemode_trio.SessionClosed`
naming both generations. The delegate sees the same public ids.

Over gRPC a session is a lease the host keeps while the connection that opened it lives; any
connection that knows its id may attach to it. So when only *our* connection dropped and the
host still knows the session, the next call *reattaches*: a new connection, the same session,
the same generation, and the cells (and their ids) carry on. Only when the host no longer knows
the session (0.171.0 ends a lease with the connection that opened it) does a new generation
begin.

Every generation's connection and session live in a task of this object's own nursery, so a
reconnect made by whichever task calls next is still entered and left by one task.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs
import trio

from ._groups import unwrapping_nursery
from .client.cellscope import check_max_tool_calls
from .client.connection import Connection
from .client.delegates import Delegate, NoopDelegate
from .client.session import DEFAULT_WAIT_YIELD_TIME_MS
from .client.session_surface import SessionSurface
from .errors import CodeModeError, ConnectionFailed, SessionClosed, UsageError
from .protocol.content import (
    CellLimits,
    Notification,
    RuntimeResponse,
    ToolCall,
    ToolDefinition,
    WaitOutcome,
)
from .protocol.values import JSON

if TYPE_CHECKING:
    from .client.session import Session, StartedCell
    from .grpc.connection import GrpcConnection
    from .grpc.session import GrpcSession, GrpcStartedCell

__all__ = ["ReconnectingCell", "ReconnectingSession", "open_reconnecting_session"]

logger = logging.getLogger("codemode_trio.reconnect")

#: What ``opener()`` returns: an async context manager of a connection (either transport).
Opener: TypeAlias = Callable[[], AbstractAsyncContextManager["Connection | GrpcConnection"]]

# Bound on waiting for a generation's connection and session to be torn down.
_TEARDOWN_S = 70.0


def public_cell_id(generation: int, cell_id: str) -> str:
    """The id callers see for ``cell_id`` of ``generation``."""
    return cell_id if generation == 1 else f"g{generation}:{cell_id}"


def split_cell_id(cell_id: str) -> tuple[int, str]:
    """Return ``(generation, host cell id)`` of a public id."""
    if cell_id.startswith("g"):
        head, sep, rest = cell_id.partition(":")
        if sep and head.isascii() and head[1:].isdigit() and int(head[1:]) >= 2:
            return int(head[1:]), rest
    return 1, cell_id


class _GenerationDelegate:
    """The user's delegate, seeing public cell ids; everything else is passed through."""

    def __init__(self, inner: Delegate, generation: int) -> None:
        self._inner = inner
        self._generation = generation

    def __getattr__(self, name: str) -> Any:
        # ``definitions()`` and any other extra of the user's delegate.
        return getattr(self._inner, name)

    async def invoke_tool(self, call: ToolCall) -> JSON:
        public = public_cell_id(self._generation, call.cell_id)
        return await self._inner.invoke_tool(attrs.evolve(call, cell_id=public))

    async def notify(self, note: Notification) -> None:
        public = public_cell_id(self._generation, note.cell_id)
        await self._inner.notify(attrs.evolve(note, cell_id=public))

    def cell_closed(self, cell_id: str) -> None:
        self._inner.cell_closed(public_cell_id(self._generation, cell_id))


@attrs.define(eq=False)
class _Binding:
    generation: int
    connection: Connection | GrpcConnection
    session: Session | GrpcSession
    release: trio.Event
    finished: trio.Event
    surfaced: bool = False

    def public(self, response: RuntimeResponse) -> RuntimeResponse:
        if self.generation == 1:
            return response
        return attrs.evolve(response, cell_id=public_cell_id(self.generation, response.cell_id))


class ReconnectingCell:
    """A started cell of a :class:`ReconnectingSession` (``cell_id`` is the public id)."""

    def __init__(self, owner: ReconnectingSession, binding: _Binding, cell: Any) -> None:
        self._owner = owner
        self._binding = binding
        self._cell: StartedCell | GrpcStartedCell = cell
        self.cell_id = public_cell_id(binding.generation, cell.cell_id)
        self.session_id: str = cell.session_id

    def __repr__(self) -> str:
        return f"<ReconnectingCell {self.cell_id!r}>"

    async def initial_response(self) -> RuntimeResponse:
        """The cell's first observation; see :meth:`StartedCell.initial_response`."""
        with _surfacing(self._binding):
            return self._binding.public(await self._cell.initial_response())


class ReconnectingSession(SessionSurface):
    """The :class:`~codemode_trio.Session` API over a chain of generations (see module doc).

    It is cleaned up once it was closed and its last generation torn down: until then a failed
    generation is followed by a new one.
    """

    def __init__(
        self,
        opener: Opener,
        delegate: Delegate,
        limits: CellLimits | None,
        nursery: trio.Nursery,
        lease_id: str | None = None,
        output_truncation: str | None = None,
    ) -> None:
        super().__init__(delegate, trio.Event())
        self._opener = opener
        self._limits = limits
        self._output_truncation = output_truncation
        self._nursery = nursery
        self._binding: _Binding | None = None
        self._reopen = trio.Lock()
        self._closed = False
        self._lease_id = lease_id
        self.reattachments = 0
        """How many times a dropped connection was replaced while the session lived on."""

    def __repr__(self) -> str:
        return f"<ReconnectingSession generation {self.generation}>"

    @property
    def generation(self) -> int:
        """The current generation (1 for the first connection; 0 before any)."""
        return 0 if self._binding is None else self._binding.generation

    @property
    def connection(self) -> Connection | GrpcConnection | None:
        """The current generation's connection."""
        return None if self._binding is None else self._binding.connection

    @property
    def session_id(self) -> str:
        """The current generation's session id."""
        return "" if self._binding is None else self._binding.session.session_id

    # ----------------------------------------------------------------------- the Session API

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
    ) -> ReconnectingCell:
        """Start a cell on the current generation (opening a new one if needed).

        ``max_tool_calls`` is :meth:`Session.execute`'s (a budget per cell, not per session).
        """
        check_max_tool_calls(max_tool_calls)
        binding = await self._current()
        with _surfacing(binding):
            cell = await binding.session.execute(
                source,
                tools=tools,
                tool_call_id=tool_call_id,
                yield_time_ms=yield_time_ms,
                max_output_tokens=max_output_tokens,
                catalog_revision=catalog_revision,
                max_tool_calls=max_tool_calls,
            )
        return ReconnectingCell(self, binding, cell)

    async def wait(
        self,
        cell_id: str,
        *,
        yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_output_tokens: int | None = None,
    ) -> WaitOutcome:
        """Wait on a cell of the current generation; see :meth:`Session.wait`."""
        binding, host_id = await self._resolve(cell_id)
        with _surfacing(binding):
            outcome = await binding.session.wait(
                host_id, yield_time_ms=yield_time_ms, max_output_tokens=max_output_tokens
            )
        return WaitOutcome(outcome.live, binding.public(outcome.response))

    async def terminate(self, cell_id: str, *, max_output_tokens: int | None = None) -> WaitOutcome:
        """Terminate a cell of the current generation; see :meth:`Session.terminate`."""
        binding, host_id = await self._resolve(cell_id)
        with _surfacing(binding):
            outcome = await binding.session.terminate(host_id, max_output_tokens=max_output_tokens)
        return WaitOutcome(outcome.live, binding.public(outcome.response))

    async def run(
        self,
        source: str,
        *,
        tools: Iterable[ToolDefinition] | None = None,
        yield_time_ms: int | None = None,
        wait_yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS,
        max_tool_calls: int | None = None,
    ) -> RuntimeResponse:
        """Execute and wait through every yield; see :meth:`Session.run`."""
        check_max_tool_calls(max_tool_calls)
        binding = await self._current()
        with _surfacing(binding):
            response = await binding.session.run(
                source,
                tools=tools,
                yield_time_ms=yield_time_ms,
                wait_yield_time_ms=wait_yield_time_ms,
                max_tool_calls=max_tool_calls,
            )
        return binding.public(response)

    def request_yield(self, cell_id: str) -> None:
        """Ask for the cell's pending observation now; see :meth:`Session.request_yield`."""
        binding = self._binding
        if binding is None or self._closed:
            raise SessionClosed("code mode session is shutting down")
        binding.session.request_yield(self._check_generation(cell_id, binding))

    async def aclose(self) -> None:
        """Close the current generation's session and connection; idempotent."""
        self._closed = True
        if (binding := self._binding) is not None:
            binding.release.set()
            with trio.CancelScope(shield=True), trio.move_on_after(_TEARDOWN_S):
                await binding.finished.wait()
        self._cleaned_up.set()

    # ----------------------------------------------------------------------- generations

    async def _current(self) -> _Binding:
        if self._closed:
            raise SessionClosed("code mode session is shutting down")
        binding = self._binding
        if binding is not None and binding.connection.alive:
            return binding
        if binding is not None and not binding.surfaced:
            # The generation died between calls: its failure reaches one caller, once.
            binding.surfaced = True
            raise ConnectionFailed(binding.connection.failure or "code-mode host connection closed")
        async with self._reopen:
            if self._binding is binding:  # nobody reopened while we waited
                if binding is None:
                    generation, lease = 1, self._lease_id
                else:
                    binding.release.set()
                    # The lease to try first: the session we were on, if it was a gRPC one
                    # (a gRPC session is a lease, which another connection may attach to).
                    generation = binding.generation
                    grpc = not isinstance(binding.connection, Connection)
                    lease = binding.session.session_id if grpc else None
                self._binding = await self._nursery.start(self._run_generation, generation, lease)
                if binding is not None and self._binding.generation == binding.generation:
                    self.reattachments += 1
        assert self._binding is not None
        return self._binding

    async def _resolve(self, cell_id: str) -> tuple[_Binding, str]:
        binding = await self._current()
        return binding, self._check_generation(cell_id, binding)

    @staticmethod
    def _check_generation(cell_id: str, binding: _Binding) -> str:
        """The host's id of public ``cell_id``, which must be of ``binding``'s generation."""
        generation, host_id = split_cell_id(cell_id)
        if generation != binding.generation:
            raise SessionClosed(
                f"cell {cell_id} belongs to code-mode host generation {generation}, "
                f"but the session is on generation {binding.generation}"
            )
        return host_id

    async def _run_generation(
        self,
        previous: int,
        lease: str | None,
        *,
        task_status: trio.TaskStatus[_Binding] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # ``previous`` is the generation to continue if ``lease`` can be reattached (or 1 for
        # the first); otherwise the session is new and so is the generation.
        release = trio.Event()
        finished = trio.Event()
        started = False
        try:
            async with self._opener() as connection:
                session: Session | GrpcSession | None = None
                generation = previous
                if lease is not None:
                    session = await self._attach(connection, lease, generation)
                if session is None:
                    if self._binding is not None:
                        generation = previous + 1
                    delegate = _GenerationDelegate(self.delegate, generation)
                    session = await connection.start_session(
                        delegate, limits=self._limits, output_truncation=self._output_truncation
                    )
                async with session:
                    task_status.started(
                        _Binding(generation, connection, session, release, finished)
                    )
                    started = True
                    await release.wait()
        except CodeModeError as exc:
            if not started:
                raise
            # Leaving a dead generation may fail again; its callers were told already.
            logger.debug("generation %d ended: %s", generation, exc)
        finally:
            finished.set()

    async def _attach(
        self, connection: Connection | GrpcConnection, lease: str, generation: int
    ) -> GrpcSession | None:
        """Attach to the gRPC session ``lease``; ``None`` if the host no longer knows it."""
        if isinstance(connection, Connection):
            raise UsageError("only a gRPC connection can attach to a leased session")
        from .grpc.calls import GrpcStatusError
        from .grpc.framing import StatusCode

        delegate = _GenerationDelegate(self.delegate, generation)
        try:
            return await connection.start_session(delegate, session_id=lease)
        except GrpcStatusError as exc:
            if exc.code != StatusCode.NOT_FOUND:
                raise
            if lease == self._lease_id:
                # Attaching is what the caller asked for: a new session would not be theirs.
                raise SessionClosed(
                    f"the leased code-mode session {lease} is gone: {exc.details}"
                ) from exc
            logger.debug("session %s is gone; opening a new generation", lease)
            return None


@contextmanager
def _surfacing(binding: _Binding) -> Iterator[None]:
    """Marks a generation's failure as surfaced when a call on it raises ConnectionFailed."""
    try:
        yield
    except ConnectionFailed:
        binding.surfaced = True
        raise


@asynccontextmanager
async def open_reconnecting_session(
    opener: Opener,
    *,
    delegate: Delegate | None = None,
    limits: CellLimits | None = None,
    session_id: str | None = None,
    output_truncation: str | None = None,
) -> AsyncIterator[ReconnectingSession]:
    """A session that reopens itself on a new connection after a host failure.

    ``opener`` is called with no arguments for each generation and must return an async
    context manager of a connection, e.g. ``cm.open_host_process`` or ``lambda:
    cm.open_grpc_connection(target)``. The first generation is opened on entry (its errors
    raise here); leaving the block closes the current one.

    Over gRPC a dropped connection is first replaced by a reattachment to the same session
    (see the module documentation). ``session_id`` attaches to a session whose lease another
    connection holds, instead of opening one, and reattaches to it after every drop; once the
    host no longer knows it, calls raise :class:`~codemode_trio.SessionClosed`. It needs an
    opener of gRPC connections: another kind raises :class:`~codemode_trio.UsageError` once
    entered, with no session request sent. ``limits`` and ``output_truncation`` are
    :meth:`Connection.open_session`'s, for every generation's session.
    """
    if session_id is not None and limits is not None:
        raise UsageError("limits belong to the session's opener, not to an attached session")
    if session_id is not None and output_truncation is not None:
        raise UsageError("output_truncation belongs to the opener, not to an attached session")
    delegate = delegate if delegate is not None else NoopDelegate()  # a registry may be falsy
    async with unwrapping_nursery() as nursery:
        session = ReconnectingSession(
            opener, delegate, limits, nursery, session_id, output_truncation
        )
        try:
            await session._current()
            yield session
        finally:
            await session.aclose()
