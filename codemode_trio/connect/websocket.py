"""``open_websocket_connection``: the client over ``ws://`` or ``wss://`` lanes."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from os import PathLike

from ..client.config import DEFAULT_CONFIG, ConnectionConfig
from ..client.connection import Connection, open_connection
from ..protocol.handshake import ALL_CAPABILITIES
from ..protocol.lanes import DUAL_WEBSOCKET
from ..transport.websocket import WebSocketFrameStream, bulk_websocket_url, connect_lane

__all__ = ["WEBSOCKET_CAPABILITIES", "open_websocket_connection"]

#: What :func:`open_websocket_connection` offers by default: everything, and the bulk lane.
WEBSOCKET_CAPABILITIES: tuple[str, ...] = (*ALL_CAPABILITIES, DUAL_WEBSOCKET)


@asynccontextmanager
async def open_websocket_connection(
    url: str,
    *,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = WEBSOCKET_CAPABILITIES,
    transcript: str | PathLike[str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Connection]:
    """Connect to a host serving the protocol on ``ws://`` or ``wss://`` (``codemode-trio serve``).

    The same :class:`~codemode_trio.Connection` as over stdio, so applications switch transport
    by changing the opener. ``dual-websocket-v1`` is offered unless ``capabilities`` leaves it
    out; a host that grants it gets a second (bulk) WebSocket for tool calls and their
    results. Raises :class:`~codemode_trio.ConnectionFailed` with the reference client's texts
    when a WebSocket cannot be opened (for the bulk one, the text carries the HTTP status).
    ``wss://`` verifies the host with ``ssl_context`` (default: the system's trust store).
    """
    control = await connect_lane(url, "", ssl_context)

    async def connect_bulk(token: str) -> WebSocketFrameStream:
        return await connect_lane(bulk_websocket_url(url, token), "bulk ", ssl_context)

    # open_connection owns both streams from here: it closes them whatever happens.
    async with open_connection(
        control,
        config=config,
        capabilities=capabilities,
        transcript=transcript,
        connect_bulk=connect_bulk,
    ) as connection:
        yield connection
