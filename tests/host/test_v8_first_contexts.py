"""Many cells starting at once in a fresh process: the first V8 contexts must not race.

A process's first mini-racer context sets up a pool of V8's allocator; two first contexts made
at once race to do it and V8 aborts the whole process (``Check failed:
!IsConfigurablePoolInitialized()``), which took about one process in eight down when 16 cells
started together. Each run below is a fresh process whose 16 threads create their isolates at
the same instant, as a host's first burst of cells does; every one of them must live.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 48  # about one in eight fails without the fix: all 48 pass by luck 0.2 % of the time
THREADS = 16

BURST = textwrap.dedent(
    f"""
    import threading
    from codemode_trio.host import v8_engine
    from codemode_trio.host.v8_engine import Isolate, live_isolates

    # V8 loaded first, as a host does before its first cell, so that the 16 contexts are
    # really made at the same instant.
    v8_engine._load_library()
    made = []
    barrier = threading.Barrier({THREADS})

    def make():
        barrier.wait()
        made.append(Isolate(None, print, print, str))

    threads = [threading.Thread(target=make) for _ in range({THREADS})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert live_isolates() == {THREADS}, live_isolates()
    for isolate in made:
        isolate.close()
    print("made", len(made))
    """
)


def _burst(_: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BURST],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_sixteen_first_contexts_at_once_never_abort_the_process() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(_burst, range(PROCESSES)))
    failed = [run for run in runs if run.returncode != 0 or run.stdout != f"made {THREADS}\n"]
    assert not failed, f"{len(failed)} of {PROCESSES} processes failed:\n{failed[0].stderr[-2000:]}"
