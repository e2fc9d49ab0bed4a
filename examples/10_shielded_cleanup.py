"""10 shielded cleanup: a tool that must finish its cleanup even when it is cancelled.

Concept: a cancelled task cannot ``await``: every checkpoint raises ``Cancelled`` again. To
finish a cleanup that needs I/O, shield it, and give the shield a deadline so a stuck cleanup
cannot hang everything that waits for the task.

Rust/tokio: a cancelled future is just dropped, so async cleanup has to be moved into a
``tokio::spawn``ed task (detached, outliving its owner) or a guard whose ``Drop`` cannot await.

Trio: ``with trio.move_on_after(1, shield=True):`` inside ``finally``. The client does not wait
for the call (see 05): the cell is terminated and the next cell runs during the rollback. But
the task still belongs to the connection's delegate nursery, so leaving ``open_host_process``
waits for the shielded cleanup (at most its deadline): nothing outlives the block.

Watch: ``careless`` prints "rolling back" and never "rolled back"; ``careful`` finishes 0.3 s
after the terminate, after the next cell already ran; the last block's exit takes 0.3 s.

Try this: remove ``shield=True`` and predict ``careful``'s lines; then shield without a deadline
and make the rollback ``trio.sleep_forever()``: how does the program end now?
"""

from __future__ import annotations

import trio
from _check import Checks
from _trace import stamp
from trio_util import AsyncValue

import codemode_trio as cm

tools = cm.ToolRegistry()
ROLLBACK = 0.3
rolled_back: list[str] = []
cleanups = AsyncValue(0)  # careful's finally blocks that have ended


@tools.function(description="Write a record; always roll back when cut short")
async def careful(record: str) -> None:
    try:
        await trio.sleep_forever()  # the work, cut short by a terminate
    finally:
        print(stamp(), f"careful({record!r}): rolling back")
        with trio.move_on_after(2 * ROLLBACK, shield=True):
            await trio.sleep(ROLLBACK)  # e.g. ask a remote service to undo the write
            rolled_back.append(record)
            print(stamp(), f"careful({record!r}): rolled back")
        cleanups.value += 1


@tools.function(description="Write a record; try to roll back")
async def careless(record: str) -> None:
    try:
        await trio.sleep_forever()
    finally:
        print(stamp(), f"careless({record!r}): rolling back")
        await trio.sleep(ROLLBACK)  # noqa: ASYNC102 - the bug this lesson shows: raises Cancelled
        rolled_back.append(record)
        print(stamp(), f"careless({record!r}): rolled back")


BOTH = "await Promise.all([tools.careful({record: 'a'}), tools.careless({record: 'b'})])"


async def main() -> None:
    checks = Checks()
    async with cm.open_host_process() as conn:
        async with conn.open_session(tools) as session:
            cell = await session.execute(BOTH, yield_time_ms=100)
            await cell.initial_response()  # yielded: both calls are running
            await session.terminate(cell.cell_id)
            print(stamp(), "terminate returned")
            after = await session.run("text('the next cell ran')")
            print(stamp(), after.text, "- rolled back so far:", rolled_back)
            checks.expect(not rolled_back, "the protocol moved on during the rollback")
            with trio.fail_after(5):
                await cleanups.wait_value(1)

            cell = await session.execute("await tools.careful({record: 'c'})", yield_time_ms=100)
            await cell.initial_response()
            print(stamp(), "leaving the blocks with careful('c') running")
            start = trio.current_time()
        print(stamp(), "session closed (its shutdown revoked the call)")
    took = trio.current_time() - start
    print(stamp(), f"connection closed, {took:.2f}s after leaving: rolled back {rolled_back}")
    checks.expect(rolled_back == ["a", "c"], "careful rolled back both times; careless never")
    checks.expect(took >= ROLLBACK * 0.9, "the connection's exit waited for the shielded cleanup")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
