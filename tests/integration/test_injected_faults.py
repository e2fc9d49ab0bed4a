"""Our client against a host with faults injected into what it sends.

Each fault ends the connection in one ``ConnectionFailed`` that names it, every started cell
is closed exactly once, and nothing hangs; a slow host only makes things slower. Each test runs
twice: host 0.171.0 behind ``python -m codemode_trio.faults``, and ``codemode-trio serve
--fault``, both real processes, as any client would see them. The faults a WebSocket can carry
run a third time, against ``codemode-trio serve --listen ws://``.
"""

from __future__ import annotations

import collections
import functools
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import codemode_trio as cm
from codemode_trio.protocol.handshake import ALL_CAPABILITIES

from ..conftest import REPO

SOURCE = "let sum = 0; for (let i = 0; i < 5; i++) sum += await tools.echo({v: i}); text(sum)"
CELLS = 3
# Short deadlines so that a stalled host is noticed quickly: a wait may take its yield time
# plus one second of grace plus this.
CONFIG = cm.ConnectionConfig(transport_timeout=0.5)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for member in exc.exceptions for leaf in _leaves(member)]
    return [exc]


@attrs.frozen
class Host:
    """How to start a host: the executable, its arguments and the environment it adds."""

    path: Path
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None


def _wrapper(directory: Path, host: Path, fault: str) -> Host:
    path = directory / f"host-with-{fault.replace('=', '-')}"
    path.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m codemode_trio.faults '
        f'--fault "{fault}" -- "{host}"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return Host(path)


def _serve(fault: str) -> Host:
    args = ("-m", "codemode_trio", "serve", "--fault", fault)
    return Host(Path(sys.executable), args, {"PYTHONPATH": str(REPO)})


@pytest.fixture(params=["proxied-0.171.0", "serve"])
def faulty_host(
    request: pytest.FixtureRequest, tmp_path: Path, rust_host_path: Path
) -> Callable[[str], Host]:
    """Makes the host with a given fault: 0.171.0 behind the proxy, or serve --fault."""
    if request.param == "serve":
        return _serve
    return functools.partial(_wrapper, tmp_path, rust_host_path)


#: Opens a connection to the host under test.
Connect = Callable[[], AbstractAsyncContextManager[cm.Connection]]


def _process(host: Host) -> Connect:
    return functools.partial(
        cm.open_host_process, host.path, args=host.args, env=host.env, config=CONFIG
    )


class Run:
    """What one run saw: cells started, cells closed (in order), final texts."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.closed: list[str] = []
        self.results: list[Any] = []


async def _run_cells(connect: Connect, run: Run) -> None:
    """Run CELLS cells at once, each making five tool calls, recording into ``run``."""
    tools = cm.ToolRegistry()
    started, closed, results = run.started, run.closed, run.results

    @tools.function(description="Return v")
    async def echo(v: int) -> int:
        return v

    @tools.on_cell_closed
    def on_closed(cell_id: str) -> None:
        closed.append(cell_id)

    async def one(session: cm.Session) -> None:
        cell = await session.execute(SOURCE, yield_time_ms=100)
        started.append(cell.cell_id)
        response = await cell.initial_response()
        # Output comes with the observation that follows it: a yield may carry the text.
        text = response.text
        while response.kind == "yielded":
            response = (await session.wait(cell.cell_id, yield_time_ms=100)).response
            text += response.text
        results.append(text)

    async with (
        connect() as conn,
        conn.open_session(delegate=tools) as session,
        trio.open_nursery() as nursery,
    ):
        for _ in range(CELLS):
            nursery.start_soon(one, session)


@pytest.mark.parametrize(
    ("fault", "clue"),
    [
        ("drop-after=5", "fault injected: drop-after=5"),
        ("stall-after=5", "timed out waiting"),
        ("garbage-after=5", "failed to decode code-mode IPC frame"),
        ("truncate-after=5", "early eof"),
        ("oversize-after=5", "code-mode IPC frame length 67108865 exceeds 67108864 bytes"),
        ("wrong-response-id=2", "unknown request ID RequestId(1000002)"),
        ("reuse-delegate-id=2", "duplicate code-mode delegate request ID DelegateRequestId(1)"),
        ("silent-exit-after=5", "exited with status 0 and wrote nothing to stderr"),
    ],
)
async def test_each_fault_ends_in_one_clear_connection_failure(
    faulty_host: Callable[[str], Host], fault: str, clue: str
) -> None:
    host = faulty_host(fault)
    run = Run()
    with trio.fail_after(20):
        with pytest.raises(BaseException) as raised:  # noqa: PT011 - checked leaf by leaf below
            await _run_cells(_process(host), run)
    leaves = _leaves(raised.value)
    assert all(isinstance(leaf, cm.ConnectionFailed) for leaf in leaves), leaves
    assert {str(leaf) for leaf in leaves} == {str(leaves[0])}, "one reason for every caller"
    assert clue in str(leaves[0])
    counts = collections.Counter(run.closed)
    assert all(count == 1 for count in counts.values()), counts
    assert set(run.started) <= set(counts)


async def test_a_slow_host_only_makes_the_work_slower(faulty_host: Callable[[str], Host]) -> None:
    host = faulty_host("slow=20")
    run = Run()
    with trio.fail_after(20):
        await _run_cells(_process(host), run)
    assert run.results == ["10"] * CELLS
    assert sorted(run.closed) == sorted(run.started) == ["1", "2", "3"]


@asynccontextmanager
async def _serve_websocket(fault: str) -> AsyncIterator[str]:
    """``codemode-trio serve --listen ws://127.0.0.1:0 --fault FAULT``; yield its URL."""
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process,
                [sys.executable, *_serve(fault).args, "--listen", "ws://127.0.0.1:0"],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        )
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, "serve exited before printing its URL"
            line += chunk
        try:
            yield line.decode().strip()
        finally:
            process.terminate()


