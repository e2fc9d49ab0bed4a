"""gRPC calls over an :class:`~.http2.Http2Connection`: unary and server-streaming.

A call is one HTTP/2 stream: request headers and one framed request message, then response
headers, framed response messages and the ``grpc-status`` trailers. A non-OK status becomes a
:class:`GrpcStatusError` for that caller only; a malformed response is the host breaking the
protocol and fails the connection.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Generic, NoReturn, TypeVar

import h2.errors
from google.protobuf.message import DecodeError, Message

from ..errors import HostError, HostProtocolViolation
from .framing import MessageDecoder, StatusCode, encode_message, encode_timeout, parse_status
from .http2 import Http2Connection
from .http2_stream import Header, Http2Stream, StreamReset

__all__ = ["GrpcChannel", "GrpcStatusError", "ServerStream", "traceparent_metadata"]

M = TypeVar("M", bound=Message)

_USER_AGENT = b"codemode-trio-grpc"


class GrpcStatusError(HostError):
    """The host ended a gRPC call with a non-OK status; only that call failed.

    ``code`` is the :class:`~codemode_trio.grpc.StatusCode` and ``details`` the host's message
    (also the exception's text, so logs read like the stdio transport's host errors).
    """

    def __init__(self, code: StatusCode, details: str) -> None:
        super().__init__(details or code.name)
        self.code = code
        self.details = details


class ServerStream(Generic[M]):
    """The response side of one call: ``await receive()`` each message, ``None`` at the end."""

    def __init__(self, channel: GrpcChannel, stream: Http2Stream, response_type: type[M]) -> None:
        self._channel = channel
        self._stream = stream
        self._type = response_type
        self._decoder = MessageDecoder()
        self._pending: collections.deque[bytes] = collections.deque()
        self._headers_checked = False
        self.done = False

    async def headers(self) -> list[Header]:
        """Wait for the response headers (for a subscription, they mean it is registered)."""
        try:
            headers = await self._stream.receive_headers()
        except StreamReset as exc:
            raise _reset_status(exc) from None
        if not self._headers_checked:
            self._check_headers(headers)
        return headers

    async def consume(self, handler: Callable[[M], object]) -> None:
        """Hand every message to ``handler`` as it arrives; return once the call ended OK.

        ``handler`` runs in the connection's reader task, so no task switch stands between
        a message's arrival and its handling; it must not block (and cannot: it is a plain
        function). Its data counts as consumed once handed over. Errors are those of
        :meth:`receive`; if ``handler`` raises, the call is abandoned and this raises that.
        """
        failed: list[Exception] = []

        def on_data() -> None:
            try:
                while (message := self._receive_ready()) is not None:
                    handler(message)
            except Exception as exc:
                failed.append(exc)
                raise

        stream = self._stream
        stream.listener = on_data
        try:
            on_data()  # what arrived before the listener was set
            while True:
                # Wakes only for the end of the call and for errors; data went to on_data.
                message = await self.receive()
                if message is None or failed:
                    break
                handler(message)
        finally:
            stream.listener = None
        if failed:
            raise failed[0]

    def _receive_ready(self) -> M | None:
        # The next message, if one is complete with the data received so far.
        while not self._pending:
            if self.done:
                return None
            data = self._stream.receive_data_nowait()
            if data is None:
                return None
            if not self._headers_checked:
                self._check_headers_once()
            try:
                self._pending.extend(self._decoder.feed(data))
            except HostProtocolViolation as exc:
                self._violation(str(exc))
        return self._decode(self._pending.popleft())

    async def receive(self) -> M | None:
        """Return the next message, or ``None`` once the call ended with status OK."""
        while not self._pending:
            if self.done:
                return None
            try:
                # Waiting for data (or the end) alone: headers come first on the wire, and
                # checking them once data came saves waking up for them separately.
                data = await self._stream.receive_data()
            except StreamReset as exc:
                self.done = True
                raise _reset_status(exc) from None
            if not self._headers_checked:
                self._check_headers_once()
            if data is None:
                self._finish()
                return None
            try:
                self._pending.extend(self._decoder.feed(data))
            except HostProtocolViolation as exc:
                self._violation(str(exc))
        return self._decode(self._pending.popleft())

    def _decode(self, payload: bytes) -> M:
        self._channel.messages_received += 1
        try:
            return self._type.FromString(payload)
        except DecodeError as exc:
            self._violation(f"invalid {self._type.DESCRIPTOR.name} message from the host: {exc}")

    def cancel(self) -> None:
        """Abandon the call (RST_STREAM CANCEL if still open); never blocks, idempotent."""
        self.done = True
        self._stream.reset()

    def _check_headers_once(self) -> None:
        # Data (or the end) came, so the headers did, before it.
        headers = self._stream.headers
        if headers is None:
            self._violation("code-mode host sent a gRPC response without headers")
        self._check_headers(headers)

    def _check_headers(self, headers: list[Header]) -> None:
        self._headers_checked = True
        fields = dict(headers)  # a repeated field counts with its last value
        status = fields.get(b":status", b"")
        if status != b"200":
            self._violation(f"code-mode host answered a gRPC call with HTTP status {status!r}")
        if b"grpc-status" in fields:
            # Trailers-only (an error before any message): the status is in the headers.
            self._raise_status(headers)
        content_type = fields.get(b"content-type", b"")
        if not content_type.startswith(b"application/grpc"):
            self._violation(f"code-mode host answered with content-type {content_type!r}")

    def _finish(self) -> None:
        self.done = True
        try:
            self._decoder.eof()
        except HostProtocolViolation as exc:
            self._violation(str(exc))
        trailers = self._stream.trailers
        if trailers is None:
            trailers = self._stream.headers or []
        self._stream.finish()
        self._raise_status(trailers)

    def _raise_status(self, headers: list[Header]) -> None:
        parsed = parse_status(headers)
        if parsed is None:
            self._violation("code-mode host ended a gRPC call without grpc-status")
        code, message = parsed
        if code != StatusCode.OK:
            self.done = True
            self._stream.finish()
            raise GrpcStatusError(code, message)

    def _violation(self, text: str) -> NoReturn:
        self.done = True
        self._stream.reset()
        self._channel.http2.fail(text)
        raise HostProtocolViolation(text)


def traceparent_metadata(traceparent: str | None) -> tuple[Header, ...]:
    """The request headers that carry ``traceparent`` (none without one)."""
    return () if traceparent is None else ((b"traceparent", traceparent.encode()),)


def _reset_status(exc: StreamReset) -> GrpcStatusError:
    # How gRPC libraries report a reset stream: a refused one was never processed.
    if exc.refused or exc.error_code == h2.errors.ErrorCodes.REFUSED_STREAM:
        code = StatusCode.UNAVAILABLE
    elif exc.error_code == h2.errors.ErrorCodes.CANCEL:
        code = StatusCode.CANCELLED
    else:
        code = StatusCode.INTERNAL
    return GrpcStatusError(code, str(exc))


class GrpcChannel:
    """Calls to one gRPC service over one HTTP/2 connection."""

    def __init__(self, http2: Http2Connection, *, authority: str, service: str) -> None:
        self.http2 = http2
        self._authority = authority.encode()
        self._prefix = f"/{service}/"
        # method -> its request headers: the same for every call of a method.
        self._method_headers: dict[str, tuple[Header, ...]] = {}
        self.messages_sent = 0
        self.messages_received = 0

    def _headers(
        self, method: str, grpc_timeout: float | None, metadata: Sequence[Header] = ()
    ) -> Sequence[Header]:
        headers = self._method_headers.get(method)
        if headers is None:
            headers = (
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", (self._prefix + method).encode()),
                (b":authority", self._authority),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"user-agent", _USER_AGENT),
            )
            self._method_headers[method] = headers
        if metadata:
            headers = (*headers, *metadata)
        if grpc_timeout is None:
            return headers
        return (*headers, (b"grpc-timeout", encode_timeout(grpc_timeout).encode()))

    async def _start(
        self,
        method: str,
        request: Message,
        grpc_timeout: float | None,
        metadata: Sequence[Header] = (),
    ) -> Http2Stream:
        body = encode_message(request.SerializeToString())
        stream = await self.http2.start_request(self._headers(method, grpc_timeout, metadata), body)
        self.messages_sent += 1
        return stream

    @asynccontextmanager
    async def server_stream(
        self,
        method: str,
        request: Message,
        response_type: type[M],
        *,
        grpc_timeout: float | None = None,
        metadata: Sequence[Header] = (),
    ) -> AsyncIterator[ServerStream[M]]:
        """Start a call; the block reads its responses. Leaving early cancels the call.

        ``grpc_timeout`` (seconds) is only announced to the host (``grpc-timeout``); the
        caller enforces its own deadline with Trio's cancel scopes. ``metadata`` are extra
        request headers (lower-case ASCII names), e.g. a ``traceparent``.
        """
        stream = await self._start(method, request, grpc_timeout, metadata)
        call = ServerStream(self, stream, response_type)
        try:
            yield call
        finally:
            call.cancel()

    async def unary(
        self,
        method: str,
        request: Message,
        response_type: type[M],
        *,
        grpc_timeout: float | None = None,
    ) -> M:
        """Make a unary call; return its one response message."""
        # Not through server_stream: a tool call's answer is a unary call, and the context
        # manager's machinery is a measurable share of its cost.
        call = ServerStream(self, await self._start(method, request, grpc_timeout), response_type)
        try:
            response = await call.receive()
            if response is None:
                raise HostProtocolViolation(
                    f"code-mode host ended {method} without a response message"
                )
            # Read through to the trailers: the status is only final there.
            if await call.receive() is not None:
                text = f"code-mode host sent more than one response message to {method}"
                call._violation(text)
            return response
        finally:
            call.cancel()
