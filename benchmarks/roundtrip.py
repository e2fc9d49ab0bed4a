#!/usr/bin/env python3
"""Tool-call round trips per second: codemode-trio versus a minimal blocking client.

Usage::

    python benchmarks/roundtrip.py [--host PATH] [--sequential N] [--batched N]
                                   [--batch-size K] [--repeat R] [--pin CPU]
                                   [--profile {cprofile,pyinstrument}]

Three clients drive the same ``codex-code-mode-host`` binary (found with
``codemode_trio.hostbin.locate_host``, or ``--host``) through two cells:

- **sequential**: ``for (let i = 0; i < N; i++) await tools.echo({i})``: one tool call in
  flight at a time, so every call is a full round trip host -> client -> host;
- **batched**: the same N calls issued ``K`` at a time with ``Promise.all`` (K <= 50: larger
  bursts make host 0.171.0 drop the connection), all batches inside one cell.

The clients do the same work: the same echo tool (its result is its input), the same cell
source, ``yield_time_ms`` large enough that the cell never yields, a JSON decode of every frame
received.

- ``minimal`` (``benchmarks/_minimal_client.py``), the baseline the targets are set against:
  ``subprocess`` pipes, ``json`` and ``struct``, no event loop, no threads; it answers each
  ``tool/invoke`` as soon as it has read it.
- ``trio-floor`` (``benchmarks/_minimal_trio_client.py``): the same client on Trio, as thin as
  Trio allows: one task, raw non-blocking fds, ``wait_readable`` when the pipe is empty. No
  Trio client can do less per round trip, so its ratio to ``minimal`` is the most a Trio client
  can reach on this machine, and codemode-trio's ratio to it is the cost of codemode-trio's
  own structure (driver task, one task per delegate call, checks).
- ``codemode-trio`` goes through its public API: ``open_host_process``, ``open_session`` with a
  ``ToolRegistry``, ``session.run``.

Each measurement spawns a fresh host, opens a session, runs a short warm-up cell of the same
shape, then times one cell of N calls (execute sent -> final result received). Each measurement
is repeated R times, rotating which client goes first; the best and the median are reported,
with the CPU time per call of the client process and of the host. The targets are
ours/minimal >= 0.95 for sequential calls and >= 0.9 for batched ones, on the best runs; the
exit status is 1 when one is missed.

Sequential round trips are latency-bound, and on a small VM their rate depends a lot on whether
the client and the host happen to share a CPU, and on neighbours: single runs of the same
client differ by 20 % or more, which is why the best of several runs is compared. ``--pin CPU``
puts this process and every host it spawns on one CPU, which makes the numbers steadier (and
measures CPU cost rather than latency). ``--profile`` then runs codemode-trio once more per
mode counting its Trio scheduler work per call (task steps, batches, spawns), and once under
cProfile (or pyinstrument, if installed), and prints where its time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from _minimal_client import MinimalClient  # beside this script
from _minimal_trio_client import MinimalTrioClient

import codemode_trio as cm
from codemode_trio.hostbin import locate_host

YIELD_TIME_MS = 60_000
WARMUP_CALLS = 200
#: Rate targets, ours/minimal (best runs), and client-CPU targets, ours/trio-floor (medians).
TARGETS = {"sequential": 0.9, "batched": 1.0}
CPU_TARGETS = {"sequential": 1.5, "batched": 2.0}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sequential_source(calls: int) -> str:
    """A cell awaiting ``calls`` echo calls one after the other; its text is the sum of i."""
    return (
        "let s = 0;\n"
        f"for (let i = 0; i < {calls}; i++) s += (await tools.echo({{i}})).i;\n"
        "text(s);\n"
    )


def batched_source(calls: int, batch: int) -> str:
    """A cell making ``calls`` echo calls ``batch`` at a time with ``Promise.all``."""
    return (
        "let s = 0;\n"
        f"for (let b = 0; b < {calls}; b += {batch}) {{\n"
        "  const pending = [];\n"
        f"  for (let i = b; i < Math.min(b + {batch}, {calls}); i++) "
        "pending.push(tools.echo({i}));\n"
        "  for (const r of await Promise.all(pending)) s += r.i;\n"
        "}\n"
        "text(s);\n"
    )


def expected_text(calls: int) -> str:
    """What both cells print: the sum of every echoed ``i``."""
    return str(calls * (calls - 1) // 2)


def host_cpu_seconds(pid: int) -> float:
    """User + system CPU time the host process has used so far (from /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class Stopwatch:
    """Wall time, this process's CPU time and the host's CPU time of the ``with`` block."""

    def __init__(self, host_pid: int) -> None:
        self.host_pid = host_pid
        self.seconds = self.client_cpu = self.host_cpu = 0.0

    def __enter__(self) -> Stopwatch:
        self.host_cpu = host_cpu_seconds(self.host_pid)
        self.client_cpu = time.process_time()
        self.seconds = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self.seconds
        self.client_cpu = time.process_time() - self.client_cpu
        self.host_cpu = host_cpu_seconds(self.host_pid) - self.host_cpu

    def sample(self, calls: int) -> Sample:
        """The measurement, for ``calls`` tool calls."""
        return Sample(self.seconds, self.client_cpu, self.host_cpu, calls)


@dataclass
class Sample:
    """One timed cell."""

    seconds: float
    client_cpu: float
    host_cpu: float
    calls: int

    @property
    def rate(self) -> float:
        """Tool calls per second."""
        return self.calls / self.seconds


Source = Callable[[int], str]


# --------------------------------------------------------------------------- codemode-trio


def make_registry() -> cm.ToolRegistry:
    """The echo tool, registered the documented way."""
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(i: int) -> dict[str, int]:
        return {"i": i}

    return tools


class StepCounter(trio.abc.Instrument):
    """Counts scheduler work while enabled: task steps by task name, I/O waits, spawns."""

    def __init__(self) -> None:
        self.enabled = False
        self.steps: Counter[str] = Counter()
        self.io_waits = 0
        self.blocking_io_waits = 0
        self.spawned = 0

    def start(self) -> None:
        """Install the instrument and start counting (from inside ``trio.run``)."""
        trio.lowlevel.add_instrument(self)
        self.enabled = True

    def stop(self) -> None:
        """Stop counting and remove the instrument."""
        self.enabled = False
        trio.lowlevel.remove_instrument(self)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.enabled:
            self.steps[task.name.rsplit(".", 1)[-1]] += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if self.enabled:
            self.spawned += 1

    def before_io_wait(self, timeout: float) -> None:
        if self.enabled:
            self.io_waits += 1
            self.blocking_io_waits += timeout > 0


Hooks = tuple[Callable[[], object], Callable[[], object]]


async def _ours(host: str, source: Source, calls: int, hooks: Hooks | None = None) -> Sample:
    tools = make_registry()
    async with cm.open_host_process(host) as conn, conn.open_session(tools) as session:
        warm = await session.run(source(WARMUP_CALLS), yield_time_ms=YIELD_TIME_MS)
        assert warm.text == expected_text(WARMUP_CALLS), warm
        assert conn.process is not None
        pid = conn.process.pid
        text = source(calls)
        if hooks is not None:
            hooks[0]()
        with Stopwatch(pid) as watch:
            result = await session.run(text, yield_time_ms=YIELD_TIME_MS)
        if hooks is not None:
            hooks[1]()
        stats = conn.statistics()
    if stats.pending_requests or stats.active_delegates:
        raise RuntimeError(f"codemode-trio: work left over after the cell: {stats}")
    if result.kind != "result" or result.error_text or result.text != expected_text(calls):
        raise RuntimeError(f"codemode-trio: unexpected result {result!r:.300}")
    return watch.sample(calls)


def measure_ours(host: str, source: Source, calls: int, hooks: Hooks | None = None) -> Sample:
    """One codemode-trio measurement, in its own ``trio.run``.

    ``hooks`` (start, stop) are called just before and just after the timed cell.
    """
    return trio.run(_ours, host, source, calls, hooks)


# --------------------------------------------------------------------------- minimal client


def check_plain_result(result: dict[str, Any], calls: int, client: str) -> None:
    """Raise unless a minimal client's ``Result`` is the expected text."""
    items = result["content_items"]
    if result["error_text"] or not items or items[0]["text"] != expected_text(calls):
        raise RuntimeError(f"{client}: unexpected result {result!r:.300}")


def measure_minimal(host: str, source: Source, calls: int) -> Sample:
    """One measurement with the minimal blocking client."""
    with MinimalClient(host) as client:
        warm = client.run(source(WARMUP_CALLS), yield_time_ms=YIELD_TIME_MS)
        check_plain_result(warm, WARMUP_CALLS, "minimal client")
        text = source(calls)
        with Stopwatch(client.pid) as watch:
            result = client.run(text, yield_time_ms=YIELD_TIME_MS)
    check_plain_result(result, calls, "minimal client")
    return watch.sample(calls)


async def _trio_floor(host: str, source: Source, calls: int, task_per_call: bool = False) -> Sample:
    async with MinimalTrioClient.open(host, task_per_call=task_per_call) as client:
        warm = await client.run(source(WARMUP_CALLS), yield_time_ms=YIELD_TIME_MS)
        check_plain_result(warm, WARMUP_CALLS, "trio floor client")
        text = source(calls)
        with Stopwatch(client.pid) as watch:
            result = await client.run(text, yield_time_ms=YIELD_TIME_MS)
    check_plain_result(result, calls, "trio floor client")
    return watch.sample(calls)


def measure_trio_floor(host: str, source: Source, calls: int) -> Sample:
    """One measurement with the single-task Trio client, in its own ``trio.run``."""
    return trio.run(_trio_floor, host, source, calls)


def measure_task_floor(host: str, source: Source, calls: int) -> Sample:
    """The same client answering each call from its own task and cancel scope."""
    return trio.run(_trio_floor, host, source, calls, True)


# --------------------------------------------------------------------------- reporting


CLIENTS = {
    "codemode-trio": measure_ours,
    "minimal": measure_minimal,
    "trio-floor": measure_trio_floor,
    "task-floor": measure_task_floor,
}


def run_mode(
    host: str, source: Source, calls: int, repeat: int, verbose: bool
) -> dict[str, list[Sample]]:
    """``repeat`` measurements per client, rotating which client goes first."""
    samples: dict[str, list[Sample]] = {name: [] for name in CLIENTS}
    names = list(CLIENTS)
    for round_number in range(repeat):
        shift = round_number % len(names)
        order = names[shift:] + names[:shift]
        for name in order:
            sample = CLIENTS[name](host, source, calls)
            samples[name].append(sample)
            if verbose:
                print(
                    f"    round {round_number + 1} {name:<14}{sample.rate:>10,.0f} calls/s "
                    f"({sample.seconds:.2f} s)",
                    flush=True,
                )
    return samples


def report_mode(mode: str, samples: dict[str, list[Sample]]) -> bool:
    """Print one mode's table and verdict; return whether its target is met."""
    print(
        f"  {'client':<16}{'best calls/s':>14}{'median calls/s':>16}{'us/call':>10}"
        f"{'client CPU us/call':>20}{'host CPU us/call':>18}"
    )
    best: dict[str, Sample] = {}
    median: dict[str, float] = {}
    cpu_median: dict[str, float] = {}
    cpu_best: dict[str, float] = {}
    for name, runs in samples.items():
        best[name] = max(runs, key=lambda s: s.rate)
        median[name] = statistics.median(s.rate for s in runs)
        cpu = statistics.median(s.client_cpu / s.calls * 1e6 for s in runs)
        cpu_median[name] = cpu
        cpu_best[name] = min(s.client_cpu / s.calls * 1e6 for s in runs)
        host_cpu = statistics.median(s.host_cpu / s.calls * 1e6 for s in runs)
        print(
            f"  {name:<16}{best[name].rate:>14,.0f}{median[name]:>16,.0f}"
            f"{1e6 / best[name].rate:>10.0f}{cpu:>20.0f}{host_cpu:>18.0f}"
        )

    def ratio(a: str, b: str) -> tuple[float, float]:
        return best[a].rate / best[b].rate, median[a] / median[b]

    target = TARGETS[mode]
    ratio_best, ratio_median = ratio("codemode-trio", "minimal")
    met = ratio_best >= target
    print(
        f"  ratio ours/minimal: best {ratio_best:.3f}, median {ratio_median:.3f} "
        f"(target >= {target}: {'MET' if met else 'NOT MET'})"
    )
    floor_best, floor_median = ratio("trio-floor", "minimal")
    print(
        f"  ratio trio-floor/minimal: best {floor_best:.3f}, median {floor_median:.3f} "
        "(the most any Trio client reached)"
    )
    ours_best, ours_median = ratio("codemode-trio", "trio-floor")
    print(f"  ratio ours/trio-floor: best {ours_best:.3f}, median {ours_median:.3f}")
    cpu_target = CPU_TARGETS[mode]
    cpu_ratio = cpu_median["codemode-trio"] / cpu_median["trio-floor"]
    cpu_ratio_best = cpu_best["codemode-trio"] / cpu_best["trio-floor"]
    cpu_met = cpu_ratio <= cpu_target
    print(
        f"  client CPU per call, ours/trio-floor: best {cpu_ratio_best:.2f}, median "
        f"{cpu_ratio:.2f} (target <= {cpu_target}: {'MET' if cpu_met else 'NOT MET'})"
    )
    shape = cpu_median["task-floor"] / cpu_median["trio-floor"]
    print(
        f"  client CPU per call, task-floor/trio-floor: median {shape:.2f} (the price of one "
        f"task and cancel scope per call); ours/task-floor: median "
        f"{cpu_median['codemode-trio'] / cpu_median['task-floor']:.2f}"
    )
    return met and cpu_met


def scheduler_report(host: str, source: Source, calls: int) -> str:
    """Trio scheduler work per tool call during the timed cell of one measurement."""
    counter = StepCounter()
    sample = measure_ours(host, source, calls, (counter.start, counter.stop))
    lines = [
        f"  {sample.rate:,.0f} calls/s; per call: {counter.io_waits / calls:.2f} scheduler "
        f"batches ({counter.blocking_io_waits / calls:.2f} of them blocking in epoll), "
        f"{sum(counter.steps.values()) / calls:.2f} task steps, "
        f"{counter.spawned / calls:.2f} tasks spawned, "
        f"{sample.client_cpu / calls * 1e6:.0f} us client CPU"
    ]
    lines += [
        f"    {name:<24}{steps / calls:6.2f} steps/call"
        for name, steps in counter.steps.most_common()
    ]
    return "\n".join(lines)


def profile_ours(host: str, source: Source, calls: int, tool: str, limit: int) -> str:
    """Profile the timed cell of one codemode-trio measurement; the report as text."""
    out = io.StringIO()
    if tool == "pyinstrument":
        try:
            from pyinstrument import Profiler
        except ImportError:
            return "  pyinstrument is not installed (pip install pyinstrument)"
        profiler = Profiler(interval=0.001, async_mode="disabled")
        sample = measure_ours(host, source, calls, (profiler.start, profiler.stop))
        print(f"  (under pyinstrument: {sample.rate:,.0f} calls/s)", file=out)
        print(profiler.output_text(unicode=False, color=False), file=out)
        return out.getvalue()
    cprofiler = cProfile.Profile()
    sample = measure_ours(host, source, calls, (cprofiler.enable, cprofiler.disable))
    print(f"  (under cProfile: {sample.rate:,.0f} calls/s)", file=out)
    stats = pstats.Stats(cprofiler, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats("codemode_trio", limit)
    return out.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", help="codex-code-mode-host binary (default: locate_host())")
    parser.add_argument(
        "--sequential", type=int, default=5000, metavar="N", help="calls in the sequential cell"
    )
    parser.add_argument(
        "--batched", type=int, default=15000, metavar="N", help="calls in the batched cell"
    )
    parser.add_argument(
        "--batch-size", type=int, default=50, metavar="K", help="calls per Promise.all (<= 50)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="measurements per client and mode")
    parser.add_argument(
        "--mode",
        choices=["sequential", "batched", "both"],
        default="both",
        help="which cell(s) to measure",
    )
    parser.add_argument(
        "--pin",
        type=int,
        metavar="CPU",
        help="run this process and the hosts it spawns on one CPU (steadier sequential numbers)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print every measurement")
    parser.add_argument(
        "--profile",
        choices=["cprofile", "pyinstrument"],
        help="afterwards, profile codemode-trio once per mode (and count its scheduler work)",
    )
    parser.add_argument("--profile-lines", type=int, default=30, help="rows per cProfile table")
    args = parser.parse_args(argv)
    if not 1 <= args.batch_size <= 50:
        parser.error("--batch-size must be between 1 and 50")
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})  # inherited by the host processes

    host = str(locate_host(args.host))
    modes: dict[str, tuple[Source, int]] = {
        "sequential": (sequential_source, args.sequential),
        "batched": (lambda n: batched_source(n, args.batch_size), args.batched),
    }
    if args.mode != "both":
        modes = {args.mode: modes[args.mode]}

    cpus = sorted(os.sched_getaffinity(0))
    print(f"host        : {host}")
    print(
        f"python      : {sys.version.split()[0]}, trio {trio.__version__}; "
        f"{os.cpu_count()} CPUs, running on {cpus}"
    )
    print(
        f"method      : best/median of {args.repeat} rotating measurements, fresh host each, "
        f"warm-up cell of {WARMUP_CALLS} calls, yield_time_ms={YIELD_TIME_MS}"
    )
    all_met = True
    for mode, (source, calls) in modes.items():
        shape = f"{calls} calls"
        if mode == "batched":
            shape += f", {args.batch_size} per Promise.all"
        print(f"\n{mode} ({shape})")
        samples = run_mode(host, source, calls, args.repeat, not args.quiet)
        all_met &= report_mode(mode, samples)
    if args.profile:
        for mode, (source, calls) in modes.items():
            print(f"\ncodemode-trio scheduler work, {mode}")
            print(scheduler_report(host, source, calls))
            print(f"\n{args.profile} of codemode-trio, {mode}")
            print(profile_ours(host, source, calls, args.profile, args.profile_lines))
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
