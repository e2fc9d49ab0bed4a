"""The protocol over a WebSocket: every length-prefixed frame is one binary message.

:class:`WebSocketFrameStream` turns a WebSocket into the byte stream the client and the
reference host run on, in either role: what is sent is cut at protocol frame boundaries and
each frame goes out as one binary message; each message received must be binary (a text
message is a protocol error, in the reference client's words); a close is the end of the
stream. A client opens its lanes with :func:`connect_lane` (the bulk lane of
``dual-websocket-v1``, see :mod:`codemode_trio.protocol.lanes`, at :func:`bulk_websocket_url`);
the reference host serves ``ws://`` with :func:`serve_websocket` in
:mod:`codemode_trio.host.listen`, reading each request with :func:`read_request`, deciding on
it with :func:`codemode_trio.host.admission.admit`, and upgrading it with
:meth:`WebSocketRequest.accept`.

The stream reads and writes its socket itself (framing from
:mod:`~codemode_trio.transport.wsframes`, the upgrade from :mod:`h11`): no reader task and no
channel between the socket and the protocol, and :meth:`WebSocketFrameStream.send_nowait` lets
the client's outbox write an answer the moment it is produced, as on stdio. A message costs
one ``recv`` or one ``send`` and a few microseconds of framing.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import http
import os
import ssl
import struct
import urllib.parse
from collections import deque
from collections.abc import Iterable

import attrs
import h11
import trio

from .._oserror import describe_stream_error, os_error_text
from ..errors import ConnectionFailed
from ..protocol.framing import HEADER_BYTES, MAX_FRAME_BYTES
from .streams import StreamFailure
from .wsframes import (
    CLOSE_POLICY_VIOLATION,
    CLOSE_PROTOCOL_ERROR,
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameReader,
    WebSocketFramingError,
    accept_key,
    encode_frame,
    header_has_token,
    new_key,
    upgrade_refusal,
)

__all__ = [
    "MAX_MESSAGE_BYTES",
    "WebSocketFrameStream",
    "WebSocketRejected",
    "WebSocketRequest",
    "accept_websocket",
    "bulk_websocket_url",
    "connect_lane",
    "connect_websocket",
    "read_request",
]

#: A frame and its length prefix: the largest message either side may send.
MAX_MESSAGE_BYTES = MAX_FRAME_BYTES + HEADER_BYTES
#: The reference client's connect deadline.
CONNECT_TIMEOUT_S = 10.0
#: How long a server waits for a client's upgrade request.
UPGRADE_TIMEOUT_S = 10.0
#: How long a server waits for the rest of a message a client began (a frame cut short, or a
#: fragmented message not finished): no byte for this long and the connection is closed with
#: status 1008. Time without progress, not a deadline, so a slow link may take its time.
UNFINISHED_MESSAGE_TIMEOUT_S = 30.0

#: The client's words for its peer; the host's are ``"code-mode websocket"`` (0.150).
HOST_LABEL = "code-mode host websocket"
CLIENT_LABEL = "code-mode websocket"

_HEADER = struct.Struct("<I")
_RECEIVE_SIZE = 256 * 1024
_NORMAL_CLOSURE = struct.pack("!H", 1000)
_CLOSE_UNSUPPORTED_DATA = 1003
# How long closing waits for the socket to take the close frame (TLS, or a full socket).
_CLOSE_WRITE_S = 1.0


class WebSocketFrameStream(trio.abc.Stream):
    """A :class:`trio.abc.Stream` of protocol frames over one upgraded WebSocket connection.

    ``stream`` is the connection after the upgrade, ``initial`` whatever arrived behind the
    upgrade's last header. ``client`` selects the role (a client masks what it sends and
    reads unmasked frames). ``label`` names the peer in error texts. With
    ``unfinished_timeout`` (seconds), a message the peer began and sends nothing more of for
    that long fails the stream.

    A peer that breaks the rules (a message too big or in too many fragments, see
    :class:`~codemode_trio.transport.wsframes.FrameReader`, a text message, a bad frame) gets
    a close frame with the status that says why before the stream fails with
    :class:`~codemode_trio.transport.streams.StreamFailure`.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        client: bool,
        initial: bytes = b"",
        label: str = HOST_LABEL,
        unfinished_timeout: float | None = None,
    ) -> None:
        self._stream = stream
        self._mask = client
        self._label = label
        self._reader = FrameReader(masked=not client, max_message=MAX_MESSAGE_BYTES)
        self._unfinished_timeout = unfinished_timeout
        self._initial = initial
        self._messages: deque[bytes] = deque()
        # The rest of a message larger than a receive_some asked for: a view, so that taking a
        # piece of a 64 MiB message does not copy what is left of it each time.
        self._incoming: bytes | memoryview = b""
        self._eof = False
        # The direct write path needs a plain socket (not TLS) to write to without awaiting.
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._pending = bytearray()  # bytes of a protocol frame not yet complete
        # A message send_nowait could only write in part: the rest of its wire bytes, and
        # how many protocol bytes the next send_all brings again for it (see send_nowait).
        self._unsent = b""
        self._skip = 0
        self._sending = False
        self._closed = False
        # Writes to the socket, by send_all or by the reader answering a ping or a close. Its
        # holder also writes every control frame queued while it holds it, at a message
        # boundary, before letting go: so a queued pong or close is never left behind.
        self._write_lock = trio.StrictFIFOLock()
        self._pong: bytes | None = None  # only the latest ping needs its answer (RFC 6455 5.5.3)
        self._close: bytes | None = None
        self._close_sent = False  # a close frame is queued or sent: no data frame may follow

    def _encode(self, data: bytes | bytearray | memoryview) -> list[tuple[bytes, int]]:
        """One binary message per complete protocol frame: ``(wire bytes, frame bytes)``."""
        pending = self._pending
        if not pending and len(data) >= HEADER_BYTES:
            (length,) = _HEADER.unpack_from(data)
            if length + HEADER_BYTES == len(data):  # the usual write: exactly one frame
                return [(encode_frame(OP_BINARY, bytes(data), mask=self._mask), len(data))]
        pending += data
        out = []
        start = 0
        while len(pending) - start >= HEADER_BYTES:
            (length,) = _HEADER.unpack_from(pending, start)
            end = start + HEADER_BYTES + length
            if end > len(pending):
                break
            frame = bytes(pending[start:end])
            out.append((encode_frame(OP_BINARY, frame, mask=self._mask), len(frame)))
            start = end
        del pending[:start]
        return out

    def _check_writable(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the websocket was already closed")
        if self._close_sent:
            raise trio.BrokenResourceError(
                f"failed to write {self._label} message: the websocket is closing"
            )

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send every complete frame in ``data`` (with what came before it) as one message."""
        await self._send(data, as_is=False)

    async def send_message(self, data: bytes) -> None:
        """Send ``data`` as one binary message as it is, whole frames or not.

        For a conformance client that writes what a broken one would (half a frame, a bad
        length prefix): :meth:`send_all` holds bytes back until they make a whole frame.
        """
        await self._send(data, as_is=True)

    async def _send(self, data: bytes | bytearray | memoryview, *, as_is: bool) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is using this stream for send")
        self._check_writable()
        self._sending = True
        try:
            async with self._write_lock:
                if as_is:
                    messages = [encode_frame(OP_BINARY, bytes(data), mask=self._mask)]
                else:
                    if self._skip:
                        # These bytes are the message send_nowait started (its rest: _unsent).
                        skip = min(self._skip, len(data))
                        self._skip -= skip
                        data = memoryview(data)[skip:]
                    messages = [message for message, _ in self._encode(data)]
                # The rest of an earlier message first, then the control frames waiting for a
                # message boundary, then the new messages.
                wire = b"".join([self._unsent, self._take_control(), *messages])
                self._unsent = b""
                if not wire:
                    await trio.lowlevel.checkpoint()
                    return
                try:
                    await self._write_holding_lock(wire)
                except (trio.BrokenResourceError, OSError) as exc:
                    raise trio.BrokenResourceError(
                        f"failed to write {self._label} message: {describe_stream_error(exc)}"
                    ) from None
        finally:
            self._sending = False

    async def _write_holding_lock(self, wire: bytes) -> None:
        # Writes ``wire``, then whatever control frames were queued meanwhile.
        while wire:
            await self._stream.send_all(wire)
            wire = self._take_control()

    def send_nowait(self, data: bytes) -> int:
        """Write the messages for ``data`` if the socket takes them now; return bytes taken.

        For writers that must not await (:class:`~codemode_trio.client.outbox.Outbox`): ``0``
        when the socket is full or busy (the caller then hands ``data`` to :meth:`send_all`).
        A message written only in part counts as not taken, so the caller's :meth:`send_all`
        (the only path that can wait for room) brings its bytes again; the stream keeps the
        message's unwritten rest and skips those bytes there, so nothing is sent twice.
        """
        self._check_writable()
        sock = self._socket
        if (
            self._sending
            or self._write_lock.locked()
            or self._unsent
            or self._skip
            or self._pending
            or self._pong is not None
            or sock is None
        ):
            return 0
        messages = self._encode(data)
        wire = messages[0][0] if len(messages) == 1 else b"".join(m for m, _ in messages)
        try:
            written = os.write(sock.fileno(), wire)
        except BlockingIOError:
            written = 0
        except OSError as exc:
            if exc.errno == errno.EBADF:
                raise trio.ClosedResourceError("the websocket was already closed") from None
            raise trio.BrokenResourceError(
                f"failed to write {self._label} message: {os_error_text(exc)}"
            ) from None
        if written == len(wire):
            return len(data)
        # Part of it went out: count the messages that are whole on the wire.
        self._pending.clear()  # a trailing partial frame comes back with the rest
        taken = 0
        position = 0
        for message, size in messages:
            if position + len(message) <= written:
                taken += size
                position += len(message)
                continue
            if position < written:
                self._unsent = message[written - position :]
                self._skip = size
            break
        return taken

    async def wait_send_all_might_not_block(self) -> None:
        """Wait until the socket has room."""
        await self._stream.wait_send_all_might_not_block()

    def _take_control(self) -> bytes:
        """The control frames waiting for a message boundary, off the queue."""
        if self._pong is None and self._close is None:
            return b""
        wire = (self._pong or b"") + (self._close or b"")
        self._pong = self._close = None
        return wire

    def _queue_control(self, opcode: int, payload: bytes) -> None:
        """Queue a pong or a close; write it now if the socket takes it without waiting."""
        if self._close_sent:
            return  # nothing may follow a close
        frame = encode_frame(opcode, payload, mask=self._mask)
        if opcode == OP_CLOSE:
            self._close = frame
            self._close_sent = True
        else:
            self._pong = frame
        sock = self._socket
        if sock is None or self._write_lock.locked():
            return  # the lock's holder writes it (see _write_holding_lock), or _flush_control
        wire = self._unsent + self._take_control()
        try:
            written = os.write(sock.fileno(), wire)
        except BlockingIOError:
            written = 0
        except OSError:
            written = len(wire)  # the socket is gone: the reader sees the end
        # Whatever the socket did not take must go next, before any other message; a rest of
        # a message send_nowait began keeps its skip count (its bytes come back to send_all).
        self._unsent = wire[written:]

    def _control_owed(self) -> bool:
        return self._pong is not None or self._close is not None or bool(self._unsent)

    async def _flush_control(self) -> None:
        """Write queued control frames (and any rest ahead of them) when nobody else writes."""
        if self._write_lock.locked() or not self._control_owed():
            return  # the holder writes them before it lets go of the lock
        async with self._write_lock:
            wire = self._unsent + self._take_control()
            self._unsent = b""
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await self._write_holding_lock(wire)  # on failure the reader sees the end

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes of the peer's frames; ``b""`` once the WebSocket is closed."""
        while not self._incoming:
            if self._messages:
                self._incoming = self._messages.popleft()
                break
            if self._eof:
                await trio.lowlevel.checkpoint()
                return b""
            if self._initial:
                data, self._initial = self._initial, b""
            else:
                data = await self._read()
            if not data:
                self._eof = True
                continue
            failure: StreamFailure | None = None
            try:
                self._receive(data)
            except StreamFailure as exc:
                failure = exc
            if failure is not None:
                # The close frame _receive queued goes out before the stream is given up.
                with trio.move_on_after(_CLOSE_WRITE_S):
                    await self._flush_control()
                raise failure
            if self._control_owed():
                # A pong or close the socket did not take at once: the reader sends it, as
                # nobody else may be writing (a writer holding the lock sends it instead).
                await self._flush_control()
        incoming = self._incoming
        if max_bytes is None or max_bytes >= len(incoming):
            self._incoming = b""
            return bytes(incoming) if isinstance(incoming, memoryview) else incoming
        view = incoming if isinstance(incoming, memoryview) else memoryview(incoming)
        self._incoming = view[max_bytes:]
        return bytes(view[:max_bytes])

    async def _read(self) -> bytes:
        """The next bytes from the socket (``b""`` at its end), bounded in time mid-message."""
        timeout = self._unfinished_timeout
        try:
            if timeout is None or not self._reader.unfinished:
                return bytes(await self._stream.receive_some(_RECEIVE_SIZE))
            with trio.move_on_after(timeout):
                return bytes(await self._stream.receive_some(_RECEIVE_SIZE))
        except (trio.BrokenResourceError, OSError) as exc:
            raise trio.BrokenResourceError(
                f"failed to read {self._label} message: {describe_stream_error(exc)}"
            ) from None
        failure = self._bad_frame(
            f"nothing more of a message for {timeout:g} s", CLOSE_POLICY_VIOLATION
        )
        with trio.move_on_after(_CLOSE_WRITE_S):
            await self._flush_control()
        raise failure

    def _fail(self, text: str, code: int) -> StreamFailure:
        """Queue a close frame with status ``code``; the failure to raise, saying ``text``."""
        self._eof = True  # nothing the peer sends counts any more
        self._queue_control(OP_CLOSE, struct.pack("!H", code))
        return StreamFailure(text)

    def _bad_frame(self, what: str, code: int = CLOSE_PROTOCOL_ERROR) -> StreamFailure:
        # _fail for a read: the peer sent ``what``.
        return self._fail(f"failed to read {self._label} message: {what}", code)

    def _receive(self, data: bytes) -> None:
        try:
            frames = self._reader.feed(data)
        except WebSocketFramingError as exc:
            raise self._bad_frame(str(exc), exc.code) from None
        for opcode, payload in frames:
            if self._eof:
                return  # nothing counts after a close
            if opcode == OP_BINARY:
                self._messages.append(payload)
            elif opcode == OP_TEXT:
                raise self._fail(
                    f"{self._label} messages must be binary framed messages",
                    _CLOSE_UNSUPPORTED_DATA,
                )
            elif opcode == OP_CLOSE:
                reply = self._close_reply(payload)
                self._eof = True
                self._queue_control(OP_CLOSE, reply)
            elif opcode == OP_PING:
                self._queue_control(OP_PONG, payload)
            # A pong needs nothing.

    def _close_reply(self, payload: bytes) -> bytes:
        """Check a close frame's body (RFC 6455 7.1.5, 7.4); return the status to echo."""
        if not payload:
            return b""
        if len(payload) == 1:
            raise self._bad_frame("a 1-byte close frame body")
        (code,) = struct.unpack_from("!H", payload)
        if not (1000 <= code <= 1014 and code not in (1004, 1005, 1006)) and not (
            3000 <= code <= 4999
        ):
            raise self._bad_frame(f"close status {code} is not allowed")
        try:
            payload[2:].decode("utf-8")
        except UnicodeDecodeError:
            raise self._bad_frame("a close reason that is not UTF-8") from None
        return payload[:2]

    async def aclose(self) -> None:
        """Say goodbye with a close frame (waiting at most a moment for room), then close."""
        try:
            if not self._closed:
                self._queue_control(OP_CLOSE, _NORMAL_CLOSURE)
                self._closed = True
                with trio.move_on_after(_CLOSE_WRITE_S):
                    await self._flush_control()
        finally:
            await self._stream.aclose()


class WebSocketRejected(Exception):
    """The server answered the upgrade with a plain HTTP status."""

    def __init__(self, status: int) -> None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        super().__init__(f"HTTP error: {status} {phrase}".rstrip())
        self.status = status


async def connect_websocket(
    url: str, *, label: str = HOST_LABEL, ssl_context: ssl.SSLContext | None = None
) -> WebSocketFrameStream:
    """Open ``url`` (``ws://`` or ``wss://``) and upgrade it; the caller sets the deadline.

    ``wss://`` verifies the server with ``ssl_context`` (default: the system's trust store).

    Raises :class:`WebSocketRejected` for a refused upgrade, :class:`ValueError` for a URL it
    cannot use, and :class:`OSError` / :class:`trio.BrokenResourceError` for network failures.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"`{_without_query(url)}` is not a ws:// or wss:// URL")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    stream: trio.abc.Stream
    if secure:
        stream = await trio.open_ssl_over_tcp_stream(
            parts.hostname, port, ssl_context=ssl_context or ssl.create_default_context()
        )
    else:
        stream = await trio.open_tcp_stream(parts.hostname, port)
    try:
        key = new_key()
        http11 = h11.Connection(h11.CLIENT)
        request = h11.Request(
            method="GET",
            # The path and the query: a listener's ``?token=`` must reach it.
            target=urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, "")),
            headers=[
                ("Host", parts.netloc.rpartition("@")[2]),
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", key),
                ("Sec-WebSocket-Version", "13"),
            ],
        )
        await stream.send_all(http11.send(request) + (http11.send(h11.EndOfMessage()) or b""))
        while True:
            event = http11.next_event()
            if event is h11.NEED_DATA:
                http11.receive_data(bytes(await stream.receive_some(65536)))
                continue
            if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                headers = {name.lower(): value for name, value in event.headers}
                if headers.get(b"upgrade", b"").lower() != b"websocket" or not header_has_token(
                    headers.get(b"connection", b""), b"upgrade"
                ):
                    raise ValueError("the server's 101 response is not a WebSocket upgrade")
                if headers.get(b"sec-websocket-accept", b"").decode() != accept_key(key):
                    raise ValueError("the server's Sec-WebSocket-Accept does not match")
                if headers.get(b"sec-websocket-extensions"):
                    raise ValueError("the server negotiated an extension nobody asked for")
                initial, _ = http11.trailing_data
                return WebSocketFrameStream(stream, client=True, initial=initial, label=label)
            if isinstance(event, h11.Response | h11.InformationalResponse):
                raise WebSocketRejected(event.status_code)
            if isinstance(event, h11.ConnectionClosed):
                raise trio.BrokenResourceError("the server closed the connection")
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise


@attrs.define
class WebSocketRequest:
    """A client's HTTP request, to be upgraded with :meth:`accept` or answered with :meth:`respond`.

    ``head`` is the request as :mod:`h11` parsed it (method, target, headers, version): what
    :func:`codemode_trio.host.admission.admit` decides on.
    """

    stream: trio.abc.Stream
    head: h11.Request
    _http11: h11.Connection

    @property
    def target(self) -> str:
        """The request target: path and query (``/bulk/TOKEN?token=...``)."""
        return self.head.target.decode("latin-1")

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.partition("?")[0]

    async def accept(self, *, unfinished_timeout: float | None = None) -> WebSocketFrameStream:
        """Complete the upgrade; return the server's side of the WebSocket.

        The request must be an upgrade (:func:`~codemode_trio.transport.wsframes.upgrade_refusal`
        found nothing wrong). ``unfinished_timeout`` as for :class:`WebSocketFrameStream`.
        """
        initial = await self.switch()
        return WebSocketFrameStream(
            self.stream,
            client=False,
            initial=initial,
            label=CLIENT_LABEL,
            unfinished_timeout=unfinished_timeout,
        )

    async def switch(self) -> bytes:
        """Send the 101 answer; return the bytes the client sent behind its request.

        For a listener that hands the socket on: whoever serves it wraps it, with those bytes
        as ``initial``, in a server-side :class:`WebSocketFrameStream`. :meth:`accept` does both.
        """
        key = next(value for name, value in self.head.headers if name == b"sec-websocket-key")
        response = h11.InformationalResponse(
            status_code=101,
            reason=b"Switching Protocols",
            headers=[
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Accept", accept_key(key.strip().decode("ascii"))),
            ],
        )
        await self.stream.send_all(self._http11.send(response) or b"")
        initial, _ = self._http11.trailing_data
        return bytes(initial)

    async def respond(
        self, status: int, headers: Iterable[tuple[str, str]] = (), body: bytes = b""
    ) -> None:
        """Answer with HTTP ``status``, ``headers`` and ``body``, then close the connection.

        To a ``HEAD`` request the body is left out, its length kept (RFC 9110 9.3.2).
        """
        await _respond(
            self.stream, self._http11, status, headers, body, head=self.head.method == b"HEAD"
        )

    async def reject(self, status: int, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Answer with HTTP ``status`` (and ``headers``), no body, and close the connection."""
        await self.respond(status, headers)


async def _respond(
    stream: trio.abc.Stream,
    http11: h11.Connection,
    status: int,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    *,
    head: bool = False,
) -> None:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    response = h11.Response(
        status_code=status,
        reason=reason,
        headers=[
            *headers,
            ("Content-Length", str(len(body))),
            ("Date", email.utils.formatdate(usegmt=True)),
            # One request per connection: say so, so a keep-alive client does not wait.
            ("Connection", "close"),
        ],
    )
    with contextlib.suppress(
        trio.BrokenResourceError, trio.ClosedResourceError, OSError, h11.LocalProtocolError
    ):
        await stream.send_all(
            (http11.send(response) or b"")
            + (http11.send(h11.Data(data=body)) or b"" if body and not head else b"")
            + (http11.send(h11.EndOfMessage()) or b"")
        )
    await trio.aclose_forcefully(stream)


async def read_request(stream: trio.abc.Stream) -> WebSocketRequest | None:
    """Read a client's request head from ``stream``, to be admitted or refused.

    Returns ``None`` (after answering 400 or giving up, and closing the stream) when what
    arrives is not an HTTP request or nothing arrives within :data:`UPGRADE_TIMEOUT_S`.
    """
    http11 = h11.Connection(h11.SERVER)
    request: h11.Request | None = None
    with trio.move_on_after(UPGRADE_TIMEOUT_S):
        try:
            while True:
                event = http11.next_event()
                if event is h11.NEED_DATA:
                    http11.receive_data(bytes(await stream.receive_some(65536)))
                elif isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
        except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            request = None
    if request is None:
        if http11.their_state is h11.ERROR and http11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            # What arrived is not HTTP/1.1 (or lacks its mandatory Host): h11 lets us say so.
            await _respond(stream, http11, 400, (), b"")
        else:
            await trio.aclose_forcefully(stream)
        return None
    if http11.our_state is not h11.SEND_RESPONSE:
        await trio.aclose_forcefully(stream)
        return None
    return WebSocketRequest(stream, request, http11)


async def accept_websocket(stream: trio.abc.Stream) -> WebSocketRequest | None:
    """Read a client's upgrade request from ``stream`` (no admission: anyone is let in).

    Returns ``None`` (after answering 400, 405 or 426 or giving up, and closing the stream)
    when what arrives is not a WebSocket upgrade or nothing arrives within
    :data:`UPGRADE_TIMEOUT_S`.
    """
    request = await read_request(stream)
    if request is None:
        return None
    refusal = upgrade_refusal(request.head.method, request.head.headers)
    if refusal is not None:
        status, headers, body = refusal
        await request.respond(status, headers, body)
        return None
    return request


def bulk_websocket_url(url: str, token: str) -> str:
    """The bulk lane's URL: ``url`` with ``/bulk/{token}`` appended to its path, query kept.

    Raises :class:`~codemode_trio.ConnectionFailed` with the reference client's texts when it
    cannot be built.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parses the port, so a bad one is reported here
    except ValueError as exc:
        raise ConnectionFailed(
            f"failed to build code-mode host bulk websocket URL: {_describe(exc)}"
        ) from None
    if not parts.netloc:
        raise ConnectionFailed(
            "failed to build code-mode host bulk websocket path: "
            f"`{_without_query(url)}` cannot be a base URL"
        )
    segment = urllib.parse.quote(token, safe="")
    return urllib.parse.urlunsplit(
        parts._replace(path=f"{parts.path.rstrip('/')}/bulk/{segment}", fragment="")
    )


async def connect_lane(
    url: str, lane: str, ssl_context: ssl.SSLContext | None
) -> WebSocketFrameStream:
    """Open a client's WebSocket (``lane``: ``""`` or ``"bulk "``); failing, ConnectionFailed."""
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            return await connect_websocket(url, ssl_context=ssl_context)
    except trio.TooSlowError:
        raise ConnectionFailed(
            f"timed out connecting to the code-mode host {lane}websocket"
        ) from None
    except (
        WebSocketRejected,
        trio.BrokenResourceError,
        OSError,
        ValueError,
        h11.ProtocolError,
    ) as exc:
        raise ConnectionFailed(
            f"failed to connect to the code-mode host {lane}websocket: {_describe(exc)}"
        ) from None


def _without_query(url: str) -> str:
    """``url`` for an error text: its query may hold a listener's token, which stays out."""
    base, sep, _ = url.partition("?")
    return f"{base}?..." if sep else base


def _describe(exc: BaseException) -> str:
    if isinstance(exc, WebSocketRejected):
        return str(exc)
    if isinstance(exc, trio.BrokenResourceError) and not str(exc) and exc.__cause__ is not None:
        # trio's TLS stream reports a failed handshake (an untrusted certificate...) this way.
        return _describe(exc.__cause__)
    if isinstance(exc, OSError):
        return os_error_text(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
