"""The declarations of a registry with varied schemas, checked by the TypeScript compiler.

``tsc --noEmit --strict`` compiles the registry's ``typescript_declarations()`` with a usage
file: its correct calls must type-check, and every misuse marked ``@ts-expect-error`` must be an
error (an unused directive is itself an error). The compiler is the pinned ``typescript`` that
``.ci/run`` installs into ``.ci/node_modules``.
"""

from __future__ import annotations

import dataclasses
import enum
import shutil
import subprocess
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import attrs
import pydantic
import pytest

import codemode_trio as cm

REPO = Path(__file__).parents[2]
TSC = REPO / ".ci" / "node_modules" / ".bin" / "tsc"


@pytest.fixture(scope="module")
def tsc() -> Path:
    """The pinned compiler; its absence FAILS the test (never skipped)."""
    if not TSC.is_file() or shutil.which("node") is None:
        pytest.fail(
            "the TypeScript compiler is required: install it with "
            "`npm install --prefix .ci --no-save typescript@5.6.3` (as .ci/run does)"
        )
    return TSC


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(pydantic.BaseModel):
    x: float
    y: float
    label: str | None = None


class Tree(pydantic.BaseModel):
    """A recursive model: its declaration ends in `unknown` two levels down."""

    name: str
    children: list[Tree] = []


class Address(typing.TypedDict, total=False):
    street: typing.Required[str]
    zip: str


@attrs.frozen
class Order:
    item: str
    count: int = 1


@dataclasses.dataclass
class Stats:
    mean: float
    samples: list[float]


def varied_registry() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tools.function
    async def paint(
        color: Color,
        where: Point,
        mode: Literal["fill", "stroke"] = "fill",
        opacity: Annotated[float, pydantic.Field(description="0 is clear,\n1 opaque")] = 1.0,
    ) -> list[Point]:
        """Paint at a point."""
        return [where]

    @tools.function
    async def ship(to: Address, order: Order, tags: dict[str, int] | None = None) -> Order:
        """Ship an order (a TypedDict and an attrs class)."""
        return order

    @tools.function
    async def measure(values: tuple[float, float], **options: str) -> Stats:
        """Options are free-form strings."""
        return Stats(sum(values) / 2, list(values))

    @tools.function
    async def grow(tree: Tree) -> Tree | None:
        """Recursive types."""
        return tree

    @tools.function(name="my-tool.v2")
    async def renamed() -> str:
        """A name that is not an identifier."""
        return ""

    @tools.function
    async def snapshot() -> list[cm.ContentItem]:
        """Content items, as MCP blocks."""
        return []

    @tools.function(raw_input=True)
    async def patch(text: Any) -> None:
        """A freeform tool."""

    @tools.function(
        output_schema={
            "type": "object",
            "properties": {
                "content": {"type": "array", "items": {"type": "object"}},
                "structuredContent": {
                    "type": "object",
                    "properties": {"hits": {"type": "integer"}},
                    "required": ["hits"],
                },
                "isError": {"type": "boolean"},
                "_meta": {"type": "object"},
            },
            "required": ["content"],
        }
    )
    async def search(q: str) -> Any:
        """An MCP-shaped result."""
        return {}

    @tools.function
    async def untyped(x, y=2):  # type: ignore[no-untyped-def]
        """No annotations at all."""
        return x

    return tools


