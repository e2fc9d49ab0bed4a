"""An agent loop you can read: a model writes JavaScript, code mode runs it, the output goes back.

The loop is model-agnostic: a *model* is anything with ``async respond(messages, tools)``
returning text or tool calls. Here it is a scripted model (no network), which reads the tool
outputs it is given as a real model would; docs/agents.md shows the same loop with real model
APIs. What the loop does, turn by turn:

1. the prompt offers two tools, ``exec`` and ``wait``; ``exec``'s description is
   ``tools.exec_tool_description()``: how a program runs, the pragma, the helpers, and every
   Python tool below as a TypeScript declaration;
2. an ``exec`` call's source is split by :func:`codemode_trio.parse_exec_source` (its
   ``// @exec: {"yield_time_ms": ...}`` first line) and run with those options;
3. a program still running after its yield time answers ``Script running with cell ID <id>``;
   the model's ``wait`` call is honoured with :meth:`Session.wait` (or ``terminate``);
4. every answer is :func:`codemode_trio.format_observation`: a status header, then the cell's
   content items, images included, handed back as they are.

Run it: ``python examples/agent_loop.py`` (host 0.171.0, or give a host path).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypedDict

import attrs
import trio

import codemode_trio as cm

# --------------------------------------------------------------------------- the Python tools

tools = cm.ToolRegistry()
FORECASTS = {"Paris": (18, "cloudy"), "Oslo": (7, "rain")}
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHgg"
    "J/PchI7wAAAABJRU5ErkJggg=="
)


class Forecast(TypedDict):
    """Tomorrow's weather in a city."""

    city: str
    celsius: int
    sky: str


@tools.function
async def forecast(city: str) -> Forecast:
    """Tomorrow's forecast for a city.

    Args:
        city: the city's English name
    """
    await trio.sleep(0.05)  # a remote service, in real life
    if city not in FORECASTS:
        raise cm.ToolError(f"no forecast for {city!r}")
    celsius, sky = FORECASTS[city]
    return {"city": city, "celsius": celsius, "sky": sky}


@tools.function
async def chart(values: list[int]) -> cm.ImageItem:
    """A bar chart of the values, as an image."""
    return cm.ImageItem(PIXEL, "low")  # a real tool would draw one


# --------------------------------------------------------------------------- the conversation


@attrs.frozen
class ToolCall:
    """A model's request to call one of the offered tools; ``arguments`` is JSON text."""

    call_id: str
    name: str
    arguments: str


@attrs.frozen
class Message:
    """One turn: a system/user/assistant text, an assistant's tool calls, or a tool's output."""

    role: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    call_id: str = ""
    output: tuple[cm.ContentItem, ...] = ()


class Model(Protocol):
    """What the loop needs of a model: given the conversation and the tools, the next turn."""

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> Message:
        """The assistant's next message: text (the final answer) or tool calls."""
        ...


SYSTEM_PROMPT = (
    "You are a helpful assistant. To use tools, write one JavaScript program at a time for "
    "the `exec` tool: it calls the tools declared in its description and shows results with "
    "text(), image() and content(). Answer in plain text when you are done."
)


async def run_tool_call(session: cm.Session, call: ToolCall) -> tuple[cm.ContentItem, ...]:
    """Carry out one ``exec`` or ``wait`` call; what the model gets back."""
    started = trio.current_time()
    try:
        if call.name == "exec":
            source = cm.parse_exec_source(json.loads(call.arguments)["source"])
            cell = await session.execute(
                source.code,
                yield_time_ms=source.yield_time_ms,
                max_output_tokens=source.max_output_tokens,
            )
            response = await cell.initial_response()
        elif call.name == "wait":
            request = cm.parse_wait_arguments(call.arguments)
            if request.terminate:
                outcome = await session.terminate(
                    request.cell_id, max_output_tokens=request.max_tokens
                )
            else:
                outcome = await session.wait(
                    request.cell_id,
                    yield_time_ms=request.yield_time_ms,
                    max_output_tokens=request.max_tokens,
                )
            response = outcome.response
        else:
            return (cm.TextItem(f"unknown tool {call.name!r}"),)
    except (cm.ExecPragmaError, cm.WaitArgumentsError) as exc:
        # The model's mistake: tell the model, as Codex does, and carry on.
        return (cm.TextItem(str(exc)),)
    except (ValueError, KeyError, TypeError):
        return (cm.TextItem("exec expects a JSON object with a string `source`"),)
    return cm.format_observation(response, wall_time_seconds=trio.current_time() - started)


