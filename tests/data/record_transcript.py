"""Record the transcript fixture used by ``tests/client/test_transcript_replay.py``.

Runs :func:`scenario` against a real host with ``transcript=`` set, so the file holds the exact
frames both ways. Re-record after changing the scenario::

    python tests/data/record_transcript.py [HOST_PATH] [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import codemode_trio as cm

HERE = Path(__file__).parent
DEFAULT_OUT = HERE / "transcript-0.171.0.cbor"


def make_tools() -> cm.ToolRegistry:
    """The tools the scenario's cells call (deterministic results)."""
    tools = cm.ToolRegistry()
    # The schemas are spelled out so the recorded frames do not change whenever the schema
    # derivation does (the fixture is about the protocol, not about schemas).
    add_schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    explode_schema = {
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    }

    @tools.function(description="Add two integers", input_schema=add_schema)
    async def add(a: int, b: int) -> int:
        return a + b

    @tools.function(description="Fails", input_schema=explode_schema)
    async def explode(message: str) -> None:
        raise cm.ToolError(message)

    return tools


#: The definitions the scenario's cells are given, written out for the same reason: a
#: registry's own definitions carry declarations derived from the schemas.
DEFINITIONS = (
    cm.ToolDefinition(
        "add",
        "Add two integers",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    cm.ToolDefinition(
        "explode",
        "Fails",
        input_schema={
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
        },
    ),
)


async def scenario(conn: cm.Connection) -> list[str]:
    """Open a session, run cells that call tools, yield, get waited on and terminated."""
    seen: list[str] = []
    async with conn.open_session(make_tools()) as session:
        result = await session.run(
            "text(await tools.add({a: 2, b: 3})); notify('noted')", tools=DEFINITIONS
        )
        seen.append(result.text)
        failed = await session.run("await tools.explode({message: 'kaboom'})", tools=DEFINITIONS)
        seen.append(failed.error_text or "")
        cell = await session.execute(
            "text('a'); yield_control(); await new Promise(() => {})", tools=DEFINITIONS
        )
        seen.append((await cell.initial_response()).text)
        outcome = await session.terminate(cell.cell_id)
        seen.append(outcome.response.kind)
    return seen


async def main(host: str | None, out: Path) -> None:
    async with cm.open_host_process(host, transcript=out) as conn:
        print(await scenario(conn))


if __name__ == "__main__":
    # Start from an empty file: transcripts append.
    (Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_OUT).unlink(missing_ok=True)
    trio.run(
        main,
        sys.argv[1] if len(sys.argv) > 1 else None,
        Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_OUT,
    )
