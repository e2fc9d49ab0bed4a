"""Payload-level codec: JSON bytes inside a frame <-> message objects.

``decode_*`` take the payload bytes of one frame (without the length prefix) and return one
message object, or raise a :class:`~codemode_trio.protocol.errors.ProtocolViolation` naming the
peer at fault. Nothing else escapes them.

Strict vs tolerant: ``strict=True`` reproduces the reference Rust client (unknown fields,
missing fields and every type error are fatal). The default tolerates *version skew*: unknown
fields in a known message are ignored (logged once, counted by location without list indices
in the bounded :data:`~codemode_trio.protocol._wire.unknown_field_counts`, and passed to
``on_unknown`` with their exact location if given), and fields an older or newer host omits
(the timing fields, ``error_text``, ``detail``, a tool's ``namespace``) default to ``None``.
Unknown message *tags* are errors in both modes: a message we cannot interpret must not be
silently dropped.

Each payload is first offered to its message's fast decoder, which handles a frame with the
complete 0.171 field set; anything else is decoded again by the precise decoder, which owns the
modes and the error texts. Both come from the message's one declaration (see
:mod:`~codemode_trio.protocol.schema`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ._wire import (
    JSON,
    DecodeContext,
    OffHappyPath,
    UnknownFieldHook,
    dumps,
    encode_chunks,
    loads,
    nests_deeper_than,
)
from .errors import ClientProtocolViolation, EncodeError, HostProtocolViolation, ProtocolViolation
from .framing import MAX_FRAME_BYTES, encode_frame, frame_length_error
from .ids import DelegateRequestId
from .messages import (
    CLIENT_MESSAGES,
    HOST_MESSAGES,
    ClientMessage,
    DelegateResponse,
    HostMessage,
    ToolResult,
    WireOk,
)
from .schema import Union

__all__ = [
    "MAX_FRAME_NESTING",
    "decode_client_message",
    "decode_host_message",
    "encode_client_frame",
    "encode_client_message",
    "encode_host_frame",
    "encode_host_message",
    "encode_tool_result",
    "host_message_decoder",
]

#: The deepest nesting of arrays and objects the host accepts in a frame. serde_json's
#: recursion budget is 128 and runs out *on* the 128th level: 127 levels decode, 128 kill the
#: connection (``recursion limit exceeded``).
MAX_FRAME_NESTING = 127

# A tool result sits inside three objects: the message, its ``result``, and ``value``.
_TOOL_RESULT_NESTING = MAX_FRAME_NESTING - 3

# Decoding contexts carry no per-call state, so the common case (no hook) shares them.
_HOST_CONTEXTS = {
    strict: DecodeContext(strict=strict, error=HostProtocolViolation) for strict in (False, True)
}
_CLIENT_CONTEXTS = {
    strict: DecodeContext(strict=strict, error=ClientProtocolViolation) for strict in (False, True)
}


def _decode(
    payload: bytes | bytearray | memoryview, messages: Union, ctx: DecodeContext, side: str
) -> Any:
    data = loads(payload, ctx)
    if type(data) is dict:
        tag = data.get("type")
        decode_fast = messages.fast_by_tag.get(tag) if type(tag) is str else None
        if decode_fast is not None:
            try:
                return decode_fast(data)
            except OffHappyPath:
                pass  # decode it again, precisely
    try:
        return messages.decode(data, side, ctx)
    except ProtocolViolation:
        raise
    except (RecursionError, ValueError, TypeError, KeyError) as exc:  # pragma: no cover - guard
        # Defensive: every path above validates before use, but no malformed input may escape
        # as anything other than a protocol violation.
        raise ctx.error(f"failed to decode code-mode IPC frame: {exc!r} in {side}") from None


def decode_host_message(
    payload: bytes | bytearray | memoryview,
    *,
    strict: bool = False,
    on_unknown: UnknownFieldHook | None = None,
) -> HostMessage:
    """Decode one host-to-client payload; raise :class:`HostProtocolViolation` if malformed."""
    if on_unknown is None:
        ctx = _HOST_CONTEXTS[strict]
    else:
        ctx = DecodeContext(strict=strict, error=HostProtocolViolation, on_unknown=on_unknown)
    result: HostMessage = _decode(payload, HOST_MESSAGES, ctx, "host message")
    return result


def host_message_decoder(
    *, strict: bool = False
) -> Callable[[bytes | bytearray | memoryview], HostMessage]:
    """:func:`decode_host_message` with its mode fixed: a machine decodes every frame with it."""
    # A partial, not a closure: it calls the decoder without a frame of its own.
    return functools.partial(
        _decode, messages=HOST_MESSAGES, ctx=_HOST_CONTEXTS[strict], side="host message"
    )


def decode_client_message(
    payload: bytes | bytearray | memoryview,
    *,
    strict: bool = False,
    on_unknown: UnknownFieldHook | None = None,
) -> ClientMessage:
    """Decode one client-to-host payload; raise :class:`ClientProtocolViolation` if malformed.

    Besides the wire schema, this applies the host's own value rules in both modes (a hello's
    versions and capabilities, non-blank session ids, the nesting limit for a tool result):
    the host kills the connection over them, so a test double standing in for the host must
    refuse them too.
    """
    if on_unknown is None:
        ctx = _CLIENT_CONTEXTS[strict]
    else:
        ctx = DecodeContext(strict=strict, error=ClientProtocolViolation, on_unknown=on_unknown)
    result: ClientMessage = _decode(payload, CLIENT_MESSAGES, ctx, "client message")
    if type(result) is DelegateResponse and _tool_result_too_deep(result):
        ctx.fail(
            "delegate/response.result.value.result",
            f"recursion limit exceeded (the frame nests deeper than {MAX_FRAME_NESTING} levels)",
        )
    return result


def _encode(message: HostMessage | ClientMessage) -> bytes:
    try:
        payload = dumps(message.to_wire())
    except (TypeError, ValueError, RecursionError) as exc:
        # Typically a tool result that is not JSON (a set, NaN, an object, a cycle).
        raise EncodeError(f"failed to encode code-mode IPC frame: {exc}") from None
    if len(payload) > MAX_FRAME_BYTES:
        raise EncodeError(frame_length_error(len(payload)))
    return payload


def _tool_result_too_deep(message: DelegateResponse) -> bool:
    # Only a tool result carries arbitrary caller data worth walking; the rest of a client
    # message has a fixed, shallow shape (tool schemas aside: they are the caller's own
    # constants).
    result = message.result
    return (
        type(result) is WireOk
        and type(result.value) is ToolResult
        and nests_deeper_than(result.value.result, _TOOL_RESULT_NESTING)
    )


def _check_nesting(message: DelegateResponse) -> None:
    if _tool_result_too_deep(message):
        raise _too_deep()


def _too_deep() -> EncodeError:
    return EncodeError(
        f"code-mode IPC frame nests deeper than {MAX_FRAME_NESTING} levels: the tool result is "
        f"more than {_TOOL_RESULT_NESTING} levels deep, which the host rejects as fatal "
        f"(recursion limit exceeded)"
    )


def encode_host_message(message: HostMessage) -> bytes:
    """Encode a host-to-client message as payload bytes (compact JSON, as the host writes)."""
    return _encode(message)


def encode_client_message(message: ClientMessage) -> bytes:
    """Encode a client-to-host message as payload bytes.

    Raises :class:`EncodeError` if the message cannot be JSON-encoded, exceeds 64 MiB, or holds
    a tool result nested so deeply that the frame would pass the host's nesting limit
    (:data:`MAX_FRAME_NESTING`); the host would kill the connection over any of these.
    """
    if type(message) is DelegateResponse:
        _check_nesting(message)
    return _encode(message)


def encode_client_frame(message: ClientMessage) -> bytes:
    """Encode a client message as a complete frame (length prefix included)."""
    if type(message) is DelegateResponse:
        _check_nesting(message)
    return encode_frame(_encode(message))


def encode_host_frame(message: HostMessage) -> bytes:
    """Encode a host message as a complete frame (length prefix included)."""
    return encode_frame(_encode(message))


def _tool_result_frame() -> tuple[bytes, bytes, bytes]:
    # The declared encoder's bytes for a tool result, cut around the id and the result, so the
    # fast path below writes exactly what the declaration writes.
    sample = _encode(DelegateResponse(DelegateRequestId(0), WireOk(ToolResult("\0"))))
    head, _, rest = sample.partition(b'"id":0')
    middle, _, tail = rest.partition(dumps("\0"))
    return head + b'"id":', middle, tail


_RESULT_HEAD, _RESULT_MIDDLE, _RESULT_TAIL = _tool_result_frame()


def encode_tool_result(delegate_id: int, result: JSON) -> bytes:
    """Encode the ``delegate/response`` answering tool call ``delegate_id`` with ``result``.

    The bytes :func:`encode_client_message` writes, without building the message; it raises
    :class:`EncodeError` where that does (an error's text may say less).
    """
    try:
        # dumps(result), spelled out: this runs once per tool call.
        body = "".join(encode_chunks(result, 0)).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        if nests_deeper_than(result, _TOOL_RESULT_NESTING):
            raise _too_deep() from None
        raise EncodeError(f"failed to encode code-mode IPC frame: {exc}") from None
    # Each level of nesting takes two bytes: a short result cannot nest too deeply.
    if len(body) > 2 * _TOOL_RESULT_NESTING and nests_deeper_than(result, _TOOL_RESULT_NESTING):
        raise _too_deep()
    # "%d", not str(): an id may be a DelegateRequestId, whose str() is its repr.
    payload = b"".join((_RESULT_HEAD, b"%d" % delegate_id, _RESULT_MIDDLE, body, _RESULT_TAIL))
    if len(payload) > MAX_FRAME_BYTES:
        raise EncodeError(frame_length_error(len(payload)))
    return payload
