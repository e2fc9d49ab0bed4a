"""A connection to a code-mode host over any Trio byte stream.

``open_connection(stream)`` performs the handshake, then runs the connection's tasks in a
nursery owned by the returned context manager:

.. code-block:: text

    caller tasks ──commands──►┐                         ┌──► writer task ──► stream
    reader task ──events────► inbox ──► DRIVER ──frames─┘
    caller notices (cancel) ──────────►   │   (send_nowait: never awaits the writer)
                                          └──► delegate nursery: one task per delegate call,
                                               each inside its own trio.CancelScope

Leaving the context manager (or any fatal error) fails the connection with one reason, closes
every live cell once and cancels every task; nothing it started outlives it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from os import PathLike
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._oserror import describe_stream_error
from ..errors import ConnectionFailed, HandshakeError, UsageError
from ..protocol._wire import is_opt_u64
from ..protocol.codec import decode_host_message, encode_client_message
from ..protocol.content import CellLimits
from ..protocol.errors import ProtocolViolation
from ..protocol.framing import FrameDecoder, encode_frame
from ..protocol.handshake import (
    ALL_CAPABILITIES,
    BOUNDED_OUTPUT,
    DELEGATE_CAPACITY_4096,
    SESSION_LIMITS,
    HandshakeResult,
    build_hello,
    evaluate_handshake,
)
from ..transcript import TranscriptWriter
from ._groups import unwrapping_nursery
from .commands import (
    Abandon,
    Claim,
    Command,
    FailNotice,
    HostEof,
    HostEvent,
    InboxItem,
    Notice,
    OpenCommand,
    TerminateCommand,
    Wake,
)
from .config import DEFAULT_CONFIG, ConnectionConfig
from .delegates import Delegate, NoopDelegate
from .driver import Driver
from .lifecycle import Lifecycle
from .session import Session
from .slots import ReplySlot

if TYPE_CHECKING:
    from ..transport.process import HostProcess

__all__ = ["Connection", "ConnectionStatistics", "EofDetails", "open_connection"]

logger = logging.getLogger("codemode_trio.connection")

T = TypeVar("T")

#: Called when the host's stream ends, to describe why (e.g. the process's exit status and
#: the tail of its stderr). Returns ``None`` when there is nothing to add.
EofDetails = Callable[[], Awaitable[str | None]]

_RECEIVE_SIZE = 256 * 1024
# How long an EOF description may take (it may wait for the process to exit).
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


@attrs.define
class _Counters:
    frames_sent: int = 0
    frames_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


class Connection:
    """One live connection to a code-mode host (created by :func:`open_connection`).

    - ``capabilities``: what the host granted; ``protocol_version``: always 1 today.
    - ``alive`` / ``failure``: ``failure`` is the *first* failure reason, or ``None``.
    - ``process``: the host's :class:`trio.Process` when the connection owns one.
    """

    def __init__(
        self,
        *,
        handshake: HandshakeResult,
        config: ConnectionConfig,
        transcript: TranscriptWriter | None,
        eof_details: EofDetails | None,
    ) -> None:
        self.capabilities: frozenset[str] = handshake.capabilities
        self.protocol_version: int = handshake.version
        self.process: trio.Process | None = None
        # The HostProcess when open_host_process() owns the host (stderr tail, exit status).
        self.host: HostProcess | None = None
        self._config = config
        self._transcript = transcript
        self._eof_details = eof_details
        self._lifecycle = Lifecycle()
        self._counters = _Counters()
        self._session_numbers = itertools.count(1)
        self._session_ids: set[str] = set()
        inbox_send, inbox_recv = trio.open_memory_channel[InboxItem](config.inbox_capacity)
        # Unbounded on purpose: a cancelled caller reports from its except block, where it
        # cannot await; a bounded channel could refuse that report and leak a cell.
        notice_send, notice_recv = trio.open_memory_channel[Notice](math.inf)
        outgoing_send, outgoing_recv = trio.open_memory_channel[bytes](config.outgoing_capacity)
        self._inbox_send = inbox_send
        self._inbox_recv = inbox_recv
        self._notice_send = notice_send
        self._notice_recv = notice_recv
        self._outgoing_send = outgoing_send
        self._outgoing_recv = outgoing_recv
        self._services_scope = trio.CancelScope()
        # A separate scope around the driver alone, so tests can abort just the driver task.
        self._driver_scope = trio.CancelScope()
        self._driver: Driver | None = None
        # Set once the connection's tasks have all finished (cells closed, stream closed).
        self._stopped = trio.Event()

    def __repr__(self) -> str:
        state = "alive" if self.alive else f"failed: {self.failure}"
        return f"<Connection {state}, capabilities={sorted(self.capabilities)}>"

    # ----------------------------------------------------------------------- observation

    @property
    def alive(self) -> bool:
        """True until the connection fails (or is closed)."""
        return self._lifecycle.alive

    @property
    def failure(self) -> str | None:
        """The first failure reason, or ``None`` while the connection is alive."""
        value: str | None = self._lifecycle.failure.value
        return value

    async def wait_failed(self) -> str:
        """Wait until the connection fails; return the first failure reason."""
        return await self._lifecycle.wait_failed()

    def statistics(self) -> ConnectionStatistics:
        """Pending requests, active delegates, live cells, and frames/bytes each way."""
        driver = self._driver.statistics() if self._driver is not None else {}
        counters = self._counters
        return ConnectionStatistics(
            pending_requests=driver.get("pending_requests", 0),
            pending_initial_responses=driver.get("pending_initial_responses", 0),
            active_delegates=driver.get("active_delegates", 0),
            parked_delegates=driver.get("parked_delegates", 0),
            deferred_waits=driver.get("deferred_waits", 0),
            sessions=driver.get("sessions", 0),
            live_cells=driver.get("live_cells", 0),
            frames_sent=counters.frames_sent,
            frames_received=counters.frames_received,
            bytes_sent=counters.bytes_sent,
            bytes_received=counters.bytes_received,
            outgoing_queued=self._outgoing_send.statistics().current_buffer_used,
        )

    # ----------------------------------------------------------------------- sessions

    async def start_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
    ) -> Session:
        """Open a session and return it; you must ``await session.aclose()`` when done.

        Prefer ``async with conn.open_session(...)``, which closes it for you.
        """
        if limits is not None and not limits.is_default and SESSION_LIMITS not in self.capabilities:
            raise UsageError(
                "code-mode host does not support session resource limits: "
                f"missing `{SESSION_LIMITS}` capability"
            )
        if limits is not None:
            for value, name in (
                (limits.max_yield_time_ms, "max_yield_time_ms"),
                (limits.max_heap_size_bytes, "max_heap_size_bytes"),
            ):
                if not is_opt_u64(value):
                    raise UsageError(
                        "failed to encode code-mode session execution limits: "
                        f"{name}={value!r} does not fit u64"
                    )
        if output_truncation is not None:
            if output_truncation not in ("client", "server"):
                raise UsageError("output_truncation must be 'client' or 'server'")
            self._require_capability(BOUNDED_OUTPUT, "output truncation")
        if session_id is None:
            session_id = f"session-{next(self._session_numbers)}"
            while session_id in self._session_ids:
                session_id = f"session-{next(self._session_numbers)}"
        elif not session_id.strip():
            raise UsageError("identifier must not be empty")
        # The host refuses to reopen a recently used id, so generated ids avoid every id this
        # connection has used (explicit ones included).
        self._session_ids.add(session_id)
        delegate = delegate if delegate is not None else NoopDelegate()
        slot: ReplySlot[None] = ReplySlot()
        cleaned_up = trio.Event()
        await self._call(
            OpenCommand(session_id, delegate, limits, output_truncation, slot, cleaned_up),
            slot,
            cancellable=True,
            limit=self._config.transport_timeout,
            timeout_reason="code-mode host timed out waiting for open-session response",
        )
        # Taken: from here on this task owns the session and closes it.
        self._claim(slot)
        return Session(self, session_id, delegate, cleaned_up)

    @asynccontextmanager
    async def open_session(
        self,
        delegate: Delegate | None = None,
        *,
        limits: CellLimits | None = None,
        session_id: str | None = None,
        output_truncation: str | None = None,
    ) -> AsyncIterator[Session]:
        """Open a session for the block; leaving it sends ``session/shutdown``.

        ``delegate`` answers the cells' tool calls and notifications (a
        :class:`~codemode_trio.ToolRegistry` is one). ``limits`` needs the host's
        ``session-cell-execution-resource-limits`` capability; asking for them from a host
        without it raises :class:`~codemode_trio.UsageError` and sends nothing.
        """
        session = await self.start_session(
            delegate, limits=limits, session_id=session_id, output_truncation=output_truncation
        )
        async with session:
            yield session

    async def aclose(self) -> None:
        """Fail the connection with ``code-mode host connection closed`` (idempotent).

        Returns once every live cell has been closed, every waiter failed and the stream
        closed. Delegates that shield their own cleanup may still be finishing.
        """
        self._close()
        driver = self._driver
        if driver is not None:
            # The driver's cleanup runs as its task unwinds; wait for that, not for delegates.
            with trio.move_on_after(self._config.transport_timeout):
                await driver.stopped.wait()
        await trio.lowlevel.checkpoint()

    # ----------------------------------------------------------------------- internals

    def _require_capability(self, capability: str, what: str) -> None:
        if capability not in self.capabilities:
            raise UsageError(
                f"code-mode host does not support {what}: missing `{capability}` capability"
            )

    def _check_alive(self) -> None:
        if not self._lifecycle.alive:
            raise ConnectionFailed(self._lifecycle.reason())

    def _post(self, notice: Notice, *, wake: bool = True) -> None:
        """Hand the driver a notice without awaiting (safe from an except block)."""
        try:
            self._notice_send.send_nowait(notice)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # the driver is gone; the connection already failed
        if wake:
            # A full inbox means the driver is busy and will sweep the notices anyway.
            with contextlib.suppress(
                trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
            ):
                self._inbox_send.send_nowait(Wake())

    def _claim(self, slot: ReplySlot[Any]) -> None:
        self._post(Claim(slot), wake=False)

    def _terminate_nowait(self, session_id: str, cell_id: str) -> None:
        if self._lifecycle.alive:
            self._post(TerminateCommand(session_id, cell_id, None, None))

    def _fail_from_caller(self, reason: str) -> None:
        """Record ``reason`` first (so it wins), then have the driver fail everything."""
        self._lifecycle.record_failure(reason)
        logger.warning("code-mode host request exceeded its deadline: %s", reason)
        self._post(FailNotice(reason))
        # Cancel the connection's tasks now, as the reference client cancels its token: the
        # driver's cleanup runs as it unwinds, with this reason already recorded as the first.
        self._services_scope.cancel()

    async def _await_reply(self, slot: ReplySlot[T], *, limit: float, timeout_reason: str) -> T:
        """Wait for the answer to a request already handed to the driver, within ``limit``.

        Expiry fails the whole connection with ``timeout_reason``, as for :meth:`_call`.
        """
        with trio.move_on_after(limit):
            await slot.wait_done()
            return slot.result()
        self._fail_from_caller(timeout_reason)
        raise ConnectionFailed(self._lifecycle.reason())

    async def _call(
        self,
        command: Command,
        slot: ReplySlot[T],
        *,
        cancellable: bool,
        limit: float,
        timeout_reason: str,
    ) -> T:
        """Send a command to the driver and wait for its reply, within a deadline.

        The deadline covers queueing as well as the reply, so it also fires when the request
        never reached the host. Expiry fails the whole connection. If the caller is cancelled,
        the slot is abandoned and (for cancellable requests) the driver sends
        ``operation/cancel``.
        """
        self._check_alive()
        with trio.move_on_after(limit) as deadline:
            try:
                try:
                    await self._inbox_send.send(command)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    raise ConnectionFailed(self._lifecycle.reason()) from None
                await slot.wait_done()
            except BaseException:
                if deadline.cancel_called:
                    self._fail_from_caller(timeout_reason)
                slot.abandoned = True
                if cancellable:
                    self._post(Abandon(slot))  # type: ignore[arg-type]
                raise
        if deadline.cancelled_caught:
            raise ConnectionFailed(self._lifecycle.reason())
        return slot.result()

    def _close(self, reason: str = "code-mode host connection closed") -> None:
        self._lifecycle.record_failure(reason)
        self._services_scope.cancel()

    async def _run_services(
        self,
        stream: trio.abc.Stream,
        decoder: FrameDecoder,
        leftover: list[bytes],
        max_pending_delegates: int,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with self._services_scope:
                async with trio.open_nursery() as services:
                    delegate_nursery: trio.Nursery = await services.start(_delegate_nursery)
                    self._driver = Driver(
                        config=self._config,
                        capabilities=self.capabilities,
                        lifecycle=self._lifecycle,
                        inbox=self._inbox_recv,
                        notices=self._notice_recv,
                        outgoing=self._outgoing_send,
                        delegate_nursery=delegate_nursery,
                        max_pending_delegates=max_pending_delegates,
                        on_fail=self._services_scope.cancel,
                        post=self._post,
                    )
                    services.start_soon(self._drive)
                    services.start_soon(self._write_frames, stream)
                    services.start_soon(self._read_frames, stream, decoder, leftover)
                    task_status.started()
        except Exception as exc:
            # Our own tasks never raise by design; if one does, it is a bug. The driver has
            # failed the connection while unwinding; say loudly why, and keep the crash out of
            # the caller's nursery.
            logger.exception("code-mode connection task crashed")
            self._lifecycle.record_failure(f"code-mode connection task failed: {exc!r}")
        finally:
            try:
                await trio.aclose_forcefully(stream)
            finally:
                self._stopped.set()

    async def _drive(self) -> None:
        assert self._driver is not None
        with self._driver_scope:
            await self._driver.run()

    async def _write_frames(self, stream: trio.abc.Stream) -> None:
        counters = self._counters
        transcript = self._transcript
        receive = self._outgoing_recv
        try:
            async for frame in receive:
                batch = [frame]
                # Coalesce whatever else is queued into one write: fewer syscalls under load.
                while len(batch) < 256:
                    try:
                        batch.append(receive.receive_nowait())
                    except trio.WouldBlock:
                        break
                for item in batch:
                    counters.frames_sent += 1
                    counters.bytes_sent += len(item)
                    if transcript is not None:
                        transcript.record_sent(item[4:])
                await stream.send_all(b"".join(batch) if len(batch) > 1 else frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            # A broken pipe means the host is going away; its stdout is about to end too, and
            # the reader's EOF report (exit status, stderr) explains far more than EPIPE does.
            # Give it a moment to win, then report the write error if nothing else did.
            with trio.move_on_after(_EOF_DETAILS_TIMEOUT + 1):
                await self._lifecycle.wait_failed()
            cause = describe_stream_error(exc)
            self._post(FailNotice(f"failed to write code-mode host message: {cause}"))

    async def _read_frames(
        self, stream: trio.abc.Stream, decoder: FrameDecoder, leftover: list[bytes]
    ) -> None:
        try:
            for payload in leftover:
                await self._deliver(payload)
            while True:
                data = await stream.receive_some(_RECEIVE_SIZE)
                if not data:
                    # A host that dies while writing can leave a header without its payload;
                    # that is the same death as a clean EOF, so explain it the same way.
                    try:
                        decoder.eof()
                        truncated = None
                    except ProtocolViolation as exc:
                        truncated = str(exc)
                    details = await self._describe_eof()
                    await self._inbox_send.send(HostEof(details, truncated))
                    return
                self._counters.bytes_received += len(data)
                for payload in decoder.feed(data):
                    await self._deliver(payload)
        except ProtocolViolation as exc:
            details = await self._describe_eof()
            suffix = f" ({details})" if details else ""
            self._post(FailNotice(f"failed to read code-mode host message: {exc}{suffix}"))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the driver's inbox closed: the connection already failed
        except OSError as exc:
            cause = describe_stream_error(exc)
            self._post(FailNotice(f"failed to read code-mode host message: {cause}"))

    async def _deliver(self, payload: bytes) -> None:
        self._counters.frames_received += 1
        if self._transcript is not None:
            self._transcript.record_received(payload)
        message = decode_host_message(payload, strict=self._config.strict)
        event = HostEvent(message)
        try:
            # The common case skips a trip through the scheduler; receive_some() already
            # checkpoints once per read, so the reader still yields to other tasks.
            self._inbox_send.send_nowait(event)
        except trio.WouldBlock:
            await self._inbox_send.send(event)  # full inbox: backpressure to the host

    async def _describe_eof(self) -> str | None:
        return await _describe_end(self._eof_details)


async def _describe_end(eof_details: EofDetails | None) -> str | None:
    """Ask the transport why the stream ended, within a bound (it may wait for an exit)."""
    if eof_details is None:
        return None
    with trio.move_on_after(_EOF_DETAILS_TIMEOUT):
        return await eof_details()
    return None


async def _delegate_nursery(*, task_status: trio.TaskStatus[trio.Nursery]) -> None:
    """Own the delegate tasks: a nursery that lives until the connection's services stop."""
    async with trio.open_nursery() as nursery:
        task_status.started(nursery)
        await trio.sleep_forever()


