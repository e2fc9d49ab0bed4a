"""The exec and wait tool specifications, wait arguments, and the answers handed to a model."""

from __future__ import annotations

import json

import pytest

import codemode_trio as cm
from codemode_trio.agent.specs import EXEC_GRAMMAR


def registry() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return tools


def test_exec_spec_is_a_function_tool_with_the_registry_s_description() -> None:
    tools = registry()
    spec = cm.exec_tool_spec(tools)
    assert spec["type"] == "function"
    assert spec["name"] == "exec"
    assert spec["description"] == tools.exec_tool_description()
    assert spec["parameters"] == {
        "type": "object",
        "properties": {
            "source": {
                "type": "string",
                "description": spec["parameters"]["properties"]["source"]["description"],
            }
        },
        "required": ["source"],
        "additionalProperties": False,
    }
    assert "add(args: { a: number; b: number; }): Promise<number>;" in spec["description"]
    json.dumps(spec)  # ready for a request body
    # Definitions work as well as a registry.
    assert cm.exec_tool_spec(list(tools.definitions()))["name"] == "exec"


def test_exec_spec_as_a_freeform_tool_carries_the_grammar() -> None:
    spec = cm.exec_tool_spec(registry(), freeform=True)
    assert spec["type"] == "custom"
    assert spec["format"] == {"type": "grammar", "syntax": "lark", "definition": EXEC_GRAMMAR}


def test_wait_spec_requires_only_the_cell_id() -> None:
    spec = cm.wait_tool_spec()
    assert spec["name"] == "wait"
    parameters = spec["parameters"]
    assert parameters["required"] == ["cell_id"]
    assert parameters["additionalProperties"] is False
    assert {k: v["type"] for k, v in parameters["properties"].items()} == {
        "cell_id": "string",
        "yield_time_ms": "number",
        "max_tokens": "number",
        "terminate": "boolean",
    }
    assert "Script running with cell ID" in spec["description"]


def test_wait_arguments_from_text_or_mapping() -> None:
    assert cm.parse_wait_arguments('{"cell_id": "3"}') == cm.WaitRequest("3", 10_000, None, False)
    assert cm.parse_wait_arguments(
        {"cell_id": "3", "yield_time_ms": 5, "max_tokens": 7, "terminate": True, "extra": 1}
    ) == cm.WaitRequest("3", 5, 7, True)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("{", "Expecting property name"),
        ("[]", "expected an object"),
        ("{}", "missing field `cell_id`"),
        ('{"cell_id": 3}', "`cell_id` must be a string"),
        ('{"cell_id": "3", "yield_time_ms": -1}', "`yield_time_ms` must be a non-negative"),
        ('{"cell_id": "3", "max_tokens": 1.5}', "`max_tokens` must be a non-negative integer"),
        ('{"cell_id": "3", "terminate": "yes"}', "`terminate` must be a boolean"),
    ],
)
def test_bad_wait_arguments_are_refused(arguments: str, problem: str) -> None:
    with pytest.raises(cm.WaitArgumentsError, match="^failed to parse function arguments: ") as e:
        cm.parse_wait_arguments(arguments)
    assert problem in str(e.value)


def test_observations_are_headed_with_their_status() -> None:
    image = cm.ImageItem("data:image/png;base64,AAAA", "low")
    running = cm.RuntimeResponse("yielded", "4", (cm.TextItem("so far"), image))
    assert cm.format_observation(running, wall_time_seconds=0.25) == (
        cm.TextItem("Script running with cell ID 4\nWall time 0.2 seconds\nOutput:\n"),
        cm.TextItem("so far"),
        image,
    )
    done = cm.RuntimeResponse("result", "4", ())
    assert cm.format_observation(done, wall_time_seconds=1.96)[0].text.startswith(
        "Script completed\nWall time 2.0 seconds"
    )
    failed = cm.RuntimeResponse("result", "4", (cm.TextItem("a"),), error_text="Error: x")
    assert cm.format_observation(failed, wall_time_seconds=0) == (
        cm.TextItem("Script failed\nWall time 0.0 seconds\nOutput:\n"),
        cm.TextItem("a"),
        cm.TextItem("Script error:\nError: x"),
    )
    stopped = cm.RuntimeResponse("terminated", "4", ())
    assert cm.format_observation(stopped, wall_time_seconds=0)[0].text.startswith(
        "Script terminated\n"
    )
