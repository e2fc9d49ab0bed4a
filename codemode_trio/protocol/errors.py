"""Errors raised by the sans-IO protocol core.

The hierarchy names who broke the rules, the way trio separates ``ClosedResourceError`` (you
did it) from ``BrokenResourceError`` (the other side did it):

- :class:`CodeModeError` is the root of every error codemode-trio raises on purpose.
- :class:`ProtocolViolation` means bytes on the wire broke the protocol.
  :class:`HostProtocolViolation` and :class:`ClientProtocolViolation` say which peer sent them;
  :class:`FramingError` is a violation of the length-prefix framing itself.
- :class:`EncodeError` means a local value cannot be put on the wire (for example a frame over
  the 64 MiB limit); it is the caller's fault and nothing was sent.
- :class:`HandshakeRejected` means the host refused our hello.

This module must not import trio: the protocol package is sans-IO.
"""

from __future__ import annotations

__all__ = [
    "ClientProtocolViolation",
    "CodeModeError",
    "EncodeError",
    "FramingError",
    "HandshakeError",
    "HandshakeRejected",
    "HostProtocolViolation",
    "ProtocolViolation",
]


class CodeModeError(Exception):
    """Root of every error that codemode-trio raises deliberately."""


class ProtocolViolation(CodeModeError):
    """Bytes from a peer broke the code-mode protocol.

    ``party`` names the peer at fault: ``"host"``, ``"client"`` or ``"peer"`` when the layer
    that noticed cannot tell (framing).
    """

    party: str = "peer"


class HostProtocolViolation(ProtocolViolation):
    """The host sent something the protocol does not allow."""

    party = "host"


class ClientProtocolViolation(ProtocolViolation):
    """A client sent something the protocol does not allow."""

    party = "client"


class FramingError(ProtocolViolation):
    """The length-prefixed framing itself is broken (oversize length, EOF inside a frame)."""


class EncodeError(CodeModeError, ValueError):
    """A local value cannot be encoded for the wire; nothing was sent."""


class HandshakeError(CodeModeError):
    """The handshake did not produce a usable connection."""


class HandshakeRejected(HandshakeError):
    """The host answered our hello with ``connection/rejected``.

    ``reason`` is the decoded rejection reason (a ``RejectReason`` message class).
    """

    def __init__(self, message: str, reason: object = None) -> None:
        super().__init__(message)
        self.reason = reason
