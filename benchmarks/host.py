"""The reference host (``codemode-trio serve``) beside the Rust host 0.171.0, same client.

Three figures, each measured through codemode-trio's own client over a real subprocess:

- **cell start**: execute a trivial cell and wait for its result (median of many cells);
- **sequential tool calls/s**: one cell awaiting ``tools.echo`` in a loop, reported as a rate
  and as serve's ratio to the Rust host;
- **held cells**: 64 sessions x 4 cells, all started and parked at once (every cell awaits a
  promise that never settles), then shut down;
- **connection start on tcp://** (serve only: the Rust host has no network listener): from the
  TCP connect to ``connection/ready`` and the first cell's result, each connection in a worker
  process of its own; *warm* when the listener's spare worker had time to start, *back to back*
  when the next client connects the moment the previous one has its answer (so the spare is
  still starting, or several start at once).

Rounds are interleaved (Rust, serve, Rust, serve, ...) so a busy machine hurts both alike;
the best and the median of the rounds are printed.

    python -m benchmarks.host [--rounds 5] [--calls 300] [--cells 40]
"""

from __future__ import annotations

import argparse
import os
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

import codemode_trio as cm
from codemode_trio import hostbin

REPO = Path(__file__).resolve().parents[1]
SESSIONS = 64
CELLS_PER_SESSION = 4


def serve_executable(directory: Path) -> Path:
    """A host binary path that runs ``codemode-trio serve`` from this checkout."""
    path = directory / "codemode-trio-host"
    path.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m codemode_trio.host "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def echo_tools() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(i: int) -> int:
        return i

    return tools


async def cell_start_ms(host: Path, cells: int) -> float:
    """Median milliseconds from execute to the result of ``text('x')``."""
    times = []
    async with cm.open_host_process(host) as conn, conn.open_session() as session:
        for _ in range(cells):
            start = time.perf_counter()
            cell = await session.execute("text('x')")
            await cell.initial_response()
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def tool_calls_per_second(host: Path, calls: int) -> float:
    source = f"for (let i = 0; i < {calls}; i++) {{ await tools.echo({{i}}); }} text('done')"
    async with cm.open_host_process(host) as conn, conn.open_session(echo_tools()) as session:
        await session.run("await tools.echo({i: 0})")  # warm up the tool path
        start = time.perf_counter()
        result = await session.run(source, yield_time_ms=60_000)
        elapsed = time.perf_counter() - start
    if result.text != "done":
        raise RuntimeError(f"the tool loop failed: {result!r}")
    return calls / elapsed


async def held_cells_seconds(host: Path) -> float:
    """Seconds to start and park 64 x 4 cells, check every one is live, and shut down."""
    start = time.perf_counter()
    async with cm.open_host_process(host) as conn:
        sessions = [await conn.start_session() for _ in range(SESSIONS)]
        live = 0

        async def fill(session: cm.Session) -> None:
            nonlocal live
            for _ in range(CELLS_PER_SESSION):
                cell = await session.execute("await new Promise(() => {})", yield_time_ms=0)
                if (await cell.initial_response()).kind == "yielded":
                    live += 1

        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(fill, session)
        if live != SESSIONS * CELLS_PER_SESSION:
            raise RuntimeError(f"only {live} cells were held")
        for session in sessions:
            await session.aclose()
    return time.perf_counter() - start


async def connection_start_ms(connections: int, *, pause: float) -> list[float]:
    """Milliseconds from TCP connect to ``connection/ready`` on ``serve --listen tcp://``."""
    argv = [sys.executable, "-m", "codemode_trio", "serve", "--listen", "tcp://127.0.0.1:0"]
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    times = []
    try:
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
        port = int(line.decode().strip().rsplit(":", 1)[1])
        for _ in range(connections):
            await trio.sleep(pause)  # lets the spare worker start (or not, with 0)
            start = time.perf_counter()
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with cm.open_connection(stream) as conn:
                times.append((time.perf_counter() - start) * 1000)
                async with conn.open_session() as session:
                    await session.run("text('x')")
    finally:
        process.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await process.wait()
    return times


def report_serve(name: str, values: list[float]) -> None:
    print(f"{name}:")
    print(
        f"  serve         best {min(values):9.2f} ms   median {statistics.median(values):9.2f} ms"
        f"   worst {max(values):9.2f} ms   ({len(values)} connections)"
    )


def report(name: str, unit: str, rust: list[float], serve: list[float], *, higher: bool) -> None:
    pick: Callable[[list[float]], float] = max if higher else min
    print(f"{name}:")
    for label, values in (("rust 0.171.0", rust), ("serve", serve)):
        print(
            f"  {label:13} best {pick(values):9.2f} {unit}   "
            f"median {statistics.median(values):9.2f} {unit}"
        )
    ratio = statistics.median(serve) / statistics.median(rust)
    print(f"  serve / rust (median): {ratio:.2f}x")


async def main(rounds: int, calls: int, cells: int) -> None:
    rust_host = hostbin.locate_host()
    with tempfile.TemporaryDirectory() as tmp:
        serve_host = serve_executable(Path(tmp))
        hosts = {"rust": rust_host, "serve": serve_host}
        starts: dict[str, list[float]] = {"rust": [], "serve": []}
        rates: dict[str, list[float]] = {"rust": [], "serve": []}
        held: dict[str, list[float]] = {"rust": [], "serve": []}
        for _ in range(rounds):
            for name, host in hosts.items():
                starts[name].append(await cell_start_ms(host, cells))
                rates[name].append(await tool_calls_per_second(host, calls))
                held[name].append(await held_cells_seconds(host))
        warm = await connection_start_ms(max(5, rounds * 2), pause=5.0)
        cold = await connection_start_ms(max(5, rounds * 2), pause=0.0)
    print(f"{rounds} interleaved rounds, {os.cpu_count()} CPUs")
    report("cell start (execute -> result)", "ms", starts["rust"], starts["serve"], higher=False)
    report("sequential tool calls", "calls/s", rates["rust"], rates["serve"], higher=True)
    report(
        f"{SESSIONS} sessions x {CELLS_PER_SESSION} cells held",
        "s",
        held["rust"],
        held["serve"],
        higher=False,
    )
    report_serve("tcp:// connection start, warm (connect -> connection/ready)", warm)
    report_serve("tcp:// connection start, back to back (connect -> connection/ready)", cold)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--cells", type=int, default=40)
    args = parser.parse_args()
    trio.run(main, args.rounds, args.calls, args.cells)
