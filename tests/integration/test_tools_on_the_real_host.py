"""ToolRegistry through the real host: derived schemas are accepted, arguments arrive
converted, refusals reach JavaScript as one line naming the tool and the argument."""

from __future__ import annotations

import dataclasses
import enum
import io
from pathlib import Path
from typing import Any, Literal

import pydantic
import trio
from typing_extensions import TypedDict

import codemode_trio as cm
from codemode_trio.runner import run_cell


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Shade(enum.Enum):
    LIGHT = "light"
    DARK = "dark"


class Label(TypedDict):
    text: str
    size: int


class Box(pydantic.BaseModel):
    corner: Point
    labels: list[Label]
    shade: Shade = Shade.LIGHT


def make_tools() -> tuple[cm.ToolRegistry, list[Any]]:
    tools = cm.ToolRegistry()
    received: list[Any] = []

    @tools.function
    async def scalars(n: int, ratio: float, name: str, flag: bool, mode: Literal["a", "b"]) -> str:
        received.append((n, ratio, name, flag, mode))
        return "ok"

    @tools.function
    async def shapes(
        points: list[Point], shade: Shade, tags: dict[str, float], pair: tuple[int, str]
    ) -> str:
        received.append((points, shade, tags, pair))
        return "ok"

    @tools.function
    async def nested(box: Box, maybe: Label | None = None) -> Box:
        received.append((box, maybe))
        return box

    return tools, received


CELL = """
const show = async (call) => {
  try { text(JSON.stringify(await call())); } catch (e) { text(`${typeof e}: ${e}`); }
};
const pair = [1, 'z'];
await show(() => tools.scalars({n: 1, ratio: 0.5, name: 'x', flag: true, mode: 'a'}));
await show(() => tools.scalars({n: '1', ratio: 0.5, name: 'x', flag: true, mode: 'a'}));
await show(() => tools.scalars({n: 1, ratio: true, name: 'x', flag: true, mode: 'a'}));
await show(() => tools.scalars({n: 1, ratio: 0.5, name: 'x', flag: true, mode: 'c'}));
await show(() => tools.scalars({n: 1, ratio: 0.5, name: 'x', flag: true, mode: 'a', extra: 1}));
await show(() => tools.shapes({points: [{x: 1, y: 2}], shade: 'dark', tags: {a: 1}, pair}));
await show(() => tools.shapes({points: [{x: 1, y: 2}, {x: 1}], shade: 'dark', tags: {}, pair}));
await show(() => tools.shapes({points: [], shade: 'grey', tags: {}, pair}));
const box = {corner: {x: 0, y: 0}, labels: [{text: 't', size: 3}], shade: 'dark'};
await show(() => tools.nested({box}));
await show(() => tools.nested({box: {...box, labels: [{text: 't', size: 3}, {text: 4, size: 1}]}}));
"""

EXPECTED = [
    '"ok"',
    "string: tool 'scalars': argument 'n': input should be a valid integer",
    "string: tool 'scalars': argument 'ratio': input should be a valid number",
    "string: tool 'scalars': argument 'mode': input should be 'a' or 'b'",
    "string: tool 'scalars': unexpected argument 'extra'",
    '"ok"',
    "string: tool 'shapes': argument 'points[1].y': field required",
    "string: tool 'shapes': argument 'shade': input should be 'light' or 'dark'",
    '{"corner":{"x":0,"y":0},"labels":[{"text":"t","size":3}],"shade":"dark"}',
    "string: tool 'nested': argument 'box.labels[1].text': input should be a valid string",
]


async def test_every_kind_of_argument_round_trips_through_the_host(host_path: Path) -> None:
    tools, received = make_tools()
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session(tools) as session:
            result = await session.run(CELL)
    assert result.error_text is None
    assert result.text.splitlines() == EXPECTED
    assert received == [
        (1, 0.5, "x", True, "a"),
        ([Point(1, 2)], Shade.DARK, {"a": 1.0}, (1, "z")),
        (
            Box(corner=Point(0, 0), labels=[{"text": "t", "size": 3}], shade=Shade.DARK),
            None,
        ),
    ]


async def test_run_shows_notifications_and_keeps_the_registrys_own_handler(
    host_path: Path,
) -> None:
    tools = cm.ToolRegistry()
    heard: list[str] = []

    @tools.on_notification
    async def hear(note: cm.Notification) -> None:
        heard.append(note.text)

    out, err = io.StringIO(), io.StringIO()
    with trio.fail_after(30):
        status = await run_cell(
            "notify('one'); text('done')", tools=tools, host_path=host_path, out=out, err=err
        )
    assert (status, out.getvalue(), err.getvalue()) == (0, "done\n", "[notify] one\n")
    assert heard == ["one"]
    assert tools.notification_handler is hear  # the run did not replace it
