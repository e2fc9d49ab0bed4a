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
- :class:`UsageError` means the caller asked for something impossible; nothing was sent.
- :class:`HostError` means the host answered one request with an error.
- :class:`SessionUnavailable` and :class:`ConnectionUnusable` are what the sans-IO state
  machines raise for a session or a connection that can take no more work; the Trio layer
  raises their subclasses ``SessionClosed`` and ``ConnectionFailed``, which are also Trio's
  ``ClosedResourceError`` and ``BrokenResourceError``.

This module must not import trio: the protocol package is sans-IO.
"""

from __future__ import annotations

__all__ = [
    "ClientProtocolViolation",
    "CodeModeError",
    "ConnectionUnusable",
    "EncodeError",
    "FramingError",
    "HandshakeError",
    "HandshakeRejected",
    "HostError",
    "HostProtocolViolation",
    "ProtocolViolation",
    "SessionUnavailable",
    "UsageError",
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


class UsageError(CodeModeError, ValueError):
    """The caller asked for something that cannot be done; nothing was sent to the host."""


class HostError(CodeModeError):
    """The host (or the client on its behalf) answered one request with an error.

    Only that caller sees it; the connection stays usable.
    """


class SessionUnavailable(CodeModeError):
    """The session is unknown, shutting down or already closed, so it takes no new work."""


class ConnectionUnusable(CodeModeError):
    """The connection has failed; ``reason`` is the first failure ever recorded for it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
