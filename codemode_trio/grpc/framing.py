"""gRPC message framing and status trailers, sans-IO (no trio, no HTTP/2 library).

On an HTTP/2 stream every gRPC message is a 5-byte prefix (a compression flag byte, then the
length as a big-endian ``uint32``) followed by the serialized message. The call's outcome comes
in the trailers as ``grpc-status`` and a percent-encoded ``grpc-message``.
"""

from __future__ import annotations

import enum
import urllib.parse
from collections.abc import Iterable

from ..errors import HostProtocolViolation

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MessageDecoder",
    "StatusCode",
    "encode_message",
    "encode_timeout",
    "parse_status",
]

#: The largest message we accept from the host. grpcio's default is 4 MiB; cell output can be
#: larger than that (a cell may emit many images), so the bound is generous but finite.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_PREFIX = 5


class StatusCode(enum.IntEnum):
    """The gRPC status codes (``grpc-status`` trailer values)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def encode_message(payload: bytes) -> bytes:
    """Frame one serialized message (uncompressed)."""
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


class MessageDecoder:
    """Split a stream's DATA bytes into messages; feed chunks of any size.

    We never ask for compression, so a compressed message (flag 1) is the host's fault, as is
    a message above ``max_message_bytes`` or bytes left over when the stream ends.
    """

    __slots__ = ("_buffer", "_max")

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self._buffer = bytearray()
        self._max = max_message_bytes

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return every message now complete, in order."""
        buffer = self._buffer
        if not buffer and len(data) >= _PREFIX and data[0] == 0:
            # The usual case, one whole message in one chunk: no copy into the buffer.
            length = int.from_bytes(data[1:_PREFIX], "big")
            if length == len(data) - _PREFIX and length <= self._max:
                return [data[_PREFIX:]]
        buffer += data
        messages: list[bytes] = []
        start = 0
        end = len(buffer)
        while end - start >= _PREFIX:
            flag = buffer[start]
            if flag != 0:
                raise HostProtocolViolation(
                    f"gRPC message with compression flag {flag}, but no compression was agreed"
                )
            length = int.from_bytes(buffer[start + 1 : start + _PREFIX], "big")
            if length > self._max:
                raise HostProtocolViolation(
                    f"gRPC message of {length} bytes exceeds the limit of {self._max} bytes"
                )
            if end - start - _PREFIX < length:
                break
            body = start + _PREFIX
            messages.append(bytes(buffer[body : body + length]))
            start = body + length
        if start:
            del buffer[:start]
        return messages

    def eof(self) -> None:
        """The stream ended: refuse a truncated message."""
        if self._buffer:
            raise HostProtocolViolation(
                f"gRPC stream ended inside a message ({len(self._buffer)} bytes left over)"
            )


def encode_timeout(seconds: float) -> str:
    """Render a ``grpc-timeout`` header value (at most 8 digits, as the spec requires)."""
    millis = max(0, int(seconds * 1000))
    if millis < 100_000_000:
        return f"{millis}m"
    return f"{min(99_999_999, int(seconds))}S"


def parse_status(headers: Iterable[tuple[bytes, bytes]]) -> tuple[StatusCode, str] | None:
    """Return ``(code, message)`` from trailers (or trailers-only headers); ``None`` if absent.

    An unknown numeric code is reported as ``UNKNOWN``, as gRPC implementations do.
    """
    fields = dict(headers)  # a repeated field counts with its last value
    status = fields.get(b"grpc-status")
    if status is None:
        return None
    try:
        code = StatusCode(int(status))
    except ValueError:
        code = StatusCode.UNKNOWN
    message = fields.get(b"grpc-message", b"").decode("utf-8", "replace")
    return code, urllib.parse.unquote(message)
