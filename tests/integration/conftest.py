"""Fixtures for tests against the real ``codex-code-mode-host``.

These tests are part of the normal suite: if the host binary is missing they FAIL with the
command that installs it (``codemode-trio host fetch``), they are never skipped.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest
import trio
from trio_util import AsyncValue

import codemode_trio as cm
from codemode_trio.grpc import codemode_pb2 as pb
from codemode_trio.grpc.calls import GrpcChannel
from codemode_trio.protocol.handshake import ALL_CAPABILITIES
from codemode_trio.protocol.lanes import DUAL_WEBSOCKET
from codemode_trio.transport.process import HostProcess, spawn_host

REPO = Path(__file__).resolve().parents[2]


class Recorder:
    """A ToolRegistry plus a record of everything the host asked of it."""

    def __init__(self) -> None:
        self.tools = cm.ToolRegistry()
        self.notes: list[cm.Notification] = []
        self.closed: list[str] = []
        self.cancelled: list[str] = []
        # Bumped on every notification, cell_closed and cancelled tool call, so tests can
        # wait without polling.
        self.changes = AsyncValue(0)
        self.started_send, self.started = trio.open_memory_channel[Any](math.inf)
        self.in_flight = 0
        self.max_in_flight = 0
        tools = self.tools

        @tools.function(description="Echo the input back")
        async def echo(value: Any = None) -> Any:
            return {"echo": value}

        @tools.function(description="Add two integers")
        async def add(a: int, b: int) -> int:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await trio.sleep(0.05)  # overlap concurrent calls
            self.in_flight -= 1
            return a + b

        @tools.function(description="Never returns until cancelled")
        async def hang(tag: str = "") -> None:
            self.started_send.send_nowait(tag)
            try:
                await trio.sleep_forever()
            finally:
                self.cancelled.append(tag)
                self.changes.value += 1

        @tools.function(description="Fails")
        async def explode(message: str) -> None:
            raise cm.ToolError(message)

        @tools.on_notification
        async def on_note(note: cm.Notification) -> None:
            self.notes.append(note)
            self.changes.value += 1

        @tools.on_cell_closed
        def on_closed(cell_id: str) -> None:
            self.closed.append(cell_id)
            self.changes.value += 1

    async def wait_for(self, predicate: Any) -> None:
        """Wait (at most 5 s) until ``predicate(self)`` holds after some change."""
        with trio.fail_after(5):
            await self.changes.wait_value(lambda _: predicate(self))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@asynccontextmanager
async def grpc_host(host_path: Path) -> AsyncIterator[tuple[HostProcess, str]]:
    """A host listening on a loopback port; yields it and its ``grpc://`` target."""
    async with spawn_host(host_path, args=["--listen", "grpc://127.0.0.1:0"]) as host:
        line = b""
        while not line.endswith(b"\n"):
            chunk = await host.stream.receive_some(1)
            assert chunk, "the host exited before printing its address"
            line += chunk
        url = line.decode().strip()
        assert url.startswith("http://127.0.0.1:")  # the host's first stdout line
        try:
            yield host, url.replace("http://", "grpc://", 1)
        finally:
            # A listening host does not exit when its stdin closes: spare the exit grace.
            with contextlib.suppress(ProcessLookupError):
                host.process.kill()


@asynccontextmanager
async def raw_lease(channel: GrpcChannel) -> AsyncIterator[str]:
    """Open a session on a raw channel, holding only its lease; leaving cancels the lease."""
    async with channel.server_stream(
        "OpenSession", pb.OpenSessionRequest(), pb.SessionEvent
    ) as events:
        first = await events.receive()
        assert first is not None and first.WhichOneof("event") == "opened"
        yield first.opened.session_id


#: Every way our client reaches a host, for the scenarios whose behaviour must not depend on it.
ENDPOINTS = ("rust-0.171.0", "serve", "rust-0.171.0 grpc", "rust-0.171.0 grpc+stdio")


class Connect(Protocol):
    """Open a connection to the endpoint under test (``connect(limits=...)`` and the like)."""

    def __call__(self, **options: Any) -> AbstractAsyncContextManager[Any]: ...


@pytest.fixture(params=ENDPOINTS)
def connect(request: pytest.FixtureRequest, rust_host_path: Path, serve_host_path: Path) -> Connect:
    """Each endpoint in turn: the stdio protocol to 0.171.0 and to ``codemode-trio serve``, and
    the host's gRPC API (``grpc://`` on a loopback port, and ``grpc+stdio://``) to 0.171.0."""
    endpoint: str = request.param
    if endpoint == "serve":
        return functools.partial(cm.open_host_process, serve_host_path)
    if endpoint.endswith("grpc+stdio"):
        return functools.partial(cm.open_host_process, rust_host_path, transport="grpc")
    if endpoint.endswith("grpc"):

        @asynccontextmanager
        async def over_tcp(**options: Any) -> AsyncIterator[cm.GrpcConnection]:
            async with (
                grpc_host(rust_host_path) as (host, target),
                cm.open_grpc_connection(target, **options) as conn,
            ):
                conn.process = host.process  # as open_host_process sets it
                yield conn

        return over_tcp
    return functools.partial(cm.open_host_process, rust_host_path)


# --------------------------------------------------------------------------- every transport

