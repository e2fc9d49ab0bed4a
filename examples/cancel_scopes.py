"""Cancel scopes on the real protocol: give up on a wait, and the protocol stays consistent.

A Trio cancel scope is how a caller says "I no longer care". Here a wait is abandoned with
``trio.move_on_after``: codemode-trio sends ``operation/cancel`` for it, holds the next wait on
that cell back until the host has retired the cancelled one (the host must never see two
observers of one cell), and the output that arrived meanwhile is delivered to the next wait —
nothing is lost. With tokio you would drop the future and need a guard object to notice; here
the ``except trio.Cancelled`` path of the waiting task reports it, synchronously.

Run: ``python examples/cancel_scopes.py`` (after ``codemode-trio host fetch``).
"""

from __future__ import annotations

import trio

import codemode_trio as cm

SOURCE = """
text('tick 1');
await new Promise((resolve) => setTimeout(resolve, 400));
text('tick 2');
await new Promise((resolve) => setTimeout(resolve, 400));
text('done');
"""


async def main() -> None:
    async with cm.open_host_process() as conn, conn.open_session() as session:
        cell = await session.execute(SOURCE, yield_time_ms=0)
        first = await cell.initial_response()
        print("initial:", first.kind, repr(first.text))

        with trio.move_on_after(0.1) as scope:
            await session.wait(cell.cell_id, yield_time_ms=10_000)
        print("first wait abandoned:", scope.cancelled_caught)

        response = (await session.wait(cell.cell_id, yield_time_ms=2_000)).response
        while response.kind == "yielded":
            print("yielded:", repr(response.text))
            response = (await session.wait(cell.cell_id, yield_time_ms=2_000)).response
        print("final:", response.kind, repr(response.text))
        print(conn.statistics())


if __name__ == "__main__":
    trio.run(main)
