#!/usr/bin/env python3
"""Tool calls per second over WebSocket versus stdio, both against the reference host.

Usage::

    python benchmarks/websocket.py [--calls N] [--repeat R] [--single-socket]

The same client (codemode-trio, public API) runs one cell of N sequential tool calls
(``for (...) await tools.echo({i})``) against ``codemode-trio serve``: once spawned on stdio,
once on ``serve --listen ws://127.0.0.1:0`` through ``cm.open_websocket_connection`` (with the
``dual-websocket-v1`` bulk lane, or one socket with ``--single-socket``). Rounds alternate which
goes first; the best and median rates are printed with their ratio (target: WebSocket within
1.3x of stdio, that is a rate ratio >= 1/1.3), and the client's CPU time per call (the host's
is not counted: it is another process).
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
from codemode_trio.connect.websocket import WEBSOCKET_CAPABILITIES
from codemode_trio.protocol.handshake import ALL_CAPABILITIES

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


Sample = tuple[float, float]  # calls per second, client CPU microseconds per call


async def timed(conn: cm.Connection, calls: int) -> Sample:
    async with conn.open_session(tools()) as session:
        await session.run(source(50))  # warm-up
        start = time.perf_counter()
        cpu = time.process_time()
        result = await session.run(source(calls))
        cpu = time.process_time() - cpu
        elapsed = time.perf_counter() - start
    assert result.text == "done", result
    return calls / elapsed, cpu / calls * 1e6


async def over_stdio(calls: int, host: Path) -> Sample:
    async with cm.open_host_process(host) as conn:
        return await timed(conn, calls)


async def over_websocket(calls: int, capabilities: tuple[str, ...]) -> Sample:
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
            url = line.decode().strip()
            async with cm.open_websocket_connection(url, capabilities=capabilities) as conn:
                sample = await timed(conn, calls)
        finally:
            process.terminate()
    return sample


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--single-socket", action="store_true", help="do not offer the bulk lane")
    args = parser.parse_args()
    capabilities = ALL_CAPABILITIES if args.single_socket else WEBSOCKET_CAPABILITIES
    host = REPO / ".bench-serve-host"
    host.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m codemode_trio.host\n'
    )
    host.chmod(0o755)
    rates: dict[str, list[float]] = {"stdio": [], "websocket": []}
    cpus: dict[str, list[float]] = {"stdio": [], "websocket": []}
    try:
        for round_number in range(args.repeat):
            order: list[Any] = (
                ["stdio", "websocket"] if round_number % 2 == 0 else ["websocket", "stdio"]
            )
            for name in order:
                if name == "stdio":
                    rate, cpu = trio.run(over_stdio, args.calls, host)
                else:
                    rate, cpu = trio.run(over_websocket, args.calls, capabilities)
                rates[name].append(rate)
                cpus[name].append(cpu)
                print(
                    f"  round {round_number + 1} {name:<10}{rate:>10,.0f} calls/s"
                    f"{cpu:>8,.0f} us client CPU/call",
                    flush=True,
                )
    finally:
        host.unlink()
    best = {name: max(values) for name, values in rates.items()}
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name in rates:
        print(
            f"{name:<10} best {best[name]:>8,.0f} calls/s, median {median[name]:>8,.0f}; "
            f"client CPU/call median {statistics.median(cpus[name]):,.0f} us"
        )
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
