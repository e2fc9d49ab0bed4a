"""WebSocket framing (RFC 6455), sans-IO, for a protocol that sends one binary message per frame.

Only what code-mode needs: every message is sent as a single binary frame; received messages
may be fragmented and are reassembled; ping, pong and close frames are reported to the caller;
no extension (no deflate) is ever negotiated, so the reserved bits must be clear. The opening
handshake (an HTTP/1.1 upgrade) is left to :mod:`h11`, this module's two key helpers and
:func:`upgrade_refusal`, which checks an upgrade request's head.

What a peer may make the reader hold is bounded: a message (its fragments and the frame being
received together) by ``max_message`` bytes, a fragmented one by ``max_fragments`` frames.
Exceeding either is a :class:`WebSocketFramingError` whose :attr:`~WebSocketFramingError.code`
is the close status to answer with (1009, message too big; 1008, policy violation).

Written for speed on the hot path: the header is one ``struct`` call, masking is one XOR of two
big integers, and a complete frame in the buffer is cut out without re-scanning what came
before it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Iterable

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_POLICY_VIOLATION",
    "CLOSE_PROTOCOL_ERROR",
    "MAX_FRAGMENTS",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONTINUATION",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "FrameReader",
    "WebSocketFramingError",
    "accept_key",
    "encode_frame",
    "header_has_token",
    "new_key",
    "upgrade_refusal",
]

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_SHORT = struct.Struct("!BB")
_MEDIUM = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")
_KNOWN_OPCODES = frozenset((OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG))

#: Close statuses (RFC 6455 7.4.1) for a peer that broke the rules.
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009

#: The most frames one fragmented message may take. Nobody needs many: code-mode peers send a
#: message as one frame, and a proxy that re-fragments a 64 MiB message into 4 KiB pieces
#: needs 16,384. The bound keeps a flood of tiny fragments from costing a frame's work each
#: without end (the bytes are bounded by ``max_message`` anyway).
MAX_FRAGMENTS = 16_384


class WebSocketFramingError(Exception):
    """The peer's bytes are not a valid WebSocket frame sequence (the message says why).

    ``code`` is the close status to send the peer before dropping the connection.
    """

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


def new_key() -> str:
    """A fresh ``Sec-WebSocket-Key`` for a client's upgrade request."""
    return base64.b64encode(os.urandom(16)).decode("ascii")


