"""A pool of real hosts: placement on the least-loaded host, a lost host without lost sessions."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

import codemode_trio as cm


async def test_sessions_spread_over_the_least_loaded_hosts(host_path: Path) -> None:
    openers = [partial(cm.open_host_process, host_path) for _ in range(2)]
    with trio.fail_after(60):
        async with (
            cm.open_host_pool(openers, names=["a", "b"]) as pool,
            pool.open_session() as first,
            pool.open_session() as second,
            pool.open_session() as third,
        ):
            sessions = {h.name: h.sessions for h in pool.statistics()}
            assert sorted(sessions.values()) == [1, 2]
            for session in (first, second, third):
                assert (await session.run("text(6 * 7)")).text == "42"


async def test_losing_a_host_loses_only_its_sessions_and_the_host_comes_back(
    host_path: Path,
) -> None:
    connections: list[cm.Connection] = []

    @asynccontextmanager
    async def opener() -> AsyncIterator[cm.Connection]:
        async with cm.open_host_process(host_path) as connection:
            connections.append(connection)
            yield connection

    with trio.fail_after(60):
        async with cm.open_host_pool([opener, opener], backoff=(0.05,)) as pool:
            async with pool.open_session() as one, pool.open_session() as two:
                assert {h.sessions for h in pool.statistics()} == {1}
                doomed = connections[0]
                assert doomed.process is not None
                os.kill(doomed.process.pid, signal.SIGKILL)
                await doomed.wait_failed()
                results = []
                for session in (one, two):
                    try:
                        results.append((await session.run("text('alive')")).text)
                    except cm.ConnectionFailed:
                        results.append("lost")
                assert sorted(results) == ["alive", "lost"]  # only the dead host's session
            # The dead host is opened again after its backoff; new sessions use both hosts.
            await pool.wait_all_up()
            stats = pool.statistics()
            assert sum(h.opened for h in stats) == 3
            assert all(h.alive for h in stats)
            assert sorted(h.failures for h in stats) == [0, 1]
            async with pool.open_session() as again:
                assert (await again.run("text('back')")).text == "back"


async def test_a_pool_needs_openers_and_sane_backoff() -> None:
    with pytest.raises(cm.UsageError, match="at least one opener"):
        async with cm.open_host_pool([]):
            pass
    with pytest.raises(cm.UsageError, match="backoff"):
        async with cm.open_host_pool([cm.open_host_process], backoff=(-1,)):
            pass
