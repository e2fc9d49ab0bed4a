#!/usr/bin/env python3
"""Aggregate tool calls per second over a pool of 1, 2 and 4 local hosts.

Usage::

    python benchmarks/pool.py [--sessions N] [--calls N] [--repeat R]

``N`` concurrent sessions, placed by ``cm.open_host_pool`` on the least-loaded host, each run
one cell of sequential tool calls (``for (...) await tools.echo({i})``) at the same time; the
rate is all calls over the wall time of the slowest session. Local host processes stand in for
machines, so on a machine with few cores the pool shows how far one client process can drive
several hosts, not how a pool of machines scales: the report says how many CPUs there are.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial

import trio

import codemode_trio as cm
from codemode_trio import hostbin


def registry() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(i: int) -> int:
        return i

    return tools


async def measure(hosts: int, sessions: int, calls: int) -> float:
    path = hostbin.locate_host()
    openers = [partial(cm.open_host_process, path) for _ in range(hosts)]
    source = f"for (let i = 0; i < {calls}; i++) await tools.echo({{i}}); text('done')"
    async with cm.open_host_pool(openers) as pool:
        async with trio.open_nursery() as nursery:
            ready = trio.Event()
            finished: list[float] = []

            async def one() -> None:
                async with pool.open_session(registry()) as session:
                    await ready.wait()
                    result = await session.run(source)
                    assert result.text == "done"
                    finished.append(time.perf_counter())

            for _ in range(sessions):
                nursery.start_soon(one)
            await trio.sleep(0.5)  # every session open before the clock starts
            start = time.perf_counter()
            ready.set()
        return sessions * calls / (max(finished) - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; {args.sessions} concurrent sessions x {args.calls} calls")
    rates: dict[int, list[float]] = {1: [], 2: [], 4: []}
    for round_number in range(args.repeat):
        order = list(rates) if round_number % 2 == 0 else list(reversed(rates))
        for hosts in order:
            rate = trio.run(measure, hosts, args.sessions, args.calls)
            rates[hosts].append(rate)
            print(f"  round {round_number + 1}: {hosts} host(s) {rate:>9,.0f} calls/s", flush=True)
    base = max(rates[1])
    for hosts, values in rates.items():
        print(
            f"{hosts} host(s): best {max(values):>9,.0f} calls/s, median "
            f"{statistics.median(values):>9,.0f}; best / one host's best {max(values) / base:.2f}"
        )
    print(
        f"target: 4 hosts >= 3x one host (needs >= 4 idle CPUs; this machine has {os.cpu_count()})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
