"""``open_grpc_connection``: the host's gRPC API with the same API as :class:`Connection`.

The host serves ``codex.code_mode.v1.CodeModeHost`` over TCP (``--listen grpc://IP:PORT``,
printing ``http://IP:PORT`` as its first stdout line) or over its stdio (``--listen
grpc+stdio://``, HTTP/2 with prior knowledge). Either way a :class:`GrpcConnection` is one
HTTP/2 connection; sessions, cells and delegates behave as on the stdio transport, so an
application switches transports by changing the opener.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import attrs
import trio

from .._groups import unwrapping_nursery
from .._oserror import os_error_text
from ..client.config import DEFAULT_CONFIG, ConnectionConfig
from ..client.connection import ConnectionStatistics
from ..client.delegate_runner import fatal_reason, raise_fatal_over
from ..client.delegates import Delegate, NoopDelegate
from ..errors import ConnectionFailed, HostProtocolViolation, UsageError
from ..protocol.checks import check_cell_limits
from ..protocol.content import CellLimits
from ..protocol.handshake import BOUNDED_OUTPUT, SESSION_LIMITS, YIELD_OBSERVATION
from ..protocol.values import is_opt_u64
from ..transport.process import HostProcess
from . import codemode_pb2 as pb
from .calls import GrpcChannel
from .convert import limits_to_pb
from .http2 import Http2Settings, open_http2_connection
from .session import GrpcSession

__all__ = ["GrpcConnection", "GrpcSettings", "open_grpc_connection", "open_grpc_stream"]

SERVICE = "codex.code_mode.v1.CodeModeHost"

# What the gRPC API offers, named as the stdio handshake names the same features.
_CAPABILITIES = frozenset({SESSION_LIMITS, YIELD_OBSERVATION, BOUNDED_OUTPUT})
_OUTPUT_TRUNCATION = {"client": pb.OUTPUT_TRUNCATION_CLIENT, "server": pb.OUTPUT_TRUNCATION_BOUNDED}


@attrs.frozen
class GrpcSettings(Http2Settings):
    """HTTP/2 tuning (see :class:`~codemode_trio.grpc.http2.Http2Settings`) plus gRPC's own.

    - ``heartbeat_interval_s``: asks the host for a heartbeat on each idle tool-call
      subscription this often (``None``: none), so idle subscriptions keep middleboxes open.
    """

    heartbeat_interval_s: int | None = 30


class GrpcConnection:
    """One HTTP/2 connection to a code-mode host's gRPC API; see :class:`Connection`.

    ``capabilities`` names the stdio capabilities whose features the gRPC API has;
    ``protocol_version`` is the API's version (``codex.code_mode.v1``). ``process`` and
    ``host`` are the host's child process, when the connection owns one.
    """

    def __init__(
        self,
        channel: GrpcChannel,
        nursery: trio.Nursery,
        *,
        config: ConnectionConfig,
        heartbeat_interval_s: int | None,
        host: HostProcess | None = None,
    ) -> None:
        self.capabilities: frozenset[str] = _CAPABILITIES
        self.protocol_version: int = 1
        self.host = host
        self.process: trio.Process | None = None if host is None else host.process
        self.channel = channel
        self.nursery = nursery
        self.config = config
        self._heartbeat_interval_s = heartbeat_interval_s
        self._sessions: set[GrpcSession] = set()
        #: A BaseException (SystemExit, KeyboardInterrupt...) a delegate raised: it ends the
        #: connection and is raised again, as itself, when the connection's block exits.
        self.fatal_exception: BaseException | None = None

    def __repr__(self) -> str:
        state = "alive" if self.alive else f"failed: {self.failure}"
        return f"<GrpcConnection {state}>"

    @property
    def alive(self) -> bool:
        """True until the connection fails (or is closed)."""
        return self.channel.http2.failure is None

    @property
    def failure(self) -> str | None:
        """The first failure reason, or ``None`` while the connection is alive."""
        return self.channel.http2.failure

    async def wait_failed(self) -> str:
        """Wait until the connection fails; return the first failure reason."""
        return await self.channel.http2.wait_failed()

    def statistics(self) -> ConnectionStatistics:
        """Open calls, delegates, sessions and cells; gRPC messages and bytes each way."""
        http2 = self.channel.http2
        return ConnectionStatistics(
            # Calls awaiting their answers: not the sessions' own long-lived streams.
            pending_requests=http2.open_streams - sum(s.standing_streams for s in self._sessions),
            pending_initial_responses=0,
            active_delegates=sum(s.active_delegates for s in self._sessions),
            parked_delegates=0,
            deferred_waits=0,
            sessions=len(self._sessions),
            live_cells=sum(s.live_cells for s in self._sessions),
            frames_sent=self.channel.messages_sent,
            frames_received=self.channel.messages_received,
            bytes_sent=http2.bytes_sent,
            bytes_received=http2.bytes_received,
            outgoing_queued=0,
        )

    async def start_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
        max_pending_delegate_calls: int | None = None,
    ) -> GrpcSession:
        """Open a session and return it; you must ``await session.aclose()`` when done.

        With ``session_id`` (a UUID the host gave out) nothing is opened: the session is
        *attached* — its tool calls come to ``delegate`` through a new subscription. The
        lease's own events (notifications, tool-call cancellations, closed cells) keep going
        to the connection that opened it.
        """
        self.check_alive()
        request: pb.OpenSessionRequest | None = None
        if session_id is None:
            request = pb.OpenSessionRequest()
            if limits is not None and not check_cell_limits(limits).is_default:
                request.cell_execution_limits.CopyFrom(limits_to_pb(limits))
            if output_truncation is not None:
                mode = _OUTPUT_TRUNCATION.get(output_truncation)
                if mode is None:
                    raise UsageError("output_truncation must be 'client' or 'server'")
                request.output_truncation = mode
            if max_pending_delegate_calls is not None:
                if not is_opt_u64(max_pending_delegate_calls):
                    raise UsageError("max_pending_delegate_calls must fit u64")
                request.max_pending_delegate_calls = max_pending_delegate_calls
        else:
            if limits is not None or output_truncation is not None:
                raise UsageError("limits and output_truncation belong to the session's opener")
            if not session_id.strip():
                raise UsageError("identifier must not be empty")
        delegate = delegate if delegate is not None else NoopDelegate()  # a registry may be falsy
        session = GrpcSession(self, delegate, session_id=session_id or "")
        self._sessions.add(session)
        try:
            await self.nursery.start(session.run_streams, request, self._heartbeat_interval_s)
        except BaseException:
            self._sessions.discard(session)
            raise
        return session

    @asynccontextmanager
    async def open_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
        max_pending_delegate_calls: int | None = None,
    ) -> AsyncIterator[GrpcSession]:
        """Open a session for the block; leaving it closes the session (``CloseSession``)."""
        session = await self.start_session(
            delegate,
            limits=limits,
            session_id=session_id,
            output_truncation=output_truncation,
            max_pending_delegate_calls=max_pending_delegate_calls,
        )
        async with session:
            yield session

    async def aclose(self) -> None:
        """Fail the connection with ``code-mode host connection closed`` (idempotent).

        Every session's cells are closed locally and its delegate calls revoked.
        """
        self.channel.http2.fail("code-mode host connection closed")
        for session in list(self._sessions):
            with trio.move_on_after(self.config.transport_timeout):
                await session.wait_cleaned_up()
        await trio.lowlevel.checkpoint()

    def check_alive(self) -> None:
        """Raise :class:`~codemode_trio.ConnectionFailed` if the connection is dead."""
        failure = self.failure
        if failure is not None:
            raise ConnectionFailed(failure)

    def forget_session(self, session: GrpcSession) -> None:
        """A session closed: stop tracking it."""
        self._sessions.discard(session)

    def delegate_raised(self, exc: BaseException) -> None:
        """A delegate raised a ``BaseException``: fail the connection; its block raises it."""
        if self.fatal_exception is None:
            self.fatal_exception = exc
        self.channel.http2.fail(fatal_reason(exc))

    def violation(self, text: str) -> HostProtocolViolation:
        """Fail the connection for a host that broke the API; return the error to raise."""
        self.channel.http2.fail(text)
        return HostProtocolViolation(text)

    @contextmanager
    def host_deadline(self, seconds: float, operation: str) -> Iterator[None]:
        """Bound a wait on the host; expiry fails the whole connection (reference text)."""
        with trio.move_on_after(seconds) as scope:
            yield
        if scope.cancelled_caught:
            raise self.timed_out(operation)

    def timed_out(self, operation: str) -> ConnectionFailed:
        """Fail the connection: the host did not answer ``operation`` in time; return the error.

        While a request waits for a stream slot or window the host owes, the reason names that.
        """
        reason = self.channel.http2.withheld or (
            f"gRPC code-mode host timed out waiting for {operation} response"
        )
        self.channel.http2.fail(reason)
        return ConnectionFailed(self.failure or reason)


def _parse_target(target: str) -> tuple[str, int]:
    """Split ``grpc://IP:PORT`` (or ``http://IP:PORT``, as the host prints it)."""
    parsed = urllib.parse.urlsplit(target)
    try:
        port = parsed.port
    except ValueError:
        port = None
    host = parsed.hostname
    valid = parsed.scheme in ("grpc", "http") and parsed.path in ("", "/")
    if not valid or not host or port is None:
        raise UsageError(f"gRPC target must look like grpc://IP:PORT, not {target!r}")
    return host, port


