"""Public error classes of codemode-trio.

Every error has one root, :class:`CodeModeError`, and is named for who is at fault:

============================  =====================================================
:class:`UsageError`           the caller asked for something impossible (nothing sent)
:class:`HostError`            the host answered a request with an error; the
                              connection stays up
:class:`ProtocolViolation`    a peer broke the protocol (see ``.party``)
:class:`ConnectionFailed`     the connection is dead; carries the *first* failure
                              reason (also a :class:`trio.BrokenResourceError`)
:class:`SessionClosed`        the session was shut down locally (also a
                              :class:`trio.ClosedResourceError`)
:class:`HandshakeRejected`    the host refused our hello
:class:`HostNotFound`         no host binary could be located
============================  =====================================================

Messages reproduce the reference client's strings so that logs read the same across clients.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from .protocol.errors import ClientProtocolViolation as ClientProtocolViolation
from .protocol.errors import CodeModeError as CodeModeError
from .protocol.errors import ConnectionUnusable, SessionUnavailable
from .protocol.errors import EncodeError as EncodeError
from .protocol.errors import FramingError as FramingError
from .protocol.errors import HandshakeError as HandshakeError
from .protocol.errors import HandshakeRejected as HandshakeRejected
from .protocol.errors import HostError as HostError
from .protocol.errors import HostProtocolViolation as HostProtocolViolation
from .protocol.errors import ProtocolViolation as ProtocolViolation
from .protocol.errors import UsageError as UsageError


class ConnectionFailed(ConnectionUnusable, trio.BrokenResourceError):
    """The connection to the host is dead.

    ``reason`` is the first failure ever recorded for the connection; every later caller sees
    the same text.
    """


class SessionClosed(SessionUnavailable, trio.ClosedResourceError):
    """The session was shut down locally (or is unknown) and cannot take new work."""


class HostNotFound(CodeModeError, FileNotFoundError):
    """No ``codex-code-mode-host`` binary was found.

    ``searched`` lists every place that was looked at, in order.
    """

    def __init__(self, message: str, searched: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.searched = tuple(searched)
