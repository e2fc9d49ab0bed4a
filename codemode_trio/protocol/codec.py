"""Payload-level codec: JSON bytes inside a frame <-> message objects.

``decode_*`` take the payload bytes of one frame (without the length prefix) and return one
message object, or raise a :class:`~codemode_trio.protocol.errors.ProtocolViolation` naming the
peer at fault. Nothing else escapes them.

Strict vs tolerant: ``strict=True`` reproduces the reference Rust client (unknown fields,
missing fields and every type error are fatal). The default tolerates *version skew*: unknown
fields in a known message are ignored (logged once, counted in
:data:`~codemode_trio.protocol._wire.unknown_field_counts`, and passed to ``on_unknown`` if
given), and fields an older or newer host omits (the timing fields, ``error_text``, ``detail``,
a tool's ``namespace``) default to ``None``. Unknown message *tags* are errors in both modes:
a message we cannot interpret must not be silently dropped.
"""

from __future__ import annotations

from typing import Any

from ._wire import DecodeContext, Fields, UnknownFieldHook, dumps, loads
from .errors import (
    ClientProtocolViolation,
    EncodeError,
    HostProtocolViolation,
    ProtocolViolation,
)
from .framing import MAX_FRAME_BYTES, encode_frame, frame_length_error
from .messages import (
    CLIENT_MESSAGE_CLASSES,
    HOST_MESSAGE_CLASSES,
    ClientMessage,
    HostMessage,
)

__all__ = [
    "decode_client_message",
    "decode_host_message",
    "encode_client_frame",
    "encode_client_message",
    "encode_host_frame",
    "encode_host_message",
]


def _decode(
    payload: bytes | bytearray | memoryview,
    classes: dict[str, Any],
    ctx: DecodeContext,
    side: str,
) -> Any:
    data = loads(payload, ctx)
    f = Fields(data, side, ctx)
    tag = f.tag("type", classes)
    f.where = tag
    try:
        return classes[tag].from_fields(f)
    except ProtocolViolation:
        raise
    except (RecursionError, ValueError, TypeError, KeyError) as exc:  # pragma: no cover - guard
        # Defensive: every path above validates before use, but no malformed input may escape
        # as anything other than a protocol violation.
        raise ctx.error(f"failed to decode code-mode IPC frame: {exc!r} in {tag}") from None


def decode_host_message(
    payload: bytes | bytearray | memoryview,
    *,
    strict: bool = False,
    on_unknown: UnknownFieldHook | None = None,
) -> HostMessage:
    """Decode one host-to-client payload; raise :class:`HostProtocolViolation` if malformed."""
    ctx = DecodeContext(strict=strict, error=HostProtocolViolation, on_unknown=on_unknown)
    result: HostMessage = _decode(payload, HOST_MESSAGE_CLASSES, ctx, "host message")
    return result


def decode_client_message(
    payload: bytes | bytearray | memoryview,
    *,
    strict: bool = False,
    on_unknown: UnknownFieldHook | None = None,
) -> ClientMessage:
    """Decode one client-to-host payload; raise :class:`ClientProtocolViolation` if malformed."""
    ctx = DecodeContext(strict=strict, error=ClientProtocolViolation, on_unknown=on_unknown)
    result: ClientMessage = _decode(payload, CLIENT_MESSAGE_CLASSES, ctx, "client message")
    return result


def _encode(message: HostMessage | ClientMessage) -> bytes:
    try:
        payload = dumps(message.to_wire())
    except (TypeError, ValueError) as exc:
        # Typically a tool result that is not JSON (a set, NaN, an object).
        raise EncodeError(f"failed to encode code-mode IPC frame: {exc}") from None
    if len(payload) > MAX_FRAME_BYTES:
        raise EncodeError(frame_length_error(len(payload)))
    return payload


def encode_host_message(message: HostMessage) -> bytes:
    """Encode a host-to-client message as payload bytes (compact JSON, as the host writes)."""
    return _encode(message)


def encode_client_message(message: ClientMessage) -> bytes:
    """Encode a client-to-host message as payload bytes.

    Raises :class:`EncodeError` if the message cannot be JSON-encoded or exceeds 64 MiB.
    """
    return _encode(message)


def encode_client_frame(message: ClientMessage) -> bytes:
    """Encode a client message as a complete frame (length prefix included)."""
    return encode_frame(_encode(message))


def encode_host_frame(message: HostMessage) -> bytes:
    """Encode a host message as a complete frame (length prefix included)."""
    return encode_frame(_encode(message))