@asynccontextmanager
async def open_grpc_stream(
    stream: trio.abc.Stream,
    *,
    authority: str = "localhost",
    config: ConnectionConfig = DEFAULT_CONFIG,
    settings: GrpcSettings | None = None,
    eof_details: Callable[[], Awaitable[str | None]] | None = None,
    host: HostProcess | None = None,
) -> AsyncIterator[GrpcConnection]:
    """Speak the host's gRPC API over any byte stream (HTTP/2 with prior knowledge).

    Waits (at most ``config.handshake_timeout``) for the host's HTTP/2 SETTINGS, so a peer
    that is not an HTTP/2 server fails here. Leaving the block closes every session locally,
    sends GOAWAY and closes ``stream``. ``host`` is the child process behind ``stream``, when
    the connection owns one (``conn.host``).
    """
    settings = settings or GrpcSettings()
    async with open_http2_connection(
        stream, settings, eof_details=eof_details, config=config
    ) as http2:
        with trio.move_on_after(config.handshake_timeout) as scope:
            await http2.wait_ready()
        if scope.cancelled_caught:
            http2.fail("timed out negotiating with the code-mode host")
            raise ConnectionFailed("timed out negotiating with the code-mode host")
        channel = GrpcChannel(http2, authority=authority, service=SERVICE)
        async with unwrapping_nursery() as nursery:
            connection = GrpcConnection(
                channel,
                nursery,
                config=config,
                heartbeat_interval_s=settings.heartbeat_interval_s,
                host=host,
            )
            try:
                with raise_fatal_over(lambda: connection.fatal_exception):
                    yield connection
            finally:
                # Sessions close locally as their streams fail; the host ends the leases
                # when the connection goes (the lease streams are gone).
                with trio.CancelScope(shield=True):
                    await connection.aclose()


@asynccontextmanager
async def open_grpc_connection(
    target: str, *, config: ConnectionConfig = DEFAULT_CONFIG, settings: GrpcSettings | None = None
) -> AsyncIterator[GrpcConnection]:
    """Connect to a host serving gRPC at ``target`` (``grpc://IP:PORT``) for the block.

    The returned :class:`GrpcConnection` has the API of :class:`~codemode_trio.Connection`.
    A refused or unreachable target, or one that does not accept within
    ``config.handshake_timeout``, raises :class:`~codemode_trio.ConnectionFailed`.
    """
    host, port = _parse_target(target)
    try:
        # A SYN the host never answers is retried for minutes: the handshake's deadline applies.
        with trio.fail_after(config.handshake_timeout):
            stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        raise ConnectionFailed(f"timed out connecting to the code-mode host at {target}") from None
    except OSError as exc:
        raise ConnectionFailed(
            f"failed to connect to the code-mode host at {target}: {os_error_text(exc)}"
        ) from exc
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    async with open_grpc_stream(
        stream, authority=authority, config=config, settings=settings
    ) as connection:
        yield connection