def accept_key(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server answers ``key`` with."""
    digest = hashlib.sha1(key.encode("ascii") + _GUID, usedforsecurity=False).digest()
    return base64.b64encode(digest).decode("ascii")


def _xor(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if not n:
        return b""
    stream = (key * ((n + 3) // 4))[:n]
    value = int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")
    return value.to_bytes(n, "little")


def encode_frame(opcode: int, payload: bytes, *, mask: bool) -> bytes:
    """One final frame of ``opcode`` carrying ``payload``; a client masks (``mask=True``)."""
    n = len(payload)
    first = 0x80 | opcode
    bit = 0x80 if mask else 0
    if n < 126:
        header = _SHORT.pack(first, bit | n)
    elif n < 65536:
        header = _MEDIUM.pack(first, bit | 126, n)
    else:
        header = _LONG.pack(first, bit | 127, n)
    if not mask:
        return header + payload
    key = os.urandom(4)
    return header + key + _xor(payload, key)


class FrameReader:
    """Turns received bytes into whole messages and control frames.

    ``masked`` is what the peer must do: a server reads masked frames from its clients, a
    client reads unmasked ones. ``max_message`` bounds a message, fragments included, and so
    what the reader holds at any time; ``max_fragments`` bounds the frames of one message.
    :meth:`feed` returns ``(opcode, payload)`` pairs: ``OP_BINARY`` / ``OP_TEXT`` for a whole
    message, ``OP_CLOSE`` / ``OP_PING`` / ``OP_PONG`` for control frames; it raises
    :class:`WebSocketFramingError` for anything RFC 6455 forbids.
    """

    def __init__(
        self, *, masked: bool, max_message: int, max_fragments: int = MAX_FRAGMENTS
    ) -> None:
        self._masked = masked
        self._max = max_message
        self._max_fragments = max_fragments
        self._buffer = bytearray()
        # One growing buffer, not a list of fragments: a fragment costs its bytes and no more.
        self._fragments = bytearray()
        self._fragment_count = 0
        self._fragment_opcode: int | None = None

    @property
    def unfinished(self) -> bool:
        """Whether part of a message (a frame cut short, or fragments) is waiting for the rest."""
        return bool(self._buffer) or self._fragment_opcode is not None

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add ``data``; return every message and control frame now complete, in order."""
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data  # the common case: no copy until a frame is left incomplete
        out: list[tuple[int, bytes]] = []
        pos = 0
        end = len(view)
        while end - pos >= 2:
            b0 = view[pos]
            b1 = view[pos + 1]
            length = b1 & 0x7F
            header = 2
            if length == 126:
                if end - pos < 4:
                    break
                length = (view[pos + 2] << 8) | view[pos + 3]
                header = 4
            elif length == 127:
                if end - pos < 10:
                    break
                length = int.from_bytes(view[pos + 2 : pos + 10], "big")
                header = 10
            self._check_header(b0, b1, length)
            if b1 & 0x80:
                header += 4
            if end - pos < header + length:
                break
            start = pos + header
            payload = bytes(view[start : start + length])
            if b1 & 0x80:
                payload = _xor(payload, bytes(view[start - 4 : start]))
            pos = start + length
            self._add(b0 & 0x0F, bool(b0 & 0x80), payload, out)
        if pos == end:
            buffer.clear()
        elif view is buffer:
            del buffer[:pos]
        else:
            buffer += view[pos:]
        return out

    def _check_header(self, b0: int, b1: int, length: int) -> None:
        opcode = b0 & 0x0F
        if b0 & 0x70:
            raise WebSocketFramingError("reserved bits are set (no extension was negotiated)")
        if opcode not in _KNOWN_OPCODES:
            raise WebSocketFramingError(f"unknown opcode {opcode:#x}")
        if bool(b1 & 0x80) is not self._masked:
            which = "an unmasked" if self._masked else "a masked"
            raise WebSocketFramingError(f"{which} frame")
        if opcode >= OP_CLOSE:
            if not b0 & 0x80 or length > 125:
                raise WebSocketFramingError("a fragmented or oversized control frame")
        elif len(self._fragments) + length > self._max:
            raise WebSocketFramingError(
                f"a message of more than {self._max} bytes exceeds the message size limit",
                CLOSE_MESSAGE_TOO_BIG,
            )

    def _add(self, opcode: int, final: bool, payload: bytes, out: list[tuple[int, bytes]]) -> None:
        if opcode >= OP_CLOSE:
            out.append((opcode, payload))
            return
        if opcode == OP_CONTINUATION:
            if self._fragment_opcode is None:
                raise WebSocketFramingError("a continuation frame outside a message")
        elif self._fragment_opcode is not None:
            raise WebSocketFramingError("a new message inside a fragmented one")
        elif final:
            out.append((opcode, payload))  # the common case: a whole message in one frame
            return
        else:
            self._fragment_opcode = opcode
        self._fragment_count += 1
        if self._fragment_count > self._max_fragments:
            raise WebSocketFramingError(
                f"a message in more than {self._max_fragments} fragments", CLOSE_POLICY_VIOLATION
            )
        self._fragments += payload
        if final:
            assert self._fragment_opcode is not None
            out.append((self._fragment_opcode, bytes(self._fragments)))
            self._fragments = bytearray()
            self._fragment_count = 0
            self._fragment_opcode = None


_PLAIN_TEXT = (("Content-Type", "text/plain; charset=utf-8"),)


def header_has_token(value: bytes, token: bytes) -> bool:
    """Whether a comma-separated header value (``keep-alive, Upgrade``) holds ``token``."""
    return any(part.strip().lower() == token for part in value.split(b","))


def _valid_key(key: bytes) -> bool:
    """RFC 6455 4.2.1: the key is 16 bytes in base64 (anything else is not a client's key)."""
    try:
        return len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        return False


#: What :func:`upgrade_refusal` answers: an HTTP status, headers and a text body.
Refusal = tuple[int, tuple[tuple[str, str], ...], bytes]


def upgrade_refusal(method: bytes, headers: Iterable[tuple[bytes, bytes]]) -> Refusal | None:
    """Why a request head is not a WebSocket upgrade (RFC 6455 4.2.1), or ``None`` if it is one.

    ``headers`` are (name, value) pairs, names in any case. The answer is the status to refuse
    it with, in the order and words of host 0.150 (an axum server), except that a version other
    than 13 gets 426 with ``Sec-WebSocket-Version: 13``, as RFC 6455 4.4 asks.
    """
    fields: dict[bytes, bytes] = {}
    for name, value in headers:
        fields.setdefault(name.lower(), value)
    if method != b"GET":
        return 405, _PLAIN_TEXT, b"Request method must be `GET`"
    if not header_has_token(fields.get(b"connection", b""), b"upgrade"):
        return 400, _PLAIN_TEXT, b"Connection header did not include 'upgrade'"
    if fields.get(b"upgrade", b"").strip().lower() != b"websocket":
        return 400, _PLAIN_TEXT, b"`Upgrade` header did not include 'websocket'"
    if fields.get(b"sec-websocket-version", b"").strip() != b"13":
        return 426, (*_PLAIN_TEXT, ("Sec-WebSocket-Version", "13")), b"only version 13 is spoken"
    if not _valid_key(fields.get(b"sec-websocket-key", b"").strip()):
        return 400, _PLAIN_TEXT, b"`Sec-WebSocket-Key` header missing or not 16 bytes in base64"
    return None