USAGE = """
async function use(): Promise<void> {
  const sum: number = await tools.add({ a: 1, b: 2 });
  // @ts-expect-error: a string where a number is declared
  await tools.add({ a: "1", b: 2 });
  // @ts-expect-error: a required argument missing
  await tools.add({ a: 1 });
  // @ts-expect-error: an extra property (additionalProperties is false)
  await tools.add({ a: 1, b: 2, c: 3 });
  // @ts-expect-error: the result is a number
  const wrong: string = await tools.add({ a: 1, b: 2 });
  // @ts-expect-error: no such tool
  await tools.nope({});

  const points = await tools.paint({ color: "red", where: { x: 1, y: 2 } });
  const first: number = points[0].x;
  const label: string | null | undefined = points[0].label;
  await tools.paint({
    color: "green", where: { x: 0, y: 0, label: null }, mode: "stroke", opacity: 0.5,
  });
  // @ts-expect-error: not one of the enum's values
  await tools.paint({ color: "purple", where: { x: 1, y: 2 } });
  // @ts-expect-error: not one of the literal's values
  await tools.paint({ color: "red", where: { x: 1, y: 2 }, mode: "dots" });
  // @ts-expect-error: a nested required field missing
  await tools.paint({ color: "red", where: { x: 1 } });

  const order = await tools.ship({
    to: { street: "Main" }, order: { item: "apple" }, tags: { a: 1 },
  });
  const count: number | undefined = order.count;
  // @ts-expect-error: a TypedDict's required key missing
  await tools.ship({ to: { zip: "1" }, order: { item: "apple" } });
  // @ts-expect-error: an attrs field of the wrong type
  await tools.ship({ to: { street: "Main" }, order: { item: "apple", count: "2" } });
  // @ts-expect-error: a dict's values are numbers
  await tools.ship({ to: { street: "Main" }, order: { item: "apple" }, tags: { a: "1" } });

  const stats = await tools.measure({ values: [1, 2], unit: "cm" });
  const mean: number = stats.mean;
  // @ts-expect-error: a tuple of two numbers
  await tools.measure({ values: [1] });
  // @ts-expect-error: **options are strings
  await tools.measure({ values: [1, 2], unit: 3 });

  const tree = await tools.grow({ tree: { name: "root", children: [{ name: "leaf" }] } });
  const name: string | undefined = tree?.name;
  // @ts-expect-error: a child needs a name
  await tools.grow({ tree: { name: "root", children: [{}] } });

  const renamed: string = await tools.my_tool_v2({});
  const blocks = await tools.snapshot({});
  for (const block of blocks) {
    if (block.type === "image") {
      const mime: string = block.mimeType;
    } else if (block.type === "text") {
      const words: string = block.text;
    }
  }
  await tools.patch("*** Begin Patch");
  // @ts-expect-error: a freeform tool takes a string
  await tools.patch({ text: "x" });

  const found = await tools.search({ q: "trio" });
  const hits: number | undefined = found.structuredContent?.hits;
  const isError: boolean | undefined = found.isError;

  const anything: unknown = await tools.untyped({ x: 1 });
  // @ts-expect-error: an unknown result cannot be used as a number
  const doubled = (await tools.untyped({ x: 1 })) * 2;
}
"""


def compile_with(tsc: Path, tmp_path: Path, declarations: str, usage: str) -> str:
    (tmp_path / "tools.d.ts").write_text(declarations)
    (tmp_path / "usage.ts").write_text(usage)
    completed = subprocess.run(
        [
            str(tsc),
            "--noEmit",
            "--strict",
            "--target",
            "es2022",
            "--lib",
            "es2022",
            "tools.d.ts",
            "usage.ts",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return completed.stdout + completed.stderr


def test_the_declarations_type_check_correct_calls_and_refuse_misuse(
    tsc: Path, tmp_path: Path
) -> None:
    declarations = varied_registry().typescript_declarations()
    assert "type CallToolResult<" in declarations  # search returns one
    assert compile_with(tsc, tmp_path, declarations, USAGE) == ""


def test_the_compiler_check_can_fail(tsc: Path, tmp_path: Path) -> None:
    # A misuse not marked as expected is reported, so the test above is not vacuous.
    output = compile_with(
        tsc, tmp_path, varied_registry().typescript_declarations(), 'tools.add({ a: "1", b: 2 });'
    )
    assert "usage.ts(1," in output
    assert "error TS2322" in output


def test_each_tool_s_own_declaration_compiles(tsc: Path, tmp_path: Path) -> None:
    # The one-line declaration each description carries is valid TypeScript as well; each goes
    # in a namespace of its own, as they all declare `tools`.
    from codemode_trio.agent.typescript import MCP_TYPES

    parts = [MCP_TYPES]
    for index, definition in enumerate(varied_registry().definitions()):
        text = definition.description.split("```ts\n", 1)[1].removesuffix("\n```")
        assert text.startswith("declare const tools: { ")
        parts.append(f"declare namespace tool{index} {{ {text.removeprefix('declare ')} }}")
    assert compile_with(tsc, tmp_path, "\n".join(parts) + "\n", "export {};\n") == ""