async def agent_loop(
    model: Model, session: cm.Session, registry: cm.ToolRegistry, task: str, *, max_turns: int = 8
) -> list[Message]:
    """Talk with ``model`` until it answers in text; return the whole conversation."""
    specs = [cm.exec_tool_spec(registry), cm.wait_tool_spec()]
    messages = [Message("system", SYSTEM_PROMPT), Message("user", task)]
    for _ in range(max_turns):
        reply = await model.respond(messages, specs)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        for call in reply.tool_calls:
            output = await run_tool_call(session, call)
            messages.append(Message("tool", call_id=call.call_id, output=output))
    raise RuntimeError(f"no answer after {max_turns} turns")


# --------------------------------------------------------------------------- a scripted model

EXEC_SOURCE = """\
// @exec: {"yield_time_ms": 5000, "max_output_tokens": 2000}
const cities = ["Paris", "Oslo"];
const forecasts = await Promise.all(cities.map((city) => tools.forecast({ city })));
for (const f of forecasts) text(`${f.city}: ${f.celsius} C, ${f.sky}`);
image(await tools.chart({ values: forecasts.map((f) => f.celsius) }));
yield_control(); // answer now with the output so far; the program goes on
await new Promise((resolve) => setTimeout(resolve, 500)); // a slow second half
text(`warmest: ${forecasts.reduce((a, b) => (a.celsius > b.celsius ? a : b)).city}`);
"""


class ScriptedModel:
    """Plays a fixed plan, but reads the tool outputs it is given as a model would."""

    def __init__(self) -> None:
        self.seen_tools: list[dict[str, Any]] = []
        self.turns = 0

    async def respond(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> Message:
        """The next step of the plan, given what the last tool output said."""
        await trio.lowlevel.checkpoint()
        self.seen_tools = list(tools)
        self.turns += 1
        last = messages[-1]
        if last.role == "user":
            return self.call("exec", {"source": EXEC_SOURCE})
        header = last.output[0] if last.output else None
        status = header.text if isinstance(header, cm.TextItem) else ""
        running = re.match(r"Script running with cell ID (\S+)", status)
        if running:
            return self.call("wait", {"cell_id": running.group(1), "yield_time_ms": 5000})
        # Done: answer from every text the tools gave back.
        texts = [
            item.text
            for message in messages
            if message.role == "tool"
            for item in message.output[1:]
            if isinstance(item, cm.TextItem)
        ]
        return Message("assistant", "Tomorrow: " + "; ".join(texts))

    def call(self, name: str, arguments: dict[str, Any]) -> Message:
        call = ToolCall(f"call-{self.turns}", name, json.dumps(arguments))
        return Message("assistant", tool_calls=(call,))


# --------------------------------------------------------------------------- running it


def show(message: Message, write: Callable[[str], object] = print) -> None:
    """Print one turn of the conversation (images as a placeholder)."""
    if message.role in ("system", "user") or (message.role == "assistant" and message.text):
        write(f"[{message.role}] {message.text}")
    for call in message.tool_calls:
        write(f"[assistant -> {call.name}] {call.arguments}")
    for item in message.output:
        if isinstance(item, cm.TextItem):
            write(f"[tool] {item.text.rstrip()}")
        else:
            write(f"[tool] <{type(item).__name__}>")


async def main(host: str | None = None) -> list[Message]:
    """Run the scripted conversation against a host; print and return it."""
    model = ScriptedModel()
    async with (
        cm.open_host_process(host) as conn,
        # "server" truncation makes the host honour the pragma's max_output_tokens.
        conn.open_session(tools, output_truncation="server") as session,
    ):
        conversation = await agent_loop(model, session, tools, "What's the weather tomorrow?")
    for message in conversation:
        show(message)
    return conversation


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)