async def _handshake(
    stream: trio.abc.Stream,
    *,
    config: ConnectionConfig,
    capabilities: Iterable[str],
    transcript: TranscriptWriter | None,
    eof_details: EofDetails | None,
) -> tuple[HandshakeResult, FrameDecoder, list[bytes]]:
    hello = build_hello(optional=capabilities)
    hello_payload = encode_client_message(hello)
    decoder = FrameDecoder()

    async def details() -> str:
        text = await _describe_end(eof_details)
        return f" ({text})" if text else ""

    payloads: list[bytes] = []
    with trio.move_on_after(config.handshake_timeout) as deadline:
        try:
            await stream.send_all(encode_frame(hello_payload))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionFailed(
                f"failed to write code-mode host hello: {describe_stream_error(exc)}"
                f"{await details()}"
            ) from None
        if transcript is not None:
            transcript.record_sent(hello_payload)
        while not payloads:
            try:
                data = await stream.receive_some(_RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionFailed(
                    f"failed to read code-mode host hello: {describe_stream_error(exc)}"
                    f"{await details()}"
                ) from None
            if not data:
                raise ConnectionFailed(f"code-mode host exited during handshake{await details()}")
            try:
                payloads = decoder.feed(data)
            except ProtocolViolation as exc:
                raise HandshakeError(
                    f"failed to read code-mode host hello: {exc}{await details()}"
                ) from None
    if deadline.cancelled_caught:
        raise ConnectionFailed("timed out negotiating with the code-mode host")
    first, leftover = payloads[0], payloads[1:]
    if transcript is not None:
        transcript.record_received(first)
    try:
        answer = decode_host_message(first, strict=config.strict)
    except ProtocolViolation as exc:
        raise HandshakeError(f"failed to read code-mode host hello: {exc}") from None
    return evaluate_handshake(hello, answer), decoder, leftover


@asynccontextmanager
async def open_connection(
    stream: trio.abc.Stream,
    *,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    transcript: str | PathLike[str] | None = None,
    eof_details: EofDetails | None = None,
) -> AsyncIterator[Connection]:
    """Handshake over ``stream`` and run a :class:`Connection` for the block.

    ``capabilities`` are offered as optional (none is required). ``transcript`` records every
    frame to a CBOR sequence file. ``eof_details`` describes why the stream ended (the process
    transport uses it for the host's exit status and stderr). The stream is closed on exit.

    Raises :class:`~codemode_trio.ConnectionFailed` if the host goes away or the 30 s
    handshake deadline passes, :class:`~codemode_trio.HandshakeRejected` if it refuses.
    """
    writer = TranscriptWriter(transcript) if transcript is not None else None
    try:
        try:
            handshake, decoder, leftover = await _handshake(
                stream,
                config=config,
                capabilities=capabilities,
                transcript=writer,
                eof_details=eof_details,
            )
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        connection = Connection(
            handshake=handshake, config=config, transcript=writer, eof_details=eof_details
        )
        max_delegates = config.max_pending_delegates
        if DELEGATE_CAPACITY_4096 in handshake.capabilities:
            max_delegates = max(max_delegates, 4096)
        async with unwrapping_nursery() as nursery:
            await nursery.start(connection._run_services, stream, decoder, leftover, max_delegates)
            try:
                yield connection
            finally:
                connection._close()
    finally:
        if writer is not None:
            writer.close()
