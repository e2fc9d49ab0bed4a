"""A Trio HTTP/2 client connection: python-hyper's sans-IO ``h2`` over a ``trio.abc.Stream``.

One reader task feeds received bytes to the ``h2`` state machine and routes its events to
:class:`~.http2_stream.Http2Stream` objects, waking only the consumer whose stream changed.
Whatever a change of ``h2`` state queues for the host is written at once, without awaiting,
when nothing else is queued and the byte stream takes it (TCP sockets on POSIX and
:class:`~.transport.pipes.PipeStream` can try a write without blocking); otherwise
it waits in an outbox that one writer task drains, in order. Either way no caller ever awaits a
write, so a caller cancelled in the middle of a call never leaves a half-written frame. An
optional keepalive task sends PINGs and fails the connection when one goes unanswered.

Flow control is real backpressure: received DATA is acknowledged to the peer (WINDOW_UPDATE)
only when a consumer takes it out of a stream's buffer, so a slow reader bounds what the host
may send it to the stream window. Outgoing DATA waits for the peer's window.

A stream slot (``SETTINGS_MAX_CONCURRENT_STREAMS``) and send window are owed to us by the host:
a request waits for either at most ``ConnectionConfig.transport_timeout`` without progress, and
then the connection fails naming what the host withheld, as a write that makes no progress for
that long fails it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import trio

from .._groups import unwrapping_nursery
from .._oserror import os_error_text
from ..client.config import DEFAULT_CONFIG, ConnectionConfig
from ..client.outbox import NonBlockingSend
from ..errors import ConnectionFailed
from .http2_stream import Header, Http2Stream, StreamReset, error_name

__all__ = [
    "Header",
    "Http2Connection",
    "Http2Settings",
    "Http2Stream",
    "StreamReset",
    "open_http2_connection",
]

_READ_SIZE = 65536
# Distinct request header lists whose HPACK block is kept (one per method, and timeouts).
_MAX_HEADER_BLOCKS = 256
# Teardown bounds: flushing a final GOAWAY, and closing the byte stream.
_CLOSE_DEADLINE_S = 1.0
# How long the description of an EOF may take (it may wait for a host process to exit).
_EOF_DETAILS_S = 2.0


@attrs.frozen
class Http2Settings:
    """Tuning of one HTTP/2 connection.

    - ``stream_window``: bytes the host may send on one stream before we consume them.
    - ``connection_window``: the same for all streams together.
    - ``keepalive_interval``: seconds between PINGs (``None``: no keepalive).
    - ``keepalive_timeout``: seconds a PING may go unanswered before the connection fails.
    """

    stream_window: int = 1024 * 1024
    connection_window: int = 16 * 1024 * 1024
    keepalive_interval: float | None = 30.0
    keepalive_timeout: float = 20.0


class _RequestHeaderEncoder(hpack.Encoder):
    """HPACK that never indexes what we send, so a header list's block is always the same.

    Every field is a never-indexed literal (or a static-table entry): the host's dynamic
    table is never touched, so the encoding of a header list does not depend on what was
    sent before, and the block of each list is computed once. Encoding the same seven
    request headers afresh for every tool call costs more than the rest of ``send_headers``;
    the price is some 85 bytes more per request. A table size change the host asks for is
    still signalled in the next block, as HPACK requires.
    """

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}

    def encode(self, headers: Iterable[Any], huffman: bool = True) -> bytes:
        key = tuple(headers)
        # A pending size change goes at the start of the next block: that one is not kept.
        resizing = self.header_table.resized
        if not resizing:
            block = self._blocks.get(key)
            if block is not None:
                return block
        # Sensitive fields are never added to the dynamic table (which so stays empty).
        block = super().encode([(name, value, True) for name, value in key], huffman)
        if not resizing and len(self._blocks) < _MAX_HEADER_BLOCKS:
            self._blocks[key] = block
        return block


class Http2Connection:
    """The client side of one HTTP/2 connection (see the module docstring)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        settings: Http2Settings,
        eof_details: Callable[[], Awaitable[str | None]] | None = None,
        config: ConnectionConfig = DEFAULT_CONFIG,
    ) -> None:
        self._stream = stream
        # How long the host may owe us progress: a write, a stream slot, send window.
        self._owed_within = config.transport_timeout
        # What the host owes each waiting request, oldest first (see ``withheld``).
        self._withheld: dict[object, str] = {}
        self._eof_details = eof_details
        self._remote_settings = trio.Event()
        self._settings = settings
        # Our own headers are well-formed by construction; skipping h2's per-request checks of
        # them is a measurable share of a tool call's CPU.
        h2_config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
            # Inbound normalization only joins cookie fields, which gRPC never sends.
            normalize_inbound_headers=False,
        )
        self._h2 = h2.connection.H2Connection(config=h2_config)
        self._h2.encoder = _RequestHeaderEncoder()
        self._streams: dict[int, Http2Stream] = {}
        self._failure: str | None = None
        self._failed = trio.Event()
        self._wake_writer = trio.Event()
        self._window_changed = trio.Event()
        self._pong = trio.Event()
        self._writer_done = trio.Event()
        # Bytes taken from h2 and not yet written, oldest first; the writer task drains them.
        self._outbox = bytearray()
        # True while the writer is in send_all: nobody else may write meanwhile.
        self._writing = False
        self._write_now = nonblocking_writer(stream)
        self._receive_some = reader_for(stream)
        self._ping_ids = itertools.count(1)
        self._goaway = False
        self.bytes_sent = 0
        self.bytes_received = 0
        self.pings_sent = 0

    @property
    def failure(self) -> str | None:
        """The first failure reason, or ``None`` while the connection works."""
        return self._failure

    @property
    def open_streams(self) -> int:
        """Streams not yet finished by their consumer."""
        return len(self._streams)

    @property
    def withheld(self) -> str | None:
        """What the host has owed a waiting request longest (stream slot, window), or ``None``.

        Worded as a failure reason: a deadline that expires meanwhile names it.
        """
        return next(iter(self._withheld.values()), None)

    async def wait_ready(self) -> None:
        """Wait for the host's first SETTINGS frame: it speaks HTTP/2 and accepts us.

        Raises :class:`~codemode_trio.ConnectionFailed` if the connection fails first.
        """
        self._check_usable()
        # The host's SETTINGS and every failure both set the window event.
        while not self._remote_settings.is_set() and self._failure is None:
            await self._window_changed.wait()
        self._check_usable()

    async def wait_failed(self) -> str:
        """Wait until the connection fails; return the reason."""
        await self._failed.wait()
        assert self._failure is not None
        return self._failure

    async def start_request(
        self, headers: Sequence[Header], body: bytes, *, end_stream: bool = True
    ) -> Http2Stream:
        """Open a stream with ``headers`` and send ``body``; return the stream to read from.

        If the caller is cancelled while the body is waiting for window, the stream is reset.
        """
        self._check_usable()
        limit = self._h2.remote_settings.max_concurrent_streams
        # Every stream h2 counts as open is one of ours: the count (which h2 finds by walking
        # all its streams) only matters near the limit.
        if len(self._streams) >= limit and self._h2.open_outbound_streams >= limit:
            deadline = trio.current_time() + self._owed_within
            while len(self._streams) >= limit and self._h2.open_outbound_streams >= limit:
                await self._wait_for_credit(
                    deadline,
                    f"code-mode host granted no HTTP/2 stream slot within {self._owed_within:g}"
                    f" s (it allows {limit} concurrent streams)",
                )
                self._check_usable()
                limit = self._h2.remote_settings.max_concurrent_streams
        stream_id = self._h2.get_next_available_stream_id()
        # Not written yet: the HEADERS go out together with the first DATA frame.
        self._h2.send_headers(stream_id, headers, end_stream=False)
        stream = Http2Stream(self, stream_id)
        self._streams[stream_id] = stream
        try:
            await self.send_data(stream, body, end_stream=end_stream)
        except BaseException:
            stream.reset()
            raise
        return stream

    def fail(self, reason: str) -> None:
        """Fail the connection with ``reason`` (the first reason wins); wakes every waiter."""
        if self._failure is not None:
            return
        self._failure = reason
        error = ConnectionFailed(reason)
        for stream in self._streams.values():
            stream.fail(error)
        self._failed.set()
        self._window_changed.set()
        self._wake_writer.set()

    def send_goaway(self) -> None:
        """Tell the host we are done (GOAWAY, NO_ERROR); never blocks."""
        if self._failure is None:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection()
                self._push()

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise ConnectionFailed(self._failure)
        if self._goaway:
            raise ConnectionFailed("code-mode host is closing the connection (GOAWAY)")

    def _push(self) -> None:
        # Called after every change of h2 state that may have queued frames.
        data = self._h2.data_to_send()
        if not data:
            return
        if not self._outbox and not self._writing and self._failure is None:
            write_now = self._write_now
            if write_now is not None:
                try:
                    written = write_now(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    # The writer task meets the same error and reports it.
                    written = 0
                self.bytes_sent += written
                if written == len(data):
                    return
                data = data[written:]
        self._outbox += data
        self._wake_writer.set()

    async def _wait_for_credit(self, deadline: float, withheld: str) -> None:
        # Until the window changes; at ``deadline`` the connection fails for ``withheld``.
        token = object()
        self._withheld[token] = withheld
        try:
            with trio.move_on_at(deadline) as scope:
                await self._window_changed.wait()
        finally:
            del self._withheld[token]
        if scope.cancelled_caught:
            self.fail(withheld)

    def _notify_window(self) -> None:
        self._window_changed.set()
        self._window_changed = trio.Event()

    async def send_data(self, stream: Http2Stream, data: bytes, *, end_stream: bool) -> None:
        """Send DATA on ``stream``, waiting (bounded, see the module) for the host's window."""
        view = memoryview(data)
        stream_id = stream.stream_id
        # Set while no window is left: reset whenever the host grants some.
        deadline: float | None = None
        while True:
            self._check_usable()
            stream.check_failed()
            if not view:
                if end_stream:
                    self._h2.end_stream(stream_id)
                self._push()
                return
            try:
                window = self._h2.local_flow_control_window(stream_id)
            except h2.exceptions.StreamClosedError:
                raise StreamReset(h2.errors.ErrorCodes.STREAM_CLOSED) from None
            size = min(window, self._h2.max_outbound_frame_size, len(view))
            if size <= 0:
                self._push()  # what is queued (the request's HEADERS) goes out meanwhile
                if deadline is None:
                    deadline = trio.current_time() + self._owed_within
                await self._wait_for_credit(
                    deadline,
                    "code-mode host granted no HTTP/2 flow-control window within "
                    f"{self._owed_within:g} s ({len(view)} request bytes waiting)",
                )
                continue
            deadline = None
            # A small message goes as it is, without a copy.
            chunk = data if size == len(data) else view[:size].tobytes()
            view = view[size:]
            self._h2.send_data(stream_id, chunk, end_stream=end_stream and not view)
            if not view:
                self._push()
                return

    def acknowledge(self, stream_id: int, flow_length: int) -> None:
        """Give consumed bytes back to the host's window (WINDOW_UPDATE when h2 says so)."""
        if flow_length and self._failure is None:
            # A stream that is gone raises, but h2 has credited the connection window first.
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.acknowledge_received_data(flow_length, stream_id)
            # h2 only queues a WINDOW_UPDATE once half a window was consumed.
            self._push()

    def forget(self, stream: Http2Stream, *, error_code: int | None) -> None:
        """Stop routing to ``stream``; reset it with ``error_code`` unless that is ``None``."""
        self._streams.pop(stream.stream_id, None)
        pending = stream.drop_buffered()
        if self._failure is not None:
            return
        if error_code is not None:
            # Closed streams, and every stream once GOAWAY was received, take no more frames.
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.reset_stream(stream.stream_id, error_code=error_code)
        if pending:
            self.acknowledge(stream.stream_id, pending)
        self._push()

    def _handle(self, event: h2.events.Event) -> None:
        # Dispatch on the concrete class: the events the client cares about.
        if isinstance(event, h2.events.DataReceived):
            flow_length = event.flow_controlled_length or 0
            if (stream := self._streams.get(event.stream_id or 0)) is not None:
                stream.data_arrived(event.data or b"", flow_length)
            else:
                # Data for a stream we already abandoned: give its window straight back.
                self.acknowledge(event.stream_id or 0, flow_length)
        elif isinstance(event, h2.events.ResponseReceived):
            if (stream := self._streams.get(event.stream_id or 0)) is not None:
                stream.headers_arrived(list(event.headers or ()))
        elif isinstance(event, h2.events.TrailersReceived):
            if (stream := self._streams.get(event.stream_id or 0)) is not None:
                stream.trailers_arrived(list(event.headers or ()))
        elif isinstance(event, h2.events.StreamEnded):
            if (stream := self._streams.get(event.stream_id or 0)) is not None:
                stream.end_arrived()
        elif isinstance(event, h2.events.StreamReset):
            if (stream := self._streams.get(event.stream_id or 0)) is not None:
                stream.fail(StreamReset(int(event.error_code or 0)))
            self._notify_window()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._remote_settings.set()
            self._notify_window()
        elif isinstance(event, h2.events.WindowUpdated):
            self._notify_window()
        elif isinstance(event, h2.events.PingAckReceived):
            self._pong.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._on_goaway(event)

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        self._goaway = True
        last = event.last_stream_id or 0
        for stream_id, stream in list(self._streams.items()):
            if stream_id > last:
                # Never processed by the host: the caller may safely retry elsewhere.
                stream.fail(StreamReset(h2.errors.ErrorCodes.REFUSED_STREAM, refused=True))
        code = int(event.error_code or 0)
        if code != h2.errors.ErrorCodes.NO_ERROR:
            detail = (event.additional_data or b"").decode("utf-8", "replace")
            suffix = f": {detail}" if detail else ""
            self.fail(f"code-mode host closed the HTTP/2 connection ({error_name(code)}){suffix}")
        self._notify_window()

    async def _reader(self) -> None:
        while self._failure is None:
            try:
                data = await self._receive_some(_READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
                text = os_error_text(cause) if isinstance(cause, OSError) else str(cause)
                self.fail(f"failed to read code-mode host message: {text}")
                return
            if not data:
                details = None
                if self._eof_details is not None:
                    with trio.move_on_after(_EOF_DETAILS_S):
                        details = await self._eof_details()
                suffix = f" ({details})" if details else ""
                self.fail(f"code-mode host closed the connection{suffix}")
                return
            self.bytes_received += len(data)
            try:
                events = self._h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                self.fail(f"code-mode host broke the HTTP/2 protocol: {exc}")
                return
            for event in events:
                self._handle(event)
            # One write for everything the batch queued (SETTINGS and PING acks, resets).
            self._push()

    async def _send(self, data: bytes) -> bool:
        # Only the writer task writes with send_all; False once the stream is broken.
        try:
            with trio.move_on_after(self._owed_within) as scope:
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
            text = os_error_text(cause) if isinstance(cause, OSError) else str(cause)
            self.fail(f"failed to write code-mode host message: {text}")
            return False
        if scope.cancelled_caught:
            # A write that made no progress for this long: the host stopped reading.
            self.fail("failed to write code-mode host message: timed out")
            return False
        self.bytes_sent += len(data)
        return True

    async def _writer(self) -> None:
        try:
            while True:
                if self._outbox:
                    data = bytes(self._outbox)
                    self._outbox.clear()
                    self._writing = True
                    try:
                        sent = await self._send(data)
                    finally:
                        self._writing = False
                    if not sent:
                        self._outbox.clear()
                        return
                    continue
                if self._failure is not None:
                    return
                self._wake_writer = trio.Event()
                await self._wake_writer.wait()
        finally:
            self._writer_done.set()

    async def _keepalive(self, interval: float, ack_within: float) -> None:
        while self._failure is None:
            await trio.sleep(interval)
            self._pong = trio.Event()
            try:
                self._h2.ping(next(self._ping_ids).to_bytes(8, "big"))
            except h2.exceptions.ProtocolError:
                return  # we sent GOAWAY: the connection is winding down
            self.pings_sent += 1
            self._push()
            with trio.move_on_after(ack_within) as scope:
                await self._pong.wait()
            if scope.cancelled_caught:
                self.fail(f"code-mode host did not answer an HTTP/2 PING within {ack_within:g} s")

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # The connection's own tasks live in their own nursery, so a failure stops them
        # without cancelling the code that uses the connection.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._reader)
            nursery.start_soon(self._writer)
            interval = self._settings.keepalive_interval
            if interval is not None:
                nursery.start_soon(self._keepalive, interval, self._settings.keepalive_timeout)
            task_status.started()
            await self._failed.wait()
            # Let the writer flush what is queued (a GOAWAY, resets), then stop the rest.
            with trio.move_on_after(_CLOSE_DEADLINE_S):
                await self._writer_done.wait()
            nursery.cancel_scope.cancel()

    def _initiate(self) -> None:
        settings = self._settings
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: settings.stream_window,
            },
        )
        self._h2.initiate_connection()
        extra = settings.connection_window - 65535
        if extra > 0:
            self._h2.increment_flow_control_window(extra)
        self._push()


