"""A connection to a code-mode host over any Trio byte stream.

``open_connection(stream)`` performs the handshake, then runs the connection's tasks in a
nursery owned by the returned context manager (see :mod:`~codemode_trio.client.shell` for the
shape: a reader, a writer, and one task per delegate call, around one
:class:`~codemode_trio.protocol.client_protocol.ClientProtocol` that holds every rule).

Leaving the context manager (or any fatal error) fails the connection with one reason, closes
every live cell once and cancels every task; nothing it started outlives it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from os import PathLike
from typing import Any

import attrs
import trio

from .._groups import unwrapping_nursery
from .._oserror import describe_stream_error
from ..errors import ConnectionFailed, HandshakeError, UsageError
from ..protocol.client_protocol import ClientProtocol
from ..protocol.content import CellLimits
from ..protocol.errors import ConnectionUnusable, HostProtocolViolation
from ..protocol.handshake import ALL_CAPABILITIES
from ..transcript import TranscriptWriter
from ..transport.process import HostProcess
from .config import DEFAULT_CONFIG, ConnectionConfig
from .delegate_runner import raise_fatal_over
from .delegates import Delegate, NoopDelegate
from .lifecycle import Lifecycle
from .session import Session
from .shell import ClientShell, EofDetails

__all__ = ["Connection", "ConnectionStatistics", "EofDetails", "open_connection"]


_RECEIVE_SIZE = 256 * 1024
# How long an EOF description may take during the handshake.
_EOF_DETAILS_TIMEOUT = 2.0


@attrs.frozen
class ConnectionStatistics:
    """A snapshot of a connection's activity (see :meth:`Connection.statistics`)."""

    pending_requests: int
    pending_initial_responses: int
    active_delegates: int
    parked_delegates: int
    deferred_waits: int
    sessions: int
    live_cells: int
    frames_sent: int
    frames_received: int
    bytes_sent: int
    bytes_received: int
    outgoing_queued: int
    #: Writes queued on the bulk lane of a dual-websocket connection (0 without one).
    bulk_outgoing_queued: int = 0


class Connection:
    """One live connection to a code-mode host (created by :func:`open_connection`).

    - ``capabilities``: what the host granted; ``protocol_version``: always 1 today.
    - ``alive`` / ``failure``: ``failure`` is the *first* failure reason, or ``None``.
    - ``process`` / ``host``: the host's :class:`trio.Process` and its ``HostProcess`` (stderr
      tail, exit status) when the connection owns a child process.
    """

    def __init__(self, shell: ClientShell, host: HostProcess | None = None) -> None:
        """Created by :func:`open_connection`; not by applications."""
        self._shell = shell
        self.capabilities: frozenset[str] = shell.proto.capabilities
        self.protocol_version: int = shell.proto.protocol_version or 1
        self.host = host
        self.process: trio.Process | None = None if host is None else host.process

    def __repr__(self) -> str:
        state = "alive" if self.alive else f"failed: {self.failure}"
        return f"<Connection {state}, capabilities={sorted(self.capabilities)}>"

    # ----------------------------------------------------------------------- observation

    @property
    def alive(self) -> bool:
        """True until the connection fails (or is closed)."""
        return self._shell.lifecycle.alive

    @property
    def failure(self) -> str | None:
        """The first failure reason, or ``None`` while the connection is alive."""
        value: str | None = self._shell.lifecycle.failure.value
        return value

    async def wait_failed(self) -> str:
        """Wait until the connection fails; return the first failure reason."""
        return await self._shell.lifecycle.wait_failed()

    def statistics(self) -> ConnectionStatistics:
        """Pending requests, active delegates, live cells, and frames/bytes each way."""
        counts = self._shell.proto.statistics()
        reported = attrs.fields_dict(ConnectionStatistics)
        return ConnectionStatistics(
            **{name: count for name, count in counts.items() if name in reported},
            outgoing_queued=self._shell.outbox.queued,
            bulk_outgoing_queued=0 if (bulk := self._shell.bulk_outbox) is None else bulk.queued,
        )

    # ----------------------------------------------------------------------- sessions

    async def start_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
        **unexpected: Any,
    ) -> Session:
        """Open a session and return it; you must ``await session.aclose()`` when done.

        Prefer ``async with conn.open_session(...)``, which closes it for you.
        """
        _refuse_unexpected(unexpected)
        if delegate is None:
            delegate = NoopDelegate()
        elif not all(
            callable(getattr(delegate, name, None))
            for name in ("invoke_tool", "notify", "cell_closed")
        ):
            raise UsageError(
                "delegate must have async invoke_tool(call), async notify(note) and "
                f"cell_closed(cell_id) (a ToolRegistry is one), not {type(delegate).__name__}"
            )
        opened, cleanup = await self._shell.open_session(
            delegate, session_id, limits, output_truncation
        )
        return Session(self._shell, opened, delegate, cleanup)

    @asynccontextmanager
    async def open_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
        **unexpected: Any,
    ) -> AsyncIterator[Session]:
        """Open a session for the block; leaving it sends ``session/shutdown``.

        ``delegate`` answers the cells' tool calls and notifications (a
        :class:`~codemode_trio.ToolRegistry` is one). ``limits`` needs the host's
        ``session-cell-execution-resource-limits`` capability; asking for them from a host
        without it raises :class:`~codemode_trio.UsageError` and sends nothing.
        """
        session = await self.start_session(
            delegate,
            limits=limits,
            session_id=session_id,
            output_truncation=output_truncation,
            **unexpected,
        )
        async with session:
            yield session

    async def aclose(self) -> None:
        """Fail the connection with ``code-mode host connection closed`` (idempotent).

        Returns once every live cell has been closed, every waiter failed and the stream
        closed. Delegates that shield their own cleanup may still be finishing.
        """
        shell = self._shell
        shell.close()
        with trio.move_on_after(shell.config.transport_timeout):
            await shell.stopped.wait()
        await trio.lowlevel.checkpoint()


