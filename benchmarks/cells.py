#!/usr/bin/env python3
"""Many tiny cells on one session: throughput, and whether the client's memory stays flat.

Usage::

    python benchmarks/cells.py [--host PATH] [--cells N] [--baseline B] [--checkpoints K]

Opens one connection to ``codex-code-mode-host`` (found with
``codemode_trio.hostbin.locate_host``, or ``--host``) and one session, then runs N cells one
after the other, each ``await session.run("text(1)")``. After B cells (the baseline, 1,000 by
default) and at K evenly spaced points up to N it prints:

- peak RSS of this process (``resource.getrusage(RUSAGE_SELF).ru_maxrss``; the kernel updates
  this high-water mark lazily, so it can read a little below the current RSS);
- current RSS (``VmRSS`` in ``/proc/self/status``), and the host's, for comparison;
- cells per second since the previous checkpoint.

At the end it prints the ratios N/baseline of both client RSS figures (the target: memory flat,
within 5 %), the overall cells/s, and ``conn.statistics()`` once every cell has been reported
closed: live cells and pending requests must both be 0 by then. The exit status is 1 if the
memory target or the statistics check fails.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import attrs
import trio

import codemode_trio as cm
from codemode_trio.hostbin import locate_host

SOURCE = "text(1)"
MEMORY_TOLERANCE = 0.05
# How long the last cell's ``cell/closed`` may take to arrive after its result.
CLOSE_TIMEOUT_S = 10.0


def vm_rss_kib(pid: int | str = "self") -> int:
    """Current resident set size of a process, in KiB (``VmRSS`` from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def peak_rss_kib() -> int:
    """Peak resident set size of this process, in KiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@attrs.frozen
class Checkpoint:
    """Memory and timing after ``cells`` cells."""

    cells: int
    elapsed: float
    peak_kib: int
    rss_kib: int
    host_rss_kib: int


def checkpoint_cells(total: int, baseline: int, count: int) -> list[int]:
    """The cell counts to report at: the baseline, then ``count`` even steps up to ``total``."""
    points = {min(baseline, total), total}
    points.update(round(total * k / count) for k in range(1, count))
    return sorted(p for p in points if p >= min(baseline, total))


async def run(host: str, total: int, baseline: int, count: int) -> int:
    """Run the cells and print the report; return the exit status."""
    points = checkpoint_cells(total, baseline, count)
    tools = cm.ToolRegistry()
    closed = 0
    all_closed = trio.Event()

    @tools.on_cell_closed
    def _cell_closed(cell_id: str) -> None:
        nonlocal closed
        closed += 1
        if closed == total:
            all_closed.set()

    print(
        f"{'cells':>8}{'peak RSS KiB':>14}{'RSS KiB':>10}{'host RSS KiB':>14}"
        f"{'cells/s':>10}{'elapsed s':>11}"
    )
    rows: list[Checkpoint] = []
    async with cm.open_host_process(host) as conn, conn.open_session(tools) as session:
        assert conn.process is not None
        host_pid = conn.process.pid
        start = time.perf_counter()
        previous = (0, start)
        done = 0
        for point in points:
            while done < point:
                result = await session.run(SOURCE)
                if result.kind != "result" or result.text != "1":
                    raise RuntimeError(f"cell {done + 1}: unexpected result {result!r:.300}")
                done += 1
            now = time.perf_counter()
            row = Checkpoint(done, now - start, peak_rss_kib(), vm_rss_kib(), vm_rss_kib(host_pid))
            rows.append(row)
            rate = (done - previous[0]) / (now - previous[1])
            previous = (done, now)
            print(
                f"{row.cells:>8,}{row.peak_kib:>14,}{row.rss_kib:>10,}{row.host_rss_kib:>14,}"
                f"{rate:>10,.0f}{row.elapsed:>11.2f}"
            )
        elapsed = time.perf_counter() - start
        with trio.move_on_after(CLOSE_TIMEOUT_S):
            await all_closed.wait()
        stats = conn.statistics()

    first, last = rows[0], rows[-1]
    peak_ratio = last.peak_kib / first.peak_kib
    rss_ratio = last.rss_kib / first.rss_kib
    flat = max(peak_ratio, rss_ratio) <= 1 + MEMORY_TOLERANCE
    clean = stats.live_cells == 0 and stats.pending_requests == 0
    print()
    print(f"cells/s overall          : {total / elapsed:,.0f} ({total:,} cells in {elapsed:.2f} s)")
    print(f"cells reported closed    : {closed:,} of {total:,}")
    span = f"{last.cells:,}/{first.cells:,}"
    print(f"{'peak RSS ' + span:<25}: {peak_ratio:.3f}")
    print(f"{'VmRSS ' + span:<25}: {rss_ratio:.3f}")
    print(
        f"{f'memory flat within {MEMORY_TOLERANCE:.0%}':<25}: {'YES' if flat else 'NO'} "
        f"(host RSS {first.host_rss_kib:,} -> {last.host_rss_kib:,} KiB, for information)"
    )
    print(f"conn.statistics()        : {stats}")
    print(
        f"live cells / pending     : {stats.live_cells} / {stats.pending_requests} "
        f"({'OK' if clean else 'NOT ZERO'})"
    )
    return 0 if flat and clean else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", help="codex-code-mode-host binary (default: locate_host())")
    parser.add_argument("--cells", type=int, default=10_000, metavar="N", help="cells to run")
    parser.add_argument(
        "--baseline",
        type=int,
        default=1_000,
        metavar="B",
        help="cells after which the memory baseline is taken",
    )
    parser.add_argument(
        "--checkpoints",
        type=int,
        default=4,
        metavar="K",
        help="evenly spaced reports between the baseline and N",
    )
    args = parser.parse_args(argv)
    if args.cells < 1 or args.baseline < 1 or args.checkpoints < 1:
        parser.error("--cells, --baseline and --checkpoints must be positive")

    host = str(locate_host(args.host))
    print(f"host   : {host}")
    print(f"python : {sys.version.split()[0]}, trio {trio.__version__}")
    print(f"cells  : {args.cells:,} x {SOURCE!r}, one session, one at a time")
    print()
    return trio.run(run, host, args.cells, args.baseline, args.checkpoints)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
