"""Our client against a host with faults injected into what it sends.

Each fault ends the connection in one ``ConnectionFailed`` that names it, every started cell
is closed exactly once, and nothing hangs; a slow host only makes things slower. Each test runs
twice: host 0.171.0 behind ``python -m codemode_trio.faults``, and ``codemode-trio serve
--fault``, both real processes, as any client would see them.
"""

from __future__ import annotations

import collections
import functools
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import codemode_trio as cm

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


class Run:
    """What one run saw: cells started, cells closed (in order), final texts."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.closed: list[str] = []
        self.results: list[Any] = []


async def _run_cells(host: Host, run: Run) -> None:
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
        while response.kind == "yielded":
            response = (await session.wait(cell.cell_id, yield_time_ms=100)).response
        results.append(response.text)

    async with (
        cm.open_host_process(host.path, args=host.args, env=host.env, config=CONFIG) as conn,
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
            await _run_cells(host, run)
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
        await _run_cells(host, run)
    assert run.results == ["10"] * CELLS
    assert sorted(run.closed) == sorted(run.started) == ["1", "2", "3"]
