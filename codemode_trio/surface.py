"""The session and connection API every transport offers, declared once.

:class:`~codemode_trio.Session` (stdio and WebSocket), :class:`~codemode_trio.GrpcSession` and
:class:`~codemode_trio.ReconnectingSession` satisfy :class:`SessionAPI`;
:class:`~codemode_trio.Connection` and :class:`~codemode_trio.GrpcConnection` satisfy
:class:`ConnectionAPI`, and :class:`~codemode_trio.HostPool` the :class:`SessionSource` part of
it. Code written against these protocols runs on any transport. mypy holds each type to them
(``codemode_trio/__init__.py``) and a test holds their signatures to these, parameter by
parameter, so an option added to one transport cannot be missing on another.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, Self

from .client.delegates import Delegate
from .protocol.content import CellLimits, RuntimeResponse, ToolDefinition, WaitOutcome

if TYPE_CHECKING:
    from .client.connection import ConnectionStatistics

__all__ = ["ConnectionAPI", "SessionAPI", "SessionSource", "StartedCellAPI"]


class StartedCellAPI(Protocol):
    """A cell the host has started: what ``execute`` returns."""

    cell_id: str
    session_id: str

    async def initial_response(self) -> RuntimeResponse:
        """The cell's first observation (``yielded``, ``result`` or ``terminated``)."""


class SessionAPI(Protocol):
    """An open session; an async context manager whose exit closes it."""

    delegate: Delegate

    @property
    def session_id(self) -> str:
        """The host's id of the session."""

    @property
    def cleaned_up(self) -> bool:
        """True once every cell of the session was closed locally."""

    async def wait_cleaned_up(self) -> None:
        """Wait until every cell of the session is closed locally."""

    def default_tools(self) -> tuple[ToolDefinition, ...]:
        """The tools a cell gets when none are given."""

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
    ) -> StartedCellAPI:
        """Start ``source`` as a new cell; return once the host assigned its id."""

    async def wait(
        self, cell_id: str, *, yield_time_ms: int = 10_000, max_output_tokens: int | None = None
    ) -> WaitOutcome:
        """Observe a cell for up to ``yield_time_ms``."""

    async def terminate(self, cell_id: str, *, max_output_tokens: int | None = None) -> WaitOutcome:
        """Terminate a cell; return the output not yet delivered."""

    async def run(
        self,
        source: str,
        *,
        tools: Iterable[ToolDefinition] | None = None,
        yield_time_ms: int | None = None,
        wait_yield_time_ms: int = 10_000,
        max_tool_calls: int | None = None,
    ) -> RuntimeResponse:
        """Execute ``source`` and wait through every yield; return the final response."""

    def request_yield(self, cell_id: str) -> None:
        """Ask the host to answer the cell's pending observation now."""

    async def aclose(self) -> None:
        """Close the session; idempotent."""

    async def __aenter__(self) -> Self:
        """Return the session itself."""

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the session."""


class SessionSource(Protocol):
    """Anything that opens sessions: a connection, or a pool of them."""

    def open_session(
        self, delegate: Delegate | None = None, *, limits: CellLimits | None = None
    ) -> AbstractAsyncContextManager[SessionAPI]:
        """Open a session for the block; leaving it closes the session."""


class ConnectionAPI(Protocol):
    """One live connection to a code-mode host, on whatever transport."""

    capabilities: frozenset[str]
    protocol_version: int

    @property
    def alive(self) -> bool:
        """True until the connection fails (or is closed)."""

    @property
    def failure(self) -> str | None:
        """The first failure reason, or ``None`` while the connection is alive."""

    async def wait_failed(self) -> str:
        """Wait until the connection fails; return the first failure reason."""

    def statistics(self) -> ConnectionStatistics:
        """A snapshot of the connection's activity."""

    async def start_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
    ) -> SessionAPI:
        """Open a session and return it; the caller closes it."""

    def open_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
    ) -> AbstractAsyncContextManager[SessionAPI]:
        """Open a session for the block; leaving it closes the session."""

    async def aclose(self) -> None:
        """Fail the connection with ``code-mode host connection closed`` (idempotent)."""
