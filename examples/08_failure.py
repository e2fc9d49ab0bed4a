"""08 failure: the host killed mid-burst gives one ``ConnectionFailed``, with the reason.

Concept: fail-stop. When the peer dies, the first reason is kept, every waiter gets it, every
cell is closed exactly once, every tool call is cancelled, and no task is left behind.

Rust/tokio: a supervisor task ``select!``s over the driver, reader, writer and child exit,
records the first reason in a ``Mutex<Option<String>>``, cancels the connection token, and a
cleanup guard closes cells and cancels delegates.

Trio: the reader sees EOF and applies it to the protocol state machine, which fails
everything in one synchronous step (``Connection.failure`` is written once); then the
connection's nursery is cancelled. The error leaves ``async with`` as *one*
``cm.ConnectionFailed``, not a group.

Watch: 40 tool calls in flight when a tool kills the host; the reason names the exit (signal
SIGKILL) and the calls in flight; both sessions' cells are closed once; the tree is empty.

Try this: kill the host with ``SIGTERM`` instead, or after the burst has been answered.
"""

from __future__ import annotations

import trio
from _check import Checks
from _trace import stamp, trace_tasks

import codemode_trio as cm

tools = cm.ToolRegistry()
BURST = KILL_AT = 40
state = {"started": 0, "cancelled": 0}
closed: list[str] = []
host: list[trio.Process] = []


@tools.on_cell_closed
def on_closed(cell_id: str) -> None:
    print(stamp(), f"cell_closed({cell_id!r})")
    closed.append(cell_id)


@tools.function(description="A slow lookup")
async def lookup(n: int) -> int:
    state["started"] += 1
    if state["started"] == KILL_AT:
        print(stamp(), f"{KILL_AT} calls in flight: killing the host")
        host[0].kill()
    try:
        await trio.sleep(10)
    except trio.Cancelled:
        state["cancelled"] += 1
        raise
    return n


BURST_JS = f"await Promise.all([...Array({BURST}).keys()].map((n) => tools.lookup({{n}})))"


async def main() -> None:
    checks = Checks()
    error: BaseException | None = None
    with trace_tasks(out=lambda line: None) as tree:  # quiet: 40 identical lines otherwise
        try:
            async with cm.open_host_process() as conn:
                assert conn.process is not None
                host.append(conn.process)
                async with conn.open_session(tools) as idle, conn.open_session(tools) as busy:
                    cell = await idle.execute("await new Promise(() => {})", yield_time_ms=0)
                    await cell.initial_response()
                    await busy.run(BURST_JS)
        except Exception as exc:  # see exactly what comes out
            error = exc
        print(stamp(), f"raised {type(error).__name__}: {error}")
        print(stamp(), f"tasks started: {len(tree.spawned)}, still alive: {tree.alive()}")

    checks.expect(type(error) is cm.ConnectionFailed, "one ConnectionFailed, not a group")
    checks.expect(error is not None and str(error) == conn.failure, "carrying the first reason")
    checks.expect(
        "SIGKILL" in str(error) and f"{BURST} delegate" in str(error),
        "which says how the host died and what was in flight",
    )
    checks.expect(sorted(closed) == ["1", "1"], "each session's cell was closed exactly once")
    checks.expect(state["cancelled"] == BURST, f"all {BURST} tool calls were cancelled")
    checks.expect(not tree.alive(), "no task outlived the connection")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
