"""Typed tools: dataclass, TypedDict, enum and pydantic arguments, checked by ``mypy --strict``.

The decorator returns each function with its own type, so the tools stay ordinary typed async
functions (CI runs ``mypy --strict`` on this file). The cell's arguments are validated against
the annotations and arrive converted: ``route`` receives ``Point`` objects, not dicts, and a bad
call is refused with a one-line message naming the argument, which the cell catches.

Run: ``python examples/typed_tools.py`` (after ``codemode-trio host fetch``), or use it as a
tools module: ``codemode-trio run -e "text(await tools.scale({factor: 2}))" --tools
examples/typed_tools.py``.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from typing import Annotated, assert_type

import pydantic
import trio
from typing_extensions import TypedDict

import codemode_trio as cm

tools = cm.ToolRegistry()


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Unit(enum.Enum):
    KM = "km"
    MILES = "miles"


class Leg(TypedDict):
    start: str
    end: str


class Trip(pydantic.BaseModel):
    legs: list[Leg]
    unit: Unit = Unit.KM


@tools.function
async def route(points: list[Point], unit: Unit = Unit.KM) -> dict[str, float | str]:
    """Length of a path through the points.

    Args:
        points: the path, in order
        unit: the unit of the coordinates
    """
    length = sum(math.dist((a.x, a.y), (b.x, b.y)) for a, b in itertools.pairwise(points))
    return {"length": round(length, 3), "unit": unit.value}


@tools.function(description="Describe a trip")
async def plan(trip: Trip) -> Trip:
    return trip  # a model result is sent as JSON


@tools.function(name="scale")
async def scale(factor: Annotated[int, pydantic.Field(description="a whole factor")]) -> int:
    return 10 * factor


CELL = """
const r = await tools.route({points: [{x: 0, y: 0}, {x: 3, y: 4}, {x: 3, y: 8}]});
text(`route: ${r.length} ${r.unit}`);
const p = await tools.plan({trip: {legs: [{start: 'A', end: 'B'}], unit: 'miles'}});
text(`plan: ${p.legs.length} leg in ${p.unit}`);
try {
  await tools.route({points: [{x: 0, y: 0}, {x: 'far', y: 1}]});
} catch (e) {
  text(`refused: ${e}`);
}
"""


async def main() -> None:
    # The decorator keeps the types: these fail mypy if it ever returns Any again.
    total = assert_type(await scale(3), int)
    path = assert_type(await route([Point(0, 0), Point(1, 0)]), dict[str, float | str])
    print(f"python calls: {total} {path['length']}")
    async with cm.open_host_process() as conn, conn.open_session(tools) as session:
        result = await session.run(CELL)
        print(result.text)
        print(f"final: {result.kind}")


if __name__ == "__main__":
    trio.run(main)