def nonblocking_writer(stream: trio.abc.Stream) -> Callable[[bytes], int] | None:
    """A function writing what ``stream`` takes at once (``0`` if full), if it can have one.

    Trio's ``send_all`` yields to the scheduler even when the bytes went out at once: one
    scheduler pass on the critical path of every call (see the module docstring).
    """
    if isinstance(stream, NonBlockingSend):
        return stream.send_nowait
    if isinstance(stream, trio.SocketStream) and sys.platform != "win32":
        sock = stream.socket

        def send_nowait(data: bytes) -> int:
            fd = sock.fileno()  # looked up each time: a closed socket reads -1
            if fd < 0:
                raise trio.ClosedResourceError("socket was already closed")
            try:
                return os.write(fd, data)
            except BlockingIOError:
                return 0

        return send_nowait
    return None


def reader_for(stream: trio.abc.Stream) -> Callable[[int], Awaitable[bytes | bytearray]]:
    """``stream.receive_some``, or for a TCP socket (on POSIX) one that waits first.

    Trio's sockets try the read before waiting, so every time the reader catches up it pays
    for a failed read (a syscall and an exception, through several context managers). The
    reader only reads again once it handled everything, when usually nothing is there yet.
    """
    if not isinstance(stream, trio.SocketStream) or sys.platform == "win32":
        return stream.receive_some
    sock = stream.socket

    async def receive_some(max_bytes: int) -> bytes:
        while True:
            # The wait is the checkpoint; closing the socket wakes it (ClosedResourceError).
            await trio.lowlevel.wait_readable(sock)
            fd = sock.fileno()  # looked up each time: a closed socket reads -1
            if fd < 0:
                raise trio.ClosedResourceError("socket was already closed")
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue

    return receive_some


