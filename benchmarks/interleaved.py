#!/usr/bin/env python3
"""Client CPU per sequential tool call, each measurement in a fresh process, interleaved.

Usage::

    python benchmarks/interleaved.py [--rounds N] [--calls N] LABEL=CHECKOUT[:floor] ...

Each ``LABEL=CHECKOUT`` is a checkout of this repository (a git worktree, say) whose
``codemode_trio`` is measured; ``:floor`` measures ``roundtrip.py``'s ``task-floor`` client
from that checkout instead. Every round runs each contender once, in its own Python process with
its own host, rotating which goes first, so that a change in the machine's load falls on all of
them alike. It prints the median and best client CPU per call of each, and each one's ratio to
the first contender.

Comparing two versions of the client in one ``roundtrip.py`` run is not possible (one process
imports one package), and the spread between its runs is larger than the effect of most
changes; this script is how a change of a few per cent shows. Run it under ``taskset -c 1`` to
put every client and host on one CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

# Run inside a contender's checkout: one sequential cell, its client CPU per call printed.
_MEASURE = """
import sys
sys.path.insert(0, "benchmarks")
import roundtrip
from codemode_trio.hostbin import locate_host
measure = roundtrip.measure_ours if sys.argv[1] == "ours" else roundtrip.measure_task_floor
sample = measure(str(locate_host()), roundtrip.sequential_source, int(sys.argv[2]))
print(sample.client_cpu / sample.calls * 1e6)
"""


def measure(checkout: str, client: str, calls: int) -> float:
    """One measurement: client CPU µs per call of ``client`` from ``checkout``."""
    env = dict(os.environ, PYTHONPATH=checkout)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, client, str(calls)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: measurement failed:\n{done.stderr[-2000:]}")
    return float(done.stdout)


def main() -> int:
    """Parse the contenders, run the rounds, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("contenders", nargs="+", metavar="LABEL=CHECKOUT[:floor]")
    args = parser.parse_args()
    contenders: list[tuple[str, str, str]] = []
    for spec in args.contenders:
        label, _, rest = spec.partition("=")
        checkout, _, kind = rest.partition(":")
        if not label or not checkout or kind not in ("", "floor"):
            parser.error(f"expected LABEL=CHECKOUT[:floor], got {spec!r}")
        contenders.append((label, os.path.abspath(checkout), "floor" if kind else "ours"))
    samples: dict[str, list[float]] = {label: [] for label, _, _ in contenders}
    for round_number in range(args.rounds):
        shift = round_number % len(contenders)
        for label, checkout, client in contenders[shift:] + contenders[:shift]:
            samples[label].append(measure(checkout, client, args.calls))
        latest = ", ".join(f"{label} {values[-1]:.1f}" for label, values in samples.items())
        print(f"round {round_number + 1}: {latest}", flush=True)
    first = contenders[0][0]
    for label, values in samples.items():
        median, best = statistics.median(values), min(values)
        ratio = (
            ""
            if label == first
            else f"  /{first}: median {median / statistics.median(samples[first]):.3f}, "
            f"best {best / min(samples[first]):.3f}"
        )
        print(f"{label:>14}: median {median:6.1f} µs, best {best:6.1f} µs{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
