"""Length-prefixed framing: a 4-byte little-endian ``u32`` length, then that many payload bytes.

Pure functions and a tiny incremental decoder; no I/O. The host accepts a payload of exactly
``MAX_FRAME_BYTES`` and rejects one byte more as soon as the header arrives, so we do the same.
"""

from __future__ import annotations

import struct

from .errors import EncodeError, FramingError

__all__ = ["HEADER_BYTES", "MAX_FRAME_BYTES", "FrameDecoder", "encode_frame"]

#: The largest frame payload either side may send: 64 MiB (SPEC §2).
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

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        # The bytes of the incomplete frame at the end of the stream, header included.
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a complete frame (its header included)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data`` and return the payloads it completed (possibly none)."""
        buffer = self._buffer
        if buffer or type(data) is not bytes:
            buffer += data
            held = len(buffer)
            if held < HEADER_BYTES:
                return []
            (length,) = _HEADER.unpack_from(buffer)
            if length > MAX_FRAME_BYTES:
                raise FramingError(frame_length_error(length))
            if held < HEADER_BYTES + length:
                return []
            # A frame is complete: split what is held as if it had come in one read. Copying
            # only now keeps a large frame arriving in many chunks linear.
            data = bytes(buffer)
            buffer.clear()
        # Whole frames in one read, the common case: each payload is one slice of ``data``.
        payloads: list[bytes] = []
        start = 0
        available = len(data)
        while available - start >= HEADER_BYTES:
            (length,) = _HEADER.unpack_from(data, start)
            if length > MAX_FRAME_BYTES:
                # Fail as soon as the header arrives, as the host does: waiting for 4 GiB of
                # payload from a broken peer would only hang.
                raise FramingError(frame_length_error(length))
            end = start + HEADER_BYTES + length
            if end > available:
                break
            payloads.append(data[start + HEADER_BYTES : end])
            start = end
        if start < available:
            buffer += memoryview(data)[start:]
        return payloads

    def eof(self) -> None:
        """Declare the end of the stream; raise :class:`FramingError` if a frame is incomplete."""
        held = len(self._buffer)
        if held >= HEADER_BYTES:
            (needed,) = _HEADER.unpack_from(self._buffer)
            raise FramingError(
                f"early eof: code-mode IPC frame declares {needed} payload bytes "
                f"but contains {held - HEADER_BYTES}"
            )
        if held:
            raise FramingError(
                f"early eof: code-mode IPC frame is missing its length prefix "
                f"({held} of {HEADER_BYTES} header bytes)"
            )
