"""A pool of hosts: sessions spread over several connections, failed hosts brought back.

.. code-block:: python

    openers = [cm.open_host_process, cm.open_host_process,
               lambda: cm.open_grpc_connection("grpc://10.0.0.7:7070")]
    async with cm.open_host_pool(openers) as pool:
        async with pool.open_session(delegate=tools) as session:   # on the least-loaded host
            await session.run("text(1)")

Each host is an *opener*: a callable returning an async context manager of a connection (a
:class:`~codemode_trio.Connection`, or anything with its ``open_session``/``alive``/
``wait_failed`` API, such as a gRPC connection). The pool keeps one connection per host open in
a task of its own; when it fails, that host is taken out of placement, its sessions fail (only
theirs), and it is opened again after a backoff that doubles up to a cap. A session goes to the
live host with the fewest open sessions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio
from trio_util import AsyncValue

from ._groups import unwrapping_nursery
from .client.delegates import Delegate
from .client.session import Session
from .errors import ConnectionFailed, UsageError
from .protocol.content import CellLimits

__all__ = ["HostPool", "HostStatistics", "open_host_pool"]

Opener = Callable[[], AbstractAsyncContextManager[Any]]


@attrs.frozen
class HostStatistics:
    """One host of a pool: whether it is up, its load and its history."""

    name: str
    alive: bool
    sessions: int
    opened: int
    failures: int
    last_failure: str | None


class _Host:
    def __init__(self, name: str, opener: Opener) -> None:
        self.name = name
        self.opener = opener
        self.connection: Any = None
        self.sessions = 0
        self.opened = 0
        self.failures = 0
        self.last_failure: str | None = None
        # Whether the first attempt to open it has ended (up, or failed).
        self.tried = False


class HostPool:
    """Sessions placed on the least-loaded live host of several (see :func:`open_host_pool`)."""

    def __init__(self, hosts: list[_Host], first_up_timeout: float) -> None:
        """Created by :func:`open_host_pool`; not by applications."""
        self._hosts = hosts
        self._first_up_timeout = first_up_timeout
        # Bumped whenever a host comes up or goes down, so waiters need no polling.
        self._changes = AsyncValue(0)

    def statistics(self) -> list[HostStatistics]:
        """Per host: name, whether its connection is up, open sessions, opens and failures."""
        return [
            HostStatistics(
                host.name,
                host.connection is not None and host.connection.alive,
                host.sessions,
                host.opened,
                host.failures,
                host.last_failure,
            )
            for host in self._hosts
        ]

    async def wait_all_up(self) -> None:
        """Wait until every host of the pool has a live connection."""
        await self._changes.wait_value(lambda _: len(self._live()) == len(self._hosts))

    def _live(self) -> list[_Host]:
        return [h for h in self._hosts if h.connection is not None and h.connection.alive]

    async def _pick(self) -> _Host:
        live = self._live()
        if not live:
            with trio.move_on_after(self._first_up_timeout):
                await self._changes.wait_value(lambda _: bool(self._live()))
            live = self._live()
            if not live:
                reasons = "; ".join(
                    f"{h.name}: {h.last_failure or 'not connected yet'}" for h in self._hosts
                )
                raise ConnectionFailed(f"no host of the pool is alive ({reasons})")
        return min(live, key=lambda h: h.sessions)

    @asynccontextmanager
    async def open_session(
        self, delegate: Delegate | None = None, *, limits: CellLimits | None = None
    ) -> AsyncIterator[Session]:
        """Open a session on the live host with the fewest sessions, for the block."""
        host = await self._pick()
        host.sessions += 1
        try:
            async with host.connection.open_session(delegate, limits=limits) as session:
                yield session
        finally:
            host.sessions -= 1

    async def _keep_up(self, host: _Host, backoff: Sequence[float]) -> None:
        """Hold the host's connection open; after a failure, open it again after a pause."""
        attempt = 0
        while True:
            try:
                async with host.opener() as connection:
                    host.connection = connection
                    host.opened += 1
                    host.tried = True
                    attempt = 0
                    self._changes.value += 1
                    reason = await connection.wait_failed()
            except (ConnectionFailed, OSError) as exc:
                reason = str(exc)
            except Exception as exc:
                # An opener that fails in its own way (a HostNotFound, a handshake refusal):
                # the host is down all the same, and the pool keeps trying.
                reason = f"{type(exc).__name__}: {exc}"
            host.connection = None
            host.failures += 1
            host.last_failure = reason
            host.tried = True
            self._changes.value += 1
            await trio.sleep(backoff[min(attempt, len(backoff) - 1)])
            attempt += 1


@asynccontextmanager
async def open_host_pool(
    openers: Sequence[Opener],
    *,
    names: Sequence[str] | None = None,
    backoff: Sequence[float] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0),
    first_up_timeout: float = 30.0,
) -> AsyncIterator[HostPool]:
    """Keep a connection to each host open for the block; yield the :class:`HostPool`.

    ``openers`` make one connection each (``cm.open_host_process``, ``functools.partial(
    cm.open_host_process, path)``, ``lambda: cm.open_grpc_connection(target)``...). ``backoff``
    is how long a failed host rests before each new attempt (the last value repeats).
    ``first_up_timeout`` bounds how long :meth:`HostPool.open_session` waits for some host
    to be up before it raises :class:`~codemode_trio.ConnectionFailed`.
    """
    if not openers:
        raise UsageError("a host pool needs at least one opener")
    if not backoff or any(pause < 0 for pause in backoff):
        raise UsageError("backoff must be a non-empty sequence of pauses >= 0")
    labels = list(names) if names is not None else [f"host-{n}" for n in range(1, len(openers) + 1)]
    if len(labels) != len(openers):
        raise UsageError("names must have one entry per opener")
    hosts = [_Host(label, opener) for label, opener in zip(labels, openers, strict=True)]
    pool = HostPool(hosts, first_up_timeout)
    async with unwrapping_nursery() as nursery:
        for host in hosts:
            nursery.start_soon(pool._keep_up, host, tuple(backoff), name=f"pool {host.name}")
        # Placement means something only once every host had its chance to come up.
        with trio.move_on_after(first_up_timeout):
            await pool._changes.wait_value(lambda _: all(host.tried for host in hosts))
        try:
            yield pool
        finally:
            nursery.cancel_scope.cancel()
