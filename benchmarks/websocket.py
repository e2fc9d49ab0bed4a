#!/usr/bin/env python3
"""Tool calls per second over WebSocket versus stdio, both against the reference host.

Usage::

    python benchmarks/websocket.py [--calls N] [--repeat R]

The same client (codemode-trio, public API) runs one cell of N sequential tool calls
(``for (...) await tools.echo({i})``) against ``codemode-trio serve``: once spawned on stdio,
once on ``serve --listen ws://127.0.0.1:0`` through ``cm.open_websocket_connection``. Rounds
alternate which goes first; the best and median rates are printed with their ratio (target:
WebSocket within 1.3x of stdio, that is a rate ratio >= 1/1.3).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

import codemode_trio as cm

REPO = Path(__file__).resolve().parents[1]
SERVE = [sys.executable, "-m", "codemode_trio", "serve"]


def tools() -> cm.ToolRegistry:
    registry = cm.ToolRegistry()

    @registry.function(description="echo")
    async def echo(i: int) -> int:
        return i

    return registry


def source(calls: int) -> str:
    return f"for (let i = 0; i < {calls}; i++) await tools.echo({{i}}); text('done')"


async def timed(conn: cm.Connection, calls: int) -> float:
    async with conn.open_session(tools()) as session:
        await session.run(source(50))  # warm-up
        start = time.perf_counter()
        result = await session.run(source(calls))
        elapsed = time.perf_counter() - start
    assert result.text == "done", result
    return calls / elapsed


async def over_stdio(calls: int, host: Path) -> float:
    async with cm.open_host_process(host) as conn:
        return await timed(conn, calls)


async def over_websocket(calls: int) -> float:
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process,
                [*SERVE, "--listen", "ws://127.0.0.1:0"],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        )
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            line += await process.stdout.receive_some(1)
        try:
            async with cm.open_websocket_connection(line.decode().strip()) as conn:
                rate = await timed(conn, calls)
        finally:
            process.terminate()
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    host = REPO / ".bench-serve-host"
    host.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m codemode_trio.host\n'
    )
    host.chmod(0o755)
    rates: dict[str, list[float]] = {"stdio": [], "websocket": []}
    try:
        for round_number in range(args.repeat):
            order: list[Any] = (
                ["stdio", "websocket"] if round_number % 2 == 0 else ["websocket", "stdio"]
            )
            for name in order:
                if name == "stdio":
                    rate = trio.run(over_stdio, args.calls, host)
                else:
                    rate = trio.run(over_websocket, args.calls)
                rates[name].append(rate)
                print(f"  round {round_number + 1} {name:<10}{rate:>10,.0f} calls/s", flush=True)
    finally:
        host.unlink()
    best = {name: max(values) for name, values in rates.items()}
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name in rates:
        print(f"{name:<10} best {best[name]:>8,.0f} calls/s, median {median[name]:>8,.0f}")
    ratio = best["websocket"] / best["stdio"]
    ratio_median = median["websocket"] / median["stdio"]
    met = ratio >= 1 / 1.3
    print(
        f"ratio websocket/stdio: best {ratio:.2f}, median {ratio_median:.2f} "
        f"(target >= {1 / 1.3:.2f}, i.e. within 1.3x: {'MET' if met else 'NOT MET'})"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