#: Every way an application reaches a host, for tests/integration/test_session_api.py.
TRANSPORTS = (
    "stdio-0.171.0",
    "stdio-serve",
    "grpc",
    "grpc+stdio",
    "websocket",
    "websocket-2-lanes",
    "reconnecting",
    "pool",
)


class Endpoint:
    """Sessions on one transport, and the connections they run on (whatever made them).

    ``open_session(delegate, limits=...)`` is the transport's own: a connection's, a pool's, or
    a reconnecting session's opener. Every connection opened for the endpoint is recorded in
    ``connections``, so a test can look beneath the session API and break what carries it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.connections: list[Any] = []
        self.open_session: Callable[..., AbstractAsyncContextManager[cm.SessionAPI]]

    def recording(self, opener: Callable[[], AbstractAsyncContextManager[Any]]) -> Any:
        """``opener``, recording each connection it opens."""

        @asynccontextmanager
        async def recorded() -> AsyncIterator[Any]:
            async with opener() as connection:
                self.connections.append(connection)
                yield connection

        return recorded

    def failures(self) -> list[str]:
        """Why connections failed, except those closed from our end (a session's own, say)."""
        return [
            failure
            for c in self.connections
            if (failure := c.failure) is not None and failure != "code-mode host connection closed"
        ]

    @property
    def live(self) -> list[Any]:
        """The connections alive now."""
        return [c for c in self.connections if c.alive]

    def active_delegates(self) -> int:
        """Delegate calls running on the live connections."""
        return sum(c.statistics().active_delegates for c in self.live)

    async def fail(self) -> None:
        """Fail every live connection: kill the host it owns, or else drop it ourselves.

        A WebSocket connection shares its listener with other tests, so it is dropped from
        our end (the same failure, seen from the session: the connection is gone).
        """
        for connection in self.live:
            if connection.process is not None:
                os.kill(connection.process.pid, signal.SIGKILL)
                await connection.wait_failed()
            else:
                await connection.aclose()


class OpenEndpoint(Protocol):
    """Open the endpoint under test for a block."""

    def __call__(self) -> AbstractAsyncContextManager[Endpoint]: ...


@pytest.fixture(scope="session")
def served_websocket_url() -> Iterator[str]:
    """One ``codemode-trio serve --listen ws://127.0.0.1:0`` for the whole run; its URL.

    Each connection gets a worker process of its own, so tests sharing the listener share
    nothing else; starting one per test would cost each an interpreter and V8.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "codemode_trio", "serve", "--listen", "ws://127.0.0.1:0"]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    ) as process:
        assert process.stdout is not None
        url = process.stdout.readline().decode().strip()
        try:
            assert url.startswith("ws://127.0.0.1:"), url
            yield url
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the listener and its workers
            process.stdout.close()


@pytest.fixture(params=TRANSPORTS)
def endpoint(
    request: pytest.FixtureRequest, rust_host_path: Path, serve_host_path: Path
) -> OpenEndpoint:
    """Each transport in turn: stdio to 0.171.0 and to ``serve``, 0.171.0's gRPC API over
    ``grpc://`` and ``grpc+stdio://``, ``serve`` over a WebSocket with one lane and with two,
    a reconnecting session (over stdio to 0.171.0), and a pool of two 0.171.0 hosts."""
    name: str = request.param
    rust = functools.partial(cm.open_host_process, rust_host_path)
    url = request.getfixturevalue("served_websocket_url") if "websocket" in name else ""

    @asynccontextmanager
    async def over_tcp() -> AsyncIterator[cm.GrpcConnection]:
        async with (
            grpc_host(rust_host_path) as (host, target),
            cm.open_grpc_connection(target) as conn,
        ):
            conn.process = host.process  # as open_host_process sets it
            yield conn

    openers: dict[str, Callable[[], AbstractAsyncContextManager[Any]]] = {
        "stdio-0.171.0": rust,
        "stdio-serve": functools.partial(cm.open_host_process, serve_host_path),
        "grpc": over_tcp,
        "grpc+stdio": functools.partial(rust, transport="grpc"),
        # Without dual-websocket-v1 among the capabilities offered, serve keeps one socket.
        "websocket": functools.partial(
            cm.open_websocket_connection, url, capabilities=ALL_CAPABILITIES
        ),
        "websocket-2-lanes": functools.partial(cm.open_websocket_connection, url),
    }

    @asynccontextmanager
    async def open_endpoint() -> AsyncIterator[Endpoint]:
        endpoint = Endpoint(name)
        if name == "reconnecting":
            opener = endpoint.recording(rust)

            def reconnecting(
                delegate: cm.Delegate | None = None, *, limits: cm.CellLimits | None = None
            ) -> AbstractAsyncContextManager[cm.SessionAPI]:
                return cm.open_reconnecting_session(opener, delegate=delegate, limits=limits)

            endpoint.open_session = reconnecting
            yield endpoint
        elif name == "pool":
            hosts = [endpoint.recording(rust), endpoint.recording(rust)]
            async with cm.open_host_pool(hosts) as pool:
                endpoint.open_session = pool.open_session
                yield endpoint
        else:
            async with endpoint.recording(openers[name])() as connection:
                if name == "websocket-2-lanes":
                    assert DUAL_WEBSOCKET in connection.capabilities
                elif name == "websocket":
                    assert DUAL_WEBSOCKET not in connection.capabilities
                endpoint.open_session = connection.open_session
                yield endpoint

    return open_endpoint
