#!/usr/bin/env python3
"""Aggregate tool calls per second over a pool of 1, 2 and 4 local hosts.

Usage::

    python benchmarks/pool.py [--sessions N] [--calls N] [--repeat R]

``N`` concurrent sessions, placed by ``cm.open_host_pool`` on the least-loaded host, each run
one cell of sequential tool calls (``for (...) await tools.echo({i})``) at the same time; the
rate is all calls over the wall time of the slowest session. Local host processes stand in for
machines, so on a machine with few cores the pool shows how far one client process can drive
several hosts, not how a pool of machines scales. So each run also reports where the CPU went:
the client's CPU per call, the hosts' (children's) CPU per call, and how many cores the two kept
busy on average; with every core busy, no placement of sessions can raise the rate, and the
ceiling is cores / (CPU per call).
"""

from __future__ import annotations

import argparse
import os
import resource
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


class Run:
    """One measured run: its rate and where the CPU went."""

    def __init__(self, calls: int, wall: float, client_cpu: float, host_cpu: float) -> None:
        self.rate = calls / wall
        self.client_us = client_cpu / calls * 1e6
        self.host_us = host_cpu / calls * 1e6
        self.cores_busy = (client_cpu + host_cpu) / wall


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_run(hosts: int, sessions: int, calls: int) -> Run:
    # The hosts' CPU is counted once they exit and are reaped, when the pool closes; it
    # includes their start-up, which is small beside thousands of calls.
    client_before, hosts_before = time.process_time(), children_cpu()
    wall = trio.run(measure, hosts, sessions, calls)
    client_cpu = time.process_time() - client_before
    host_cpu = children_cpu() - hosts_before
    return Run(sessions * calls, wall, client_cpu, host_cpu)


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
        return max(finished) - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; {args.sessions} concurrent sessions x {args.calls} calls")
    runs: dict[int, list[Run]] = {1: [], 2: [], 4: []}
    for round_number in range(args.repeat):
        order = list(runs) if round_number % 2 == 0 else list(reversed(runs))
        for hosts in order:
            run = measure_run(hosts, args.sessions, args.calls)
            runs[hosts].append(run)
            print(
                f"  round {round_number + 1}: {hosts} host(s) {run.rate:>9,.0f} calls/s; "
                f"CPU per call: client {run.client_us:>4.0f} us, hosts {run.host_us:>4.0f} us; "
                f"{run.cores_busy:.2f} cores busy",
                flush=True,
            )
    base = max(run.rate for run in runs[1])
    cpus = os.cpu_count() or 1
    for hosts, values in runs.items():
        best = max(values, key=lambda run: run.rate)
        ceiling = cpus / ((best.client_us + best.host_us) / 1e6)
        print(
            f"{hosts} host(s): best {best.rate:>9,.0f} calls/s, median "
            f"{statistics.median(run.rate for run in values):>9,.0f}; best / one host's best "
            f"{best.rate / base:.2f}; {best.cores_busy:.2f} of {cpus} cores busy; "
            f"ceiling at this CPU per call {ceiling:,.0f} calls/s"
        )
    print(f"target: 4 hosts >= 3x one host (needs >= 4 idle CPUs; this machine has {cpus})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
