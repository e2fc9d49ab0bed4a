"""An asyncio agent framework driving code mode from a Trio program, through trio-asyncio.

pydantic-ai and the OpenAI Agents SDK are asyncio libraries; codemode-trio is Trio. trio-asyncio
runs an asyncio event loop *inside* Trio, so one program can hold both: Trio owns the host
connection and the session, asyncio runs the agent, and each call crosses the bridge:

- Trio → asyncio: ``await trio_asyncio.aio_as_trio(agent_run)(...)``;
- asyncio → Trio: ``await trio_asyncio.trio_as_aio(trio_function)(...)``, which is what the
  agent's ``exec`` tool does to run a program on the session.

``framework_agent`` stands in for the framework (it really is asyncio: ``asyncio.gather`` and
``asyncio.sleep``); docs/agents.md shows the same tool plugged into pydantic-ai and the Agents
SDK. Run ``python examples/asyncio_bridge.py [HOST] [--measure]``; ``--measure`` times an exec
round trip natively and through the bridge (docs/agents.md gives the numbers).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import trio
import trio.lowlevel
import trio_asyncio

import codemode_trio as cm

tools = cm.ToolRegistry()


@tools.function
async def square(x: int) -> int:
    """Square an integer."""
    await trio.lowlevel.checkpoint()
    return x * x


def exec_tool(session: cm.Session) -> Callable[[str], Awaitable[str]]:
    """The agent's ``exec`` tool: an asyncio coroutine function that runs a program in Trio."""

    async def run_program(source: str) -> str:
        parsed = cm.parse_exec_source(source)
        result = await session.run(parsed.code, yield_time_ms=parsed.yield_time_ms)
        return result.text if result.error_text is None else f"error: {result.error_text}"

    async def exec_(source: str) -> str:
        # Called by the asyncio framework; the session lives in Trio.
        answer: str = await trio_asyncio.trio_as_aio(run_program)(source)
        return answer

    return exec_


async def framework_agent(exec_: Callable[[str], Awaitable[str]]) -> list[str]:
    """A stand-in asyncio agent: two tool calls at once, as a framework may make them."""
    await asyncio.sleep(0)
    return list(
        await asyncio.gather(
            exec_("text(await tools.square({x: 7}))"),
            exec_('// @exec: {"yield_time_ms": 2000}\ntext(6 * 7)'),
        )
    )


async def measure(session: cm.Session, rounds: int = 50) -> dict[str, float]:
    """Median milliseconds of one exec round trip, natively and through the bridge."""
    exec_ = exec_tool(session)

    async def native() -> None:
        await session.run("text(1)")

    async def bridged() -> None:
        await exec_("text(1)")

    async def crossing() -> None:
        await trio_asyncio.trio_as_aio(trio.lowlevel.checkpoint)()

    # Alternated, so that the machine's load drifts over both alike.
    samples: dict[str, list[float]] = {"native": [], "bridged": []}
    for _ in range(rounds):
        start = time.perf_counter()
        await native()
        samples["native"].append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await trio_asyncio.aio_as_trio(bridged)()
        samples["bridged"].append((time.perf_counter() - start) * 1000)
    timings = {label: statistics.median(values) for label, values in samples.items()}

    async def many_crossings() -> float:
        start = time.perf_counter()
        for _ in range(1000):
            await crossing()
        return (time.perf_counter() - start) * 1000 / 1000

    timings["crossing"] = await trio_asyncio.aio_as_trio(many_crossings)()
    return timings


async def main(host: str | None = None, *, timed: bool = False) -> list[str]:
    """Run the stand-in agent against a host; with ``timed``, print the measurements."""
    async with (
        trio_asyncio.open_loop(),
        cm.open_host_process(host) as conn,
        conn.open_session(tools) as session,
    ):
        answers: list[str] = await trio_asyncio.aio_as_trio(framework_agent)(exec_tool(session))
        print(answers)
        if timed:
            timings = await measure(session)
            print(
                f"exec round trip, median: {timings['native']:.2f} ms native, "
                f"{timings['bridged']:.2f} ms through trio-asyncio; "
                f"one asyncio->Trio crossing: {timings['crossing'] * 1000:.0f} us"
            )
    return answers


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--measure"]
    trio.run(lambda: main(arguments[0] if arguments else None, timed="--measure" in sys.argv[1:]))
