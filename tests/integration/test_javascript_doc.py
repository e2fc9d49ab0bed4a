"""docs/javascript.md, checked against the real host: every example's output, every global.

Each fenced ``js`` block of the page is run as one cell with the tools of
``examples/tools.py``, the way ``codemode-trio run`` runs it, and must print exactly the
``output`` block that follows it (stdout lines, then stderr lines marked ``stderr:``).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import trio

from codemode_trio.runner import load_tools, run_cell

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "javascript.md"
PAGE = DOC.read_text(encoding="utf-8")

_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, str, str]]:
    """(section heading, source, expected output) for every ``js`` block, in page order."""
    found: list[tuple[str, str, str]] = []
    blocks = [(m.start(), m.group(1), m.group(2)) for m in _BLOCK.finditer(PAGE)]
    for index, (start, kind, body) in enumerate(blocks):
        if kind != "js":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        assert following is not None and following[1] == "output", (
            f"the js block at offset {start} of {DOC.name} has no output block after it"
        )
        headings = re.findall(r"^#+ (.*)$", PAGE[:start], re.MULTILINE)
        found.append((headings[-1], body, following[2]))
    return found


EXAMPLES = examples()


def test_the_page_has_examples_for_each_section() -> None:
    sections = {heading for heading, _, _ in EXAMPLES}
    assert len(EXAMPLES) >= 15
    assert len(sections) >= 8


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(source, expected, id=f"{i}-{heading}")
        for i, (heading, source, expected) in enumerate(EXAMPLES)
    ],
)
async def test_example_prints_what_the_page_says(
    source: str, expected: str, host_path: Path
) -> None:
    out, err = io.StringIO(), io.StringIO()
    tools = load_tools(str(REPO / "examples" / "tools.py"))
    with trio.fail_after(30):
        await run_cell(source, tools=tools, host_path=host_path, out=out, err=err)
    printed = out.getvalue().splitlines() + [
        f"stderr: {line}" for line in err.getvalue().splitlines()
    ]
    assert printed == expected.splitlines()


def _table_globals() -> set[str]:
    table = PAGE[PAGE.index("## Globals") : PAGE.index("Everything else is standard")]
    names: set[str] = set()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    for row in rows:
        names.update(re.findall(r"`(\w+)`", row.split("|")[1]))
    return names


async def test_the_table_lists_every_global_the_host_adds(host_path: Path) -> None:
    from py_mini_racer import MiniRacer

    # A bare V8 of about the same version tells which globals are standard ECMAScript.
    standard = set(
        json.loads(MiniRacer().eval("JSON.stringify(Object.getOwnPropertyNames(globalThis))"))
    )
    listing = "text(JSON.stringify(Object.getOwnPropertyNames(globalThis)))"
    out = io.StringIO()
    with trio.fail_after(30):
        assert await run_cell(listing, host_path=host_path, out=out) == 0
    on_host = set(json.loads(out.getvalue()))
    documented = _table_globals()
    assert on_host - standard <= documented
    assert documented <= on_host
    absent = re.findall(r"`(\w+)`", PAGE[PAGE.index("There is no `console`") :].split("\n\n")[0])
    assert "console" in absent
    assert not set(absent) & on_host