@asynccontextmanager
async def open_http2_connection(
    stream: trio.abc.Stream,
    settings: Http2Settings | None = None,
    *,
    eof_details: Callable[[], Awaitable[str | None]] | None = None,
    config: ConnectionConfig = DEFAULT_CONFIG,
) -> AsyncIterator[Http2Connection]:
    """Run an HTTP/2 client connection over ``stream`` for the block.

    A failure does not cancel the block: calls raise :class:`~codemode_trio.ConnectionFailed`.
    Leaving the block sends GOAWAY (best effort, for at most a second), stops the tasks and
    closes ``stream``. ``eof_details`` explains an end of stream (a host process's exit status);
    ``config.transport_timeout`` bounds how long the host may owe us progress (module docstring).
    """
    connection = Http2Connection(stream, settings or Http2Settings(), eof_details, config)
    connection._initiate()
    try:
        # A lone error of the block (the caller's own) escapes as itself, not in a group.
        async with unwrapping_nursery() as nursery:
            await nursery.start(connection._run)
            try:
                yield connection
            finally:
                connection.send_goaway()
                connection.fail("code-mode host connection closed")
    finally:
        with trio.CancelScope(shield=True, deadline=trio.current_time() + _CLOSE_DEADLINE_S):
            await stream.aclose()