def _open_descriptors() -> set[str]:
    # The exception that ends the run holds its frames, and with them any socket left open:
    # the garbage collector would close it much later, so count before it can.
    return set(os.listdir("/proc/self/fd"))


def _websocket(url: str, *, bulk_lane: bool) -> Connect:
    # Without the bulk lane every frame, tool calls included, goes through the faults.
    capabilities = {} if bulk_lane else {"capabilities": ALL_CAPABILITIES}
    return functools.partial(cm.open_websocket_connection, url, config=CONFIG, **capabilities)


LANES = pytest.mark.parametrize("bulk_lane", [True, False], ids=["two-lanes", "one-lane"])


def _over_both_lanes(fault: str, clue: str) -> list[Any]:
    return [
        pytest.param(fault, clue, lanes, id=f"{fault}-{'two-lanes' if lanes else 'one-lane'}")
        for lanes in (True, False)
    ]


@pytest.mark.parametrize(
    ("fault", "clue", "bulk_lane"),
    [
        *_over_both_lanes("drop-after=5", "code-mode host closed"),
        *_over_both_lanes("stall-after=5", "timed out waiting"),
        *_over_both_lanes("garbage-after=5", "failed to decode code-mode IPC frame"),
        *_over_both_lanes("wrong-response-id=2", "unknown request ID RequestId(1000002)"),
        *_over_both_lanes("silent-exit-after=5", "code-mode host closed"),
        # Tool calls, the only delegate requests here, would take the bulk lane, which the
        # faults leave alone (they act on the control lane): with this fault serve offers no
        # bulk lane, so even a client asking for one meets it.
        *_over_both_lanes(
            "reuse-delegate-id=2", "duplicate code-mode delegate request ID DelegateRequestId(1)"
        ),
    ],
)
async def test_each_fault_over_a_websocket_ends_in_one_clear_connection_failure(
    fault: str, clue: str, *, bulk_lane: bool
) -> None:
    run = Run()
    with trio.fail_after(30):
        async with _serve_websocket(fault) as url:
            before = _open_descriptors()
            with pytest.raises(BaseException) as raised:  # noqa: PT011 - checked leaf by leaf
                await _run_cells(_websocket(url, bulk_lane=bulk_lane), run)
            assert _open_descriptors() == before, "every socket of the connection is closed"
    leaves = _leaves(raised.value)
    assert all(isinstance(leaf, cm.ConnectionFailed) for leaf in leaves), leaves
    assert {str(leaf) for leaf in leaves} == {str(leaves[0])}, "one reason for every caller"
    assert clue in str(leaves[0])
    counts = collections.Counter(run.closed)
    assert all(count == 1 for count in counts.values()), counts
    assert set(run.started) <= set(counts)


@LANES
async def test_a_slow_host_over_a_websocket_only_makes_the_work_slower(*, bulk_lane: bool) -> None:
    run = Run()
    with trio.fail_after(30):
        async with _serve_websocket("slow=20") as url:
            started = trio.current_time()
            await _run_cells(_websocket(url, bulk_lane=bulk_lane), run)
            elapsed = trio.current_time() - started
    assert run.results == ["10"] * CELLS
    # Every frame through the faults was held 20 ms, one after another: at least
    # connection/ready and a response per cell, and on one lane the 15 tool calls too.
    frames = 1 + CELLS + (0 if bulk_lane else 5 * CELLS)
    assert elapsed >= frames * 0.020
    assert sorted(run.closed) == sorted(run.started) == ["1", "2", "3"]
