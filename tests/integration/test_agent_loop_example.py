"""examples/agent_loop.py against the real host 0.171.0 and ``codemode-trio serve``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

import codemode_trio as cm

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_loop.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_loop"] = module  # attrs resolves the classes' annotations through it
    spec.loader.exec_module(module)
    return module


async def test_the_agent_loop_runs_exec_then_wait_and_hands_back_images(host_path: Path) -> None:
    example = load_example()
    with trio.fail_after(60):
        conversation: list[Any] = await example.main(str(host_path))
    roles = [message.role for message in conversation]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]

    # The program yielded its first half at once, and the answer said it was still running...
    first = conversation[3].output
    assert first[0].text.startswith("Script running with cell ID ")
    cell_id = first[0].text.split("\n")[0].rsplit(" ", 1)[1]
    assert first[1:] == (
        cm.TextItem("Paris: 18 C, cloudy"),
        cm.TextItem("Oslo: 7 C, rain"),
        cm.ImageItem(example.PIXEL, "low"),  # the chart tool's image, detail kept
    )
    # ...and the model's wait on that cell was honoured.
    (wait_call,) = conversation[4].tool_calls
    assert wait_call.name == "wait"
    assert json.loads(wait_call.arguments) == {"cell_id": cell_id, "yield_time_ms": 5000}
    second = conversation[5].output
    assert second[0].text.startswith("Script completed\nWall time ")
    assert second[1:] == (cm.TextItem("warmest: Paris"),)
    assert conversation[6].text == (
        "Tomorrow: Paris: 18 C, cloudy; Oslo: 7 C, rain; warmest: Paris"
    )


async def test_the_model_is_offered_exec_with_every_declaration(host_path: Path) -> None:
    example = load_example()
    model = example.ScriptedModel()
    with trio.fail_after(60):
        async with (
            cm.open_host_process(host_path) as conn,
            conn.open_session(example.tools) as session,
        ):
            await example.agent_loop(model, session, example.tools, "weather?")
    exec_spec, wait_spec = model.seen_tools
    assert exec_spec == cm.exec_tool_spec(example.tools)
    assert wait_spec == cm.wait_tool_spec()
    description = exec_spec["description"]
    assert description == example.tools.exec_tool_description()
    assert (
        "forecast(args: {\n  // the city's English name\n  city: string;\n}): "
        "Promise<{ celsius: number; city: string; sky: string; }>;"
    ) in description


async def test_a_malformed_pragma_is_answered_to_the_model(host_path: Path) -> None:
    example = load_example()
    with trio.fail_after(60):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as session:
            call = example.ToolCall("c1", "exec", json.dumps({"source": "// @exec: {]\ntext(1)"}))
            output = await example.run_tool_call(session, call)
            bad_wait = example.ToolCall("c2", "wait", "{}")
            waited = await example.run_tool_call(session, bad_wait)
            gone = example.ToolCall("c3", "wait", json.dumps({"cell_id": "999"}))
            missing = await example.run_tool_call(session, gone)
    assert len(output) == 1
    assert output[0].text.startswith(
        "exec pragma must be valid JSON with supported fields `yield_time_ms` and "
        "`max_output_tokens`: "
    )
    assert waited == (cm.TextItem("failed to parse function arguments: missing field `cell_id`"),)
    assert missing[0].text.startswith("Script failed\n")
    assert missing[-1] == cm.TextItem("Script error:\nexec cell 999 not found")


def test_the_example_runs_as_a_script(host_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(host_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "[tool] <ImageItem>" in done.stdout
    assert done.stdout.rstrip().endswith(
        "[assistant] Tomorrow: Paris: 18 C, cloudy; Oslo: 7 C, rain; warmest: Paris"
    )


async def test_the_pragma_s_yield_time_is_the_cell_s(host_path: Path) -> None:
    example = load_example()
    source = '// @exec: {"yield_time_ms": 1000}\ntext("started"); await new Promise(() => {})'
    with trio.fail_after(60):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as session:
            started = trio.current_time()
            output = await example.run_tool_call(
                session, example.ToolCall("c1", "exec", json.dumps({"source": source}))
            )
            elapsed = trio.current_time() - started
    # Without the pragma the host would have held the answer for its default 10 s.
    assert elapsed < 5
    assert output[0].text.startswith("Script running with cell ID ")
    assert output[1:] == (cm.TextItem("started"),)
