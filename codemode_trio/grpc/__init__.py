"""The host's gRPC API (``codex.code_mode.v1.CodeModeHost``) on Trio: ``codemode-trio[grpc]``.

:func:`open_grpc_connection` connects to ``grpc://IP:PORT``; ``open_host_process(...,
transport="grpc")`` spawns a host speaking gRPC on its stdio. Both give a
:class:`GrpcConnection` whose sessions have the :class:`~codemode_trio.Session` API. Needs the
``grpc`` extra (``h2`` and ``protobuf``).
"""

from __future__ import annotations

from .calls import GrpcStatusError as GrpcStatusError
from .connection import GrpcConnection, GrpcSettings, open_grpc_connection, open_grpc_stream
from .framing import StatusCode as StatusCode
from .session import GrpcSession, GrpcStartedCell

__all__ = [
    "GrpcConnection",
    "GrpcSession",
    "GrpcSettings",
    "GrpcStartedCell",
    "GrpcStatusError",
    "StatusCode",
    "open_grpc_connection",
    "open_grpc_stream",
]
