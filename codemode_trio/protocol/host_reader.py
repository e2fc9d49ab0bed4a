"""The first stage of any host: client frames in, checked client messages out.

:class:`ClientMessageReader` applies the rules a host checks before it looks at what a message
asks for: framing, strict decoding, ``connection/hello`` first and only once, the lanes, and the
request-id window. :class:`~codemode_trio.protocol.host_protocol.HostProtocol` reads through one;
a scripted test host (``FakeHost``) uses one alone to judge a client exactly as the host would.
"""

from __future__ import annotations

from collections import deque

from .codec import decode_client_message
from .errors import ClientProtocolViolation, FramingError
from .framing import FrameDecoder
from .host_events import ConnectionClosed
from .ids import RecentIds, RequestId
from .lanes import WRONG_LANE_FROM_CLIENT, Lane, client_message_lane
from .messages import ClientMessage, ConnectionHello, OperationRequest

__all__ = ["RECENT_ID_WINDOW", "ClientMessageReader", "FatalClientError"]

#: How many finished request ids, and opened session ids, the host remembers.
RECENT_ID_WINDOW = 4096

_READ_HELLO = "failed to read code-mode client hello"
_READ_MESSAGE = "failed to read code-mode client message"


class FatalClientError(ClientProtocolViolation):
    """The client broke the protocol; the host must stop serving the connection.

    ``context`` and ``cause`` are what the reference host prints on stderr before exiting 1
    (see :meth:`stderr_text`); ``cause`` is ``None`` when it prints no ``Caused by``.
    """

    def __init__(self, context: str, cause: str | None = None) -> None:
        super().__init__(context if cause is None else f"{context}: {cause}")
        self.context = context
        self.cause = cause

    def stderr_text(self) -> str:
        """The reference host's report, without its (unsymbolised) stack backtrace."""
        if self.cause is None:
            return f"Error: {self.context}\n"
        return f"Error: {self.context}\n\nCaused by:\n    {self.cause}\n"


class ClientMessageReader:
    """Client frames in, checked client messages out: the rules any host applies first.

    It splits frames, decodes them strictly, requires ``connection/hello`` first and only once,
    and enforces the request-id window: an id may not match one in flight or any of the last
    4096 finished ids. Call :meth:`finish_request` when a request's final answer is sent.
    Each violation raises :class:`FatalClientError` with the host's text, and so does every
    later call.
    """

    def __init__(self) -> None:
        self._frames = FrameDecoder()
        self._bulk_frames = FrameDecoder()
        self._payloads: deque[bytes] = deque()
        # The lane each payload arrived on, in step with _payloads.
        self._payload_lanes: deque[Lane] = deque()
        #: Set once ``dual-websocket-v1`` was granted: every message's lane is checked.
        self.lanes = False
        self._greeted = False
        self._eof = False
        self._failure: FatalClientError | None = None
        self._in_flight: set[int] = set()
        self._finished: RecentIds[int] = RecentIds(RECENT_ID_WINDOW)

    @property
    def greeted(self) -> bool:
        """Whether the first message has been read."""
        return self._greeted

    def receive_data(self, data: bytes | bytearray | memoryview, lane: Lane = Lane.CONTROL) -> None:
        """Add bytes the client sent on ``lane`` (violations surface from :meth:`next_message`)."""
        if self._failure is not None or self._eof:
            return
        if lane is Lane.BULK and not self.lanes and data:
            self._failure = FatalClientError(WRONG_LANE_FROM_CLIENT)
            return
        try:
            payloads = (self._bulk_frames if lane is Lane.BULK else self._frames).feed(data)
        except FramingError as exc:
            self._failure = FatalClientError(self._context(), str(exc))
            return
        self._payloads.extend(payloads)
        self._payload_lanes.extend([lane] * len(payloads))

    def receive_eof(self, lane: Lane = Lane.CONTROL) -> None:
        """The client closed its side (either lane ends the connection)."""
        if self._failure is not None or self._eof:
            return
        self._eof = True
        try:
            (self._bulk_frames if lane is Lane.BULK else self._frames).eof()
        except FramingError:
            self._failure = FatalClientError(self._context(), "early eof")

    def next_message(self) -> ClientMessage | ConnectionClosed | None:
        """The next checked message, :class:`ConnectionClosed` after EOF, or ``None``.

        A violation raises :class:`FatalClientError`. Frames queued before a framing error
        are still delivered first, as the host reads them in order.
        """
        if self._payloads:
            payload = self._payloads.popleft()
            lane = self._payload_lanes.popleft()
            try:
                message = decode_client_message(payload, strict=True)
            except ClientProtocolViolation as exc:
                self._failure = FatalClientError(self._context(), str(exc))
                raise self._failure from None
            if self.lanes and client_message_lane(message) is not lane:
                self._fail(WRONG_LANE_FROM_CLIENT)
            self._check(message)
            return message
        if self._failure is not None:
            raise self._failure
        if self._eof:
            return ConnectionClosed()
        return None

    def finish_request(self, request_id: int) -> None:
        """Request ``request_id`` got its last answer: its id moves into the recent window."""
        if request_id in self._in_flight:
            self._in_flight.discard(request_id)
            self._finished.add(request_id)

    def _context(self) -> str:
        return _READ_MESSAGE if self._greeted else _READ_HELLO

    def _fail(self, context: str) -> None:
        self._failure = FatalClientError(context)
        raise self._failure

    def _check(self, message: ClientMessage) -> None:
        if type(message) is ConnectionHello:
            if self._greeted:
                self._fail("received a second code-mode client hello")
            self._greeted = True
            return
        self._greeted = True
        if type(message) is OperationRequest:
            request_id = int(message.id)
            if request_id in self._in_flight or request_id in self._finished:
                self._fail(f"duplicate code-mode request ID {RequestId(request_id)!r}")
            self._in_flight.add(request_id)