def _refuse_unexpected(unexpected: dict[str, Any]) -> None:
    if "tools" in unexpected:
        raise UsageError(
            "open_session() takes the session's delegate as delegate=... (a ToolRegistry is "
            "one); tool definitions go to execute(tools=...) or run(tools=...)"
        )
    if unexpected:
        raise UsageError(f"open_session() got an unexpected keyword argument {min(unexpected)!r}")


async def _handshake(
    stream: trio.abc.Stream,
    proto: ClientProtocol,
    *,
    config: ConnectionConfig,
    eof_details: EofDetails | None,
) -> None:
    async def details() -> str | None:
        if eof_details is None:
            return None
        with trio.move_on_after(_EOF_DETAILS_TIMEOUT):
            return await eof_details()
        return None

    def suffix(text: str | None) -> str:
        return f" ({text})" if text else ""

    async def failed(action: str, exc: BaseException) -> ConnectionFailed:
        what = f"failed to {action} code-mode host hello: {describe_stream_error(exc)}"
        return ConnectionFailed(what + suffix(await details()))

    with trio.move_on_after(config.handshake_timeout) as deadline:
        try:
            await stream.send_all(proto.data_to_send())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise await failed("write", exc) from None
        while not proto.handshake_complete:
            try:
                data = await stream.receive_some(_RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise await failed("read", exc) from None
            if not data:
                try:
                    proto.receive_eof(await details())
                except ConnectionUnusable as exc:
                    raise ConnectionFailed(exc.reason) from None
            try:
                proto.receive_data(data)
            except HostProtocolViolation as exc:
                if proto.handshake_complete:
                    # Ready, then a violation in the same read: the connection starts failed
                    # and reports it like any other failure.
                    break
                raise HandshakeError(f"{exc}{suffix(await details())}") from None
    if deadline.cancelled_caught:
        raise ConnectionFailed("timed out negotiating with the code-mode host")


@asynccontextmanager
async def open_connection(
    stream: trio.abc.Stream,
    *,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    transcript: str | PathLike[str] | None = None,
    eof_details: EofDetails | None = None,
    connect_bulk: Callable[[str], Awaitable[trio.abc.Stream]] | None = None,
    host: HostProcess | None = None,
) -> AsyncIterator[Connection]:
    """Handshake over ``stream`` and run a :class:`Connection` for the block.

    ``capabilities`` are offered as optional (none is required). ``transcript`` records every
    frame to a CBOR sequence file. ``eof_details`` describes why the stream ended (the process
    transport uses it for the host's exit status and stderr). The stream is closed on exit.

    ``connect_bulk`` is for transports that can open a second socket (a WebSocket): it lets
    ``dual-websocket-v1`` be offered, and when the host grants it, it is called with the host's
    token and returns the bulk lane's stream, before the connection is handed out. It raises
    :class:`~codemode_trio.ConnectionFailed` when the lane cannot be opened. ``host`` is the
    child process behind ``stream``, when the connection owns one (``conn.host``).

    Raises :class:`~codemode_trio.ConnectionFailed` if the host goes away or the 30 s
    handshake deadline passes, :class:`~codemode_trio.HandshakeRejected` if it refuses. A
    ``BaseException`` that a delegate raised (``SystemExit``, ``KeyboardInterrupt``) ends the
    connection and comes out of the block as itself, after the usual cleanup.
    """
    try:
        writer = TranscriptWriter(transcript) if transcript is not None else None
    except BaseException:
        # Refused before anything was sent (a bad path, a link): the stream is ours to close.
        await trio.aclose_forcefully(stream)
        raise
    try:
        proto = ClientProtocol(
            capabilities=capabilities,
            strict=config.strict,
            max_pending_delegates=config.max_pending_delegates,
            recent_delegate_ids=config.recent_delegate_ids,
            on_frame=writer.record if writer is not None else None,
            websocket=connect_bulk is not None,
        )
        bulk: trio.abc.Stream | None = None
        try:
            await _handshake(stream, proto, config=config, eof_details=eof_details)
            if proto.bulk_token is not None and not proto.failure:
                assert connect_bulk is not None
                bulk = await connect_bulk(proto.bulk_token)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        shell = ClientShell(
            proto, stream, config=config, lifecycle=Lifecycle(), describe_eof=eof_details, bulk=bulk
        )
        connection = Connection(shell, host)
        # What a delegate raised (SystemExit, KeyboardInterrupt) comes out as itself.
        with raise_fatal_over(lambda: shell.fatal_exception):
            async with unwrapping_nursery() as nursery:
                await nursery.start(shell.run_tasks)
                try:
                    yield connection
                finally:
                    shell.close()
    finally:
        if writer is not None:
            writer.close()
