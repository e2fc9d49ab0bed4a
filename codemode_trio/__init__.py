"""codemode-trio: a structured-concurrency Trio client for the code-mode host protocol.

.. code-block:: python

    import trio
    import codemode_trio as cm

    tools = cm.ToolRegistry()

    @tools.function(description="Add two integers")
    async def add(a: int, b: int) -> int:
        return a + b

    async def main() -> None:
        async with cm.open_host_process() as conn:
            async with conn.open_session(delegate=tools) as session:
                result = await session.run("text(await tools.add({a: 1, b: 2}))")
                print(result.text)

    trio.run(main)

Public names are re-exported here. They are loaded lazily so that ``import
codemode_trio.protocol`` (the sans-IO core) never imports trio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .agent import ExecPragmaError as ExecPragmaError
    from .agent import ExecSource as ExecSource
    from .agent import WaitArgumentsError as WaitArgumentsError
    from .agent import WaitRequest as WaitRequest
    from .agent import exec_tool_spec as exec_tool_spec
    from .agent import format_observation as format_observation
    from .agent import parse_exec_source as parse_exec_source
    from .agent import parse_wait_arguments as parse_wait_arguments
    from .agent import wait_tool_spec as wait_tool_spec
    from .client.config import DEFAULT_CONFIG as DEFAULT_CONFIG
    from .client.config import ConnectionConfig as ConnectionConfig
    from .client.connection import Connection as Connection
    from .client.connection import ConnectionStatistics as ConnectionStatistics
    from .client.connection import open_connection as open_connection
    from .client.delegates import Delegate as Delegate
    from .client.delegates import NoopDelegate as NoopDelegate
    from .client.delegates import ToolError as ToolError
    from .client.registry import ToolRegistry as ToolRegistry
    from .client.session import Session as Session
    from .client.session import StartedCell as StartedCell
    from .connect.host import open_host_process as open_host_process
    from .connect.websocket import open_websocket_connection as open_websocket_connection
    from .errors import ClientProtocolViolation as ClientProtocolViolation
    from .errors import CodeModeError as CodeModeError
    from .errors import ConnectionFailed as ConnectionFailed
    from .errors import EncodeError as EncodeError
    from .errors import FramingError as FramingError
    from .errors import HandshakeError as HandshakeError
    from .errors import HandshakeRejected as HandshakeRejected
    from .errors import HostError as HostError
    from .errors import HostNotFound as HostNotFound
    from .errors import HostProtocolViolation as HostProtocolViolation
    from .errors import ProtocolViolation as ProtocolViolation
    from .errors import SessionClosed as SessionClosed
    from .errors import UsageError as UsageError
    from .grpc.calls import GrpcStatusError as GrpcStatusError
    from .grpc.connection import GrpcConnection as GrpcConnection
    from .grpc.connection import open_grpc_connection as open_grpc_connection
    from .grpc.session import GrpcSession as GrpcSession
    from .grpc.session import GrpcStartedCell as GrpcStartedCell
    from .host.runtime import CellHooks as CellHooks
    from .host.runtime import CellOutcome as CellOutcome
    from .host.runtime import CellRuntime as CellRuntime
    from .host.runtime import ToolCallRejected as ToolCallRejected
    from .host.server import serve_connection as serve_connection
    from .mcp.tools import open_mcp_tools as open_mcp_tools
    from .pool import HostPool as HostPool
    from .pool import HostStatistics as HostStatistics
    from .pool import open_host_pool as open_host_pool
    from .protocol.content import AudioItem as AudioItem
    from .protocol.content import CellLimits as CellLimits
    from .protocol.content import ContentItem as ContentItem
    from .protocol.content import ImageItem as ImageItem
    from .protocol.content import Notification as Notification
    from .protocol.content import RuntimeResponse as RuntimeResponse
    from .protocol.content import TextItem as TextItem
    from .protocol.content import ToolCall as ToolCall
    from .protocol.content import ToolDefinition as ToolDefinition
    from .protocol.content import WaitOutcome as WaitOutcome
    from .protocol.host_protocol import HostProtocol as HostProtocol
    from .reconnect import ReconnectingCell as ReconnectingCell
    from .reconnect import ReconnectingSession as ReconnectingSession
    from .reconnect import open_reconnecting_session as open_reconnecting_session
    from .surface import ConnectionAPI as ConnectionAPI
    from .surface import SessionAPI as SessionAPI
    from .surface import SessionSource as SessionSource
    from .surface import StartedCellAPI as StartedCellAPI
    from .transcript import TranscriptError as TranscriptError
    from .transcript import TranscriptFrame as TranscriptFrame
    from .transcript import TranscriptHeader as TranscriptHeader
    from .transcript import read_transcript as read_transcript
    from .transcript import read_transcript_items as read_transcript_items
    from .transport.environment import host_environment as host_environment

    # Every transport's types hold to the one declared API (mypy checks these assignments).
    _SESSIONS: tuple[type[SessionAPI], ...] = (Session, GrpcSession, ReconnectingSession)
    _CELLS: tuple[type[StartedCellAPI], ...] = (StartedCell, GrpcStartedCell, ReconnectingCell)
    _CONNECTIONS: tuple[type[ConnectionAPI], ...] = (Connection, GrpcConnection)
    _SOURCES: tuple[type[SessionSource], ...] = (Connection, GrpcConnection, HostPool)

_EXPORTS: dict[str, str] = {
    "ExecPragmaError": "agent",
    "ExecSource": "agent",
    "WaitArgumentsError": "agent",
    "WaitRequest": "agent",
    "exec_tool_spec": "agent",
    "format_observation": "agent",
    "parse_exec_source": "agent",
    "parse_wait_arguments": "agent",
    "wait_tool_spec": "agent",
    "DEFAULT_CONFIG": "client.config",
    "ConnectionConfig": "client.config",
    "Connection": "client.connection",
    "ConnectionStatistics": "client.connection",
    "open_connection": "client.connection",
    "Delegate": "client.delegates",
    "NoopDelegate": "client.delegates",
    "ToolError": "client.delegates",
    "ToolRegistry": "client.registry",
    "Session": "client.session",
    "StartedCell": "client.session",
    "ClientProtocolViolation": "errors",
    "CodeModeError": "errors",
    "ConnectionFailed": "errors",
    "EncodeError": "errors",
    "FramingError": "errors",
    "HandshakeError": "errors",
    "HandshakeRejected": "errors",
    "HostError": "errors",
    "HostNotFound": "errors",
    "HostProtocolViolation": "errors",
    "ProtocolViolation": "errors",
    "SessionClosed": "errors",
    "UsageError": "errors",
    "CellHooks": "host.runtime",
    "CellOutcome": "host.runtime",
    "CellRuntime": "host.runtime",
    "ToolCallRejected": "host.runtime",
    "serve_connection": "host.server",
    "HostProtocol": "protocol.host_protocol",
    "GrpcStatusError": "grpc.calls",
    "GrpcConnection": "grpc.connection",
    "open_grpc_connection": "grpc.connection",
    "GrpcSession": "grpc.session",
    "GrpcStartedCell": "grpc.session",
    "AudioItem": "protocol.content",
    "CellLimits": "protocol.content",
    "ContentItem": "protocol.content",
    "ImageItem": "protocol.content",
    "Notification": "protocol.content",
    "RuntimeResponse": "protocol.content",
    "TextItem": "protocol.content",
    "ToolCall": "protocol.content",
    "ToolDefinition": "protocol.content",
    "WaitOutcome": "protocol.content",
    "TranscriptError": "transcript",
    "ReconnectingCell": "reconnect",
    "ConnectionAPI": "surface",
    "SessionAPI": "surface",
    "SessionSource": "surface",
    "StartedCellAPI": "surface",
    "ReconnectingSession": "reconnect",
    "open_reconnecting_session": "reconnect",
    "TranscriptFrame": "transcript",
    "TranscriptHeader": "transcript",
    "read_transcript": "transcript",
    "read_transcript_items": "transcript",
    "host_environment": "transport.environment",
    "open_host_process": "connect.host",
    "open_mcp_tools": "mcp.tools",
    "HostPool": "pool",
    "HostStatistics": "pool",
    "open_host_pool": "pool",
    "open_websocket_connection": "connect.websocket",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'codemode_trio' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # cache: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
