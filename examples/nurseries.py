"""Nurseries on the real protocol: several sessions on one connection, and delegate tasks.

Each session below runs in its own task of one nursery; all share one host process and one
connection. Inside the connection, every tool call from every cell is its own task in the
connection's delegate nursery, under its own cancel scope — so a slow tool never blocks another
session, and a cell that is terminated takes only its own calls down.

When the block ends, the nursery has waited for every session, each session has been shut down
(its cells terminated, their delegate calls cancelled), and the host has been reaped. Nothing
outlives the ``async with``.

Run: ``python examples/nurseries.py`` (after ``codemode-trio host fetch``).
"""

from __future__ import annotations

import trio

import codemode_trio as cm

tools = cm.ToolRegistry()


@tools.function(description="Sleep, then echo")
async def slow_echo(word: str, seconds: float) -> str:
    await trio.sleep(seconds)
    return word


@tools.function(description="Never returns (until cancelled)")
async def forever() -> None:
    try:
        await trio.sleep_forever()
    finally:
        print("  forever(): cancelled by the driver, no reply sent")


async def worker(conn: cm.Connection, name: str, delay: float) -> None:
    async with conn.open_session(tools) as session:
        result = await session.run(
            f"text(await tools.slow_echo({{word: '{name}', seconds: {delay}}}))"
        )
        print(f"{name}: {result.text} after {result.host_duration_ns / 1e9:.2f}s in the host")


async def main() -> None:
    async with cm.open_host_process() as conn:
        async with trio.open_nursery() as nursery:
            for name, delay in [("alpha", 0.3), ("beta", 0.1), ("gamma", 0.2)]:
                nursery.start_soon(worker, conn, name, delay)

        async with conn.open_session(tools) as session:
            cell = await session.execute("await tools.forever()", yield_time_ms=100)
            print("forever cell:", (await cell.initial_response()).kind)
            outcome = await session.terminate(cell.cell_id)
            print("terminated:", outcome.response.kind)
            await trio.sleep(0.05)  # let the cancelled delegate print
        print(conn.statistics())


if __name__ == "__main__":
    trio.run(main)
