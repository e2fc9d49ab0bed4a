"""Length-prefixed framing: a 4-byte little-endian ``u32`` length, then that many payload bytes.

Pure functions and a tiny incremental decoder; no I/O. The host accepts a payload of exactly
``MAX_FRAME_BYTES`` and rejects one byte more as soon as the header arrives, so we do the same.
"""

from __future__ import annotations

import struct

from .errors import EncodeError, FramingError

__all__ = ["HEADER_BYTES", "MAX_FRAME_BYTES", "FrameDecoder", "encode_frame"]

MAX_FRAME_BYTES = 64 * 1024 * 1024
HEADER_BYTES = 4

_HEADER = struct.Struct("<I")


def frame_length_error(length: int) -> str:
    """Return the reference text for an oversize frame length."""
    return f"code-mode IPC frame length {length} exceeds {MAX_FRAME_BYTES} bytes"


def encode_frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its length.

    Raises :class:`EncodeError` when the payload is over the 64 MiB limit; nothing that large
    may reach the wire, because the peer treats it as fatal.
    """
    length = len(payload)
    if length > MAX_FRAME_BYTES:
        raise EncodeError(frame_length_error(length))
    return _HEADER.pack(length) + payload


class FrameDecoder:
    """Split a byte stream into frame payloads, whatever the chunking.

    ``feed`` returns every payload completed by the new bytes, in order. ``eof`` must be called
    when the stream ends: it raises :class:`FramingError` if a frame was cut off, which the host
    itself treats as fatal (``early eof``).
    """

    __slots__ = ("_buffer", "_needed")

    def __init__(self) -> None:
        self._buffer = bytearray()
        # Payload length of the frame being read, or None while its header is incomplete.
        self._needed: int | None = None

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data`` and return the payloads it completed (possibly none)."""
        buffer = self._buffer
        buffer += data
        payloads: list[bytes] = []
        start = 0
        available = len(buffer)
        while True:
            needed = self._needed
            if needed is None:
                if available - start < HEADER_BYTES:
                    break
                (needed,) = _HEADER.unpack_from(buffer, start)
                if needed > MAX_FRAME_BYTES:
                    # Fail as soon as the header arrives, as the host does: waiting for 4 GiB
                    # of payload from a broken peer would only hang.
                    raise FramingError(frame_length_error(needed))
                start += HEADER_BYTES
                self._needed = needed
            if available - start < needed:
                break
            payloads.append(bytes(buffer[start : start + needed]))
            start += needed
            self._needed = None
        if start:
            del buffer[:start]
        return payloads

    def eof(self) -> None:
        """Declare the end of the stream; raise :class:`FramingError` if a frame is incomplete."""
        if self._needed is not None:
            raise FramingError(
                f"early eof: code-mode IPC frame declares {self._needed} payload bytes "
                f"but contains {len(self._buffer)}"
            )
        if self._buffer:
            raise FramingError(
                f"early eof: code-mode IPC frame is missing its length prefix "
                f"({len(self._buffer)} of {HEADER_BYTES} header bytes)"
            )
