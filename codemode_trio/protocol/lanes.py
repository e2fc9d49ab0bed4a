"""The two lanes of a ``dual-websocket-v1`` connection, and which message travels on which.

A host that grants ``dual-websocket-v1`` in ``connection/ready`` also sends a
``bulkConnectionToken``; the client then opens a second WebSocket, the *bulk* lane, next to the
*control* lane it said hello on. Tool traffic, which can be large and bursty, goes on bulk so
that it never queues in front of the requests and replies on control:

- host to client: ``delegate/request`` with ``tool/invoke``, and ``delegate/cancel``, on bulk;
  everything else on control. A tool call's cancel shares its call's lane, so it never
  overtakes it; a notification's cancel can overtake its notification.
- client to host: ``delegate/response`` carrying a ``tool/result`` or an error, on bulk;
  everything else (the hello, requests, cancels, yields, ``notification/delivered``) on control.

A message on the other lane is fatal on both sides. Connections without the capability have
one lane, the control lane, and no check.
"""

from __future__ import annotations

import enum

from .content import ToolCall
from .errors import HandshakeError
from .messages import (
    ClientMessage,
    ConnectionReady,
    DelegateCancel,
    DelegateRequest,
    DelegateResponse,
    HostMessage,
    ToolResult,
    WireError,
    WireOk,
)

__all__ = [
    "DUAL_WEBSOCKET",
    "WRONG_LANE_FROM_CLIENT",
    "WRONG_LANE_FROM_HOST",
    "Lane",
    "bulk_pairing_token",
    "client_message_lane",
    "host_message_lane",
]

#: The capability that pairs a control WebSocket with a bulk one.
DUAL_WEBSOCKET = "dual-websocket-v1"

#: The reference client's text for a host message on the other lane.
WRONG_LANE_FROM_HOST = "code-mode host sent a message on the wrong websocket lane"
#: The reference host's text (0.150) for a client message on the other lane.
WRONG_LANE_FROM_CLIENT = "code-mode client sent a message on the wrong websocket lane"


class Lane(enum.Enum):
    """Which of a connection's sockets a message travels on."""

    CONTROL = "control"
    BULK = "bulk"


def host_message_lane(message: HostMessage) -> Lane:
    """The lane a host message belongs on when the connection has two."""
    match message:
        case DelegateCancel() | DelegateRequest(request=ToolCall()):
            return Lane.BULK
    return Lane.CONTROL


def client_message_lane(message: ClientMessage) -> Lane:
    """The lane a client message belongs on when the connection has two."""
    match message:
        case DelegateResponse(result=WireError() | WireOk(value=ToolResult())):
            return Lane.BULK
    return Lane.CONTROL


def bulk_pairing_token(ready: ConnectionReady, *, websocket: bool) -> str | None:
    """The token to open the bulk lane with, or ``None`` for a single-lane connection.

    ``websocket`` says whether the connection could open a second socket at all. Raises
    :class:`HandshakeError` with the reference client's text when the host's answer does not
    add up: the capability without a token, a token without the capability, or either on a
    connection that is not a WebSocket.
    """
    token = ready.bulk_connection_token
    dual = DUAL_WEBSOCKET in ready.capabilities
    if not dual and token is None:
        return None
    if not websocket:
        raise HandshakeError("code-mode host negotiated an unsupported bulk websocket")
    if not dual:
        raise HandshakeError("code-mode host returned an unexpected bulk pairing token")
    if token is None or not token.strip():
        raise HandshakeError("code-mode host advertised dual websockets without a pairing token")
    return token
