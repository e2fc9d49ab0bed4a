"""07 many sessions in one nursery: concurrency without locks; one failure cancels siblings.

Concept: tasks in one nursery share plain Python state safely: code between two ``await``s
never interleaves with another task. If one fails, the nursery cancels the rest, waits, raises.

Rust/tokio: ``tokio::spawn`` per session, ``Arc<Mutex<..>>`` for shared counters, a ``JoinSet``
to wait, and explicit ``abort()`` of the rest on an error.

Trio: ``nursery.start_soon`` per session on one connection; a ``dict`` needs no lock. When a
worker raises, ``session.run`` in each sibling terminates its cell as it unwinds and each
``open_session`` block shuts its session down. *Our* nursery raises an ``ExceptionGroup``
(``except*``); the library's own blocks unwrap a lone error.

Watch: four 0.3 s sessions take 0.3 s together; then ``gamma`` throws and ``alpha`` and
``beta`` print "cancelled" at that instant instead of running their 5 s cells to the end.

Try this: catch ``trio.Cancelled`` in ``worker`` without re-raising; what does Trio do?
"""

from __future__ import annotations

import trio
from _check import Checks
from _trace import stamp

import codemode_trio as cm

tools = cm.ToolRegistry()
visits: dict[str, int] = {}  # shared by every session's tool calls, and no lock
closed: list[str] = []
cancelled: list[str] = []
tools.on_cell_closed(closed.append)


@tools.function(description="Count a visit")
async def visit(page: str) -> int:
    await trio.sleep(0.1)
    visits[page] = visits.get(page, 0) + 1  # no await in here: nothing can interleave
    return visits[page]


class CellError(Exception):
    pass


async def worker(conn: cm.Connection, name: str, script: str) -> None:
    async with conn.open_session(tools) as session:
        try:
            result = await session.run(script)
        except trio.Cancelled:
            print(stamp(), f"{name}: cancelled; its cell is terminated, its session shut down")
            cancelled.append(name)
            raise
        if result.error_text:
            print(stamp(), f"{name}: the script threw")
            raise CellError(f"{name}: {result.error_text.splitlines()[0]}")
        print(stamp(), f"{name}: {result.text}")


VISITS = "for (let i = 0; i < 3; i++) await tools.visit({page: 'home'}); text('3 visits')"
SLOW = "await new Promise((resolve) => setTimeout(resolve, 5000)); text('too late')"
THROWS = "await tools.visit({page: 'admin'}); throw new Error('no access')"


async def main() -> None:
    checks = Checks()
    async with cm.open_host_process() as conn:
        start = trio.current_time()
        print(stamp(), "four sessions, each calling a 0.1 s tool three times")
        async with trio.open_nursery() as nursery:
            for name in ("alpha", "beta", "gamma", "delta"):
                nursery.start_soon(worker, conn, name, VISITS)
        took = trio.current_time() - start
        print(stamp(), f"visits: {visits}")
        checks.expect(visits == {"home": 12}, "twelve unlocked updates, none lost")
        checks.expect(took < 0.6, f"the sessions ran concurrently ({took:.2f}s in all)")

        start = trio.current_time()
        print(stamp(), "alpha and beta sleep 5 s; gamma throws after 0.1 s")
        try:
            async with trio.open_nursery() as nursery:
                for name, script in (("alpha", SLOW), ("beta", SLOW), ("gamma", THROWS)):
                    nursery.start_soon(worker, conn, name, script)
        except* CellError as group:
            print(stamp(), "our nursery raised:", repr(group.exceptions))
            failures = group.exceptions
        took = trio.current_time() - start
    checks.expect(len(failures) == 1, "one failure came out of our nursery")
    checks.expect(sorted(cancelled) == ["alpha", "beta"], "it cancelled both siblings")
    checks.expect(took < 2, f"without waiting for their cells ({took:.2f}s)")
    checks.expect(len(closed) == 7, f"each of the 7 cells was closed once ({len(closed)} closes)")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
