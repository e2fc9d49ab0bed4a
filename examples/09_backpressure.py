"""09 backpressure: a slow consumer and a fast host; bounded channels decide who waits.

Concept: a bounded memory channel makes a fast producer wait for a slow consumer. Put one
behind a tool and the waiting travels back: the tool's task waits in ``send``, its promise
stays pending, and the script waits, while everything else keeps moving.

Rust/tokio: ``mpsc::channel(n)``; ``tx.send(x).await`` parks the producer when the queue is
full. The client's own queues are the same: 128-deep mpsc channels between reader, driver and
writer, and the driver uses ``try_send`` so it never parks.

Trio: ``trio.open_memory_channel(2)`` here. The library keeps only one channel: the reader
applies what it reads to a synchronous state machine at once and waits on nothing but the
host, and replies are written at once or queued behind earlier bytes in the writer's bounded
channel with ``send_nowait``: the reader never waits on a tool.

Watch: ten calls arrive at once: two jobs buffered, one taken, seven tool tasks waiting in
``send()``; a ping from another session is answered at once all the same; the jobs drain one
per 0.1 s, and the script's ``Promise.all`` resolves only when the last one got room.

Try this: make the channel unbounded (``math.inf``): where does the waiting go now?
"""

from __future__ import annotations

import trio
import trio.testing
from _check import Checks
from _trace import stamp

import codemode_trio as cm

JOBS, ROOM, WORK = 10, 2, 0.1
tools = cm.ToolRegistry()
send_jobs, receive_jobs = trio.open_memory_channel[int](ROOM)
done: list[int] = []
arrived, all_arrived = [], trio.Event()


@tools.function(description="Queue a job for the slow consumer")
async def submit(job: int) -> str:
    arrived.append(job)
    if len(arrived) == JOBS:
        all_arrived.set()  # main runs once this task, too, is parked in send()
    await send_jobs.send(job)  # the waiting happens here, in this call's own task
    return "queued"


@tools.function(description="Answer at once")
async def ping() -> str:
    return "pong, at once"


async def consume() -> None:  # the slow consumer: 0.1 s a job
    with receive_jobs:
        async for job in receive_jobs:
            await trio.sleep(WORK)
            done.append(job)


SCRIPT = f"await Promise.all([...Array({JOBS}).keys()].map((job) => tools.submit({{job}})))"


async def main() -> None:
    checks = Checks()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        with send_jobs:  # main owns the sending side: closing it ends the consumer
            async with cm.open_host_process() as conn, conn.open_session(tools) as producer:
                start = trio.current_time()
                async with conn.open_session(tools) as other, trio.open_nursery() as inner:
                    inner.start_soon(producer.run, SCRIPT)
                    await all_arrived.wait()
                    # Let every task settle (a call whose job was just taken is returning).
                    await trio.testing.wait_all_tasks_blocked()
                    channel, active = send_jobs.statistics(), conn.statistics().active_delegates
                    buffered = channel.current_buffer_used
                    print(stamp(), f"{buffered} jobs buffered, 1 taken, {active} tools in send()")
                    pong = await other.run("text(await tools.ping())")
                    still = send_jobs.statistics().tasks_waiting_send
                    print(stamp(), f"other session: {pong.text}; {still} tools still waiting")
                paced = trio.current_time() - start
                print(stamp(), f"Promise.all resolved after {paced:.2f}s")
    print(stamp(), "consumer done:", done)
    waiting = JOBS - ROOM - 1
    checks.expect(channel.tasks_waiting_send == active == waiting, "each waiting call is a task")
    checks.expect(channel.current_buffer_used == ROOM, "the channel holds no more than its room")
    checks.expect(paced >= 0.9 * waiting * WORK, "the script was paced by the consumer")
    checks.expect(still > 0, "the protocol was never blocked by the waiting tools")
    checks.expect(sorted(done) == list(range(JOBS)), "every job was consumed")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
