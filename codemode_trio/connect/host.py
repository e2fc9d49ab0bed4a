"""``open_host_process``: the real ``codex-code-mode-host`` as a child process, connected.

This is the composition most applications want: locate the binary, spawn it in its own process
group, handshake over its stdio, and on exit tear everything down (connection first, then the
process group, reaped: no zombie, no orphan, even when the body is cancelled or the host hangs).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Literal, overload

from ..client.config import DEFAULT_CONFIG, ConnectionConfig
from ..client.connection import Connection, open_connection
from ..hostbin import locate_host
from ..protocol.handshake import ALL_CAPABILITIES
from ..transcript import TranscriptWriter
from ..transport.process import spawn_host

if TYPE_CHECKING:
    from ..grpc.connection import GrpcConnection

__all__ = ["TRANSCRIPT_ENV", "open_host_process"]

#: When set, every connection opened by :func:`open_host_process` without an explicit
#: ``transcript`` records its frames to this path (handy with the ``codemode-trio`` CLI).
TRANSCRIPT_ENV = "CODEMODE_TRIO_TRANSCRIPT"


@overload
def open_host_process(
    host_path: str | os.PathLike[str] | None = None,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    transcript: str | os.PathLike[str] | None = None,
    transport: Literal["stdio"] = "stdio",
) -> AbstractAsyncContextManager[Connection]: ...
@overload
def open_host_process(
    host_path: str | os.PathLike[str] | None = None,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    transcript: str | os.PathLike[str] | None = None,
    transport: Literal["grpc"],
) -> AbstractAsyncContextManager[GrpcConnection]: ...


@asynccontextmanager  # type: ignore[misc]  # the overloads give the precise types
async def open_host_process(
    host_path: str | os.PathLike[str] | None = None,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    transcript: str | os.PathLike[str] | None = None,
    transport: Literal["stdio", "grpc"] = "stdio",
) -> AsyncIterator[Connection | GrpcConnection]:
    """Spawn the host, perform the handshake, and yield the :class:`Connection`.

    The binary is ``host_path``, else ``$CODEX_CODE_MODE_HOST_PATH``, else the verified
    pinned cache filled by ``codemode-trio host fetch``, else ``codex-code-mode-host`` on
    ``PATH`` (see :func:`~codemode_trio.hostbin.locate_host`); none found raises
    :class:`~codemode_trio.HostNotFound` naming every place looked.

    The host does not inherit our whole environment: it gets an allow-list (``PATH``,
    ``HOME``, ``LANG``/``LC_*``, ``TMPDIR``, ``TZ``, ``NO_COLOR``, ``RUST_*``, ``CODEX_*``,
    ``OTEL_*``, minus names that look like secrets) plus whatever ``env`` adds (its values
    win); ``inherit_env=True`` passes everything, as a shell would.

    A ``transcript`` (or ``$CODEMODE_TRIO_TRANSCRIPT``) that cannot be opened raises
    :class:`~codemode_trio.TranscriptError` before the host is started.

    ``conn.process`` is the :class:`trio.Process` and ``conn.host`` the
    :class:`~codemode_trio.transport.process.HostProcess` (stderr tail, exit status). When the
    host dies, during the handshake or later, the connection's failure reason carries its exit
    status and the last lines of its stderr.

    ``transport="grpc"`` starts the host with ``--listen grpc+stdio://`` and yields a
    :class:`~codemode_trio.GrpcConnection` (same API) speaking its gRPC API over the pipes;
    it needs the ``grpc`` extra. ``capabilities`` and ``transcript`` apply to stdio only.
    """
    path = locate_host(host_path)
    if transport == "grpc":
        from ..grpc.connection import open_grpc_stream  # needs the optional `grpc` extra

        args = ("--listen", "grpc+stdio://", *args)
        async with (
            spawn_host(path, args=args, env=env, inherit_env=inherit_env) as host,
            open_grpc_stream(
                host.stream, config=config, eof_details=host.exit_details, host=host
            ) as grpc_conn,
        ):
            yield grpc_conn
        return
    if transcript is None:
        transcript = os.environ.get(TRANSCRIPT_ENV) or None
    if transcript is not None:
        # Fail on a bad transcript path before a host process exists.
        TranscriptWriter.check(transcript)
    async with (
        spawn_host(path, args=args, env=env, inherit_env=inherit_env) as host,
        open_connection(
            host.stream,
            config=config,
            capabilities=capabilities,
            transcript=transcript,
            eof_details=host.exit_details,
            host=host,
        ) as connection,
    ):
        yield connection
