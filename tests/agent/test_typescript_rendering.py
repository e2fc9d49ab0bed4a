"""Tool schemas rendered as TypeScript, checked against what Codex renders for the same input.

The first group takes its schemas from the tests of Codex's renderer
(``codex-rs/code-mode-protocol/src/description.rs``); the expected strings are what that
renderer produces for them. The rest pin the remaining rules one by one.
"""

from __future__ import annotations

from typing import Any

import pytest

import codemode_trio as cm
from codemode_trio.agent import augment_definition, render_json_schema_to_typescript
from codemode_trio.agent.declarations import exec_tool_description, typescript_declarations


def mcp_result(structured: Any) -> dict[str, Any]:
    """An MCP CallToolResult output schema around ``structured``."""
    return {
        "type": "object",
        "properties": {
            "content": {"type": "array", "items": {"type": "object"}},
            "structuredContent": structured,
            "isError": {"type": "boolean"},
            "_meta": {"type": "object"},
        },
        "required": ["content"],
        "additionalProperties": False,
    }


EMPTY_OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}

# --------------------------------------------------------------------------- Codex's cases


def test_a_definition_gets_its_declaration_appended() -> None:
    definition = cm.ToolDefinition(
        "hidden_dynamic_tool",
        "Test tool",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        },
    )
    assert augment_definition(definition).description == (
        "Test tool\n\nexec tool declaration:\n```ts\n"
        "declare const tools: { hidden_dynamic_tool(args: { city: string; }): "
        "Promise<{ ok: boolean; }>; };\n```"
    )


def test_property_descriptions_become_comments_one_property_per_line() -> None:
    definition = cm.ToolDefinition(
        "weather_tool",
        "Weather tool",
        input_schema={
            "type": "object",
            "properties": {
                "weather": {
                    "type": "array",
                    "description": "look up weather for a given list of locations",
                    "items": {
                        "type": "object",
                        "properties": {"location": {"type": "string"}},
                        "required": ["location"],
                    },
                }
            },
            "required": ["weather"],
        },
        output_schema={
            "type": "object",
            "properties": {
                "forecast": {"type": "string", "description": "human readable weather forecast"}
            },
            "required": ["forecast"],
        },
    )
    assert (
        "weather_tool(args: {\n"
        "  // look up weather for a given list of locations\n"
        "  weather: Array<{ location: string; }>;\n"
        "}): Promise<{\n"
        "  // human readable weather forecast\n"
        "  forecast: string;\n"
        "}>;"
    ) in augment_definition(definition).description


def test_local_refs_are_expanded_twice_per_path_then_unknown() -> None:
    schema = {
        "type": "object",
        "properties": {
            "clauses": {"type": "array", "items": {"$ref": "#/$defs/Boolean~1Clause~0v1"}}
        },
        "required": ["clauses"],
        "additionalProperties": False,
        "$defs": {
            "Boolean/Clause~v1": {
                "type": "object",
                "properties": {
                    "occur": {"type": "string", "enum": ["must", "should"]},
                    "query": {
                        "$ref": "#/$defs/Query",
                        "description": "Use a nested group for parenthesized expressions.",
                    },
                },
                "required": ["occur", "query"],
                "additionalProperties": False,
            },
            "Query": {
                "oneOf": [
                    {"$ref": "#/$defs/Leaf"},
                    {
                        "type": "object",
                        "properties": {
                            "clauses": {
                                "type": "array",
                                "items": {"$ref": "#/$defs/Boolean~1Clause~0v1"},
                            }
                        },
                        "required": ["clauses"],
                        "additionalProperties": False,
                    },
                ]
            },
            "Leaf": {
                "type": "object",
                "properties": {
                    "field": {"type": "string", "enum": ["A", "B", "C"]},
                    "value": {"type": "string"},
                },
                "required": ["field", "value"],
                "additionalProperties": False,
            },
        },
    }
    assert render_json_schema_to_typescript(schema) == (
        "{ clauses: Array<{\n"
        '  occur: "must" | "should";\n'
        "  // Use a nested group for parenthesized expressions.\n"
        '  query: { field: "A" | "B" | "C"; value: string; } | { clauses: Array<{\n'
        '  occur: "must" | "should";\n'
        "  // Use a nested group for parenthesized expressions.\n"
        '  query: { field: "A" | "B" | "C"; value: string; } | { clauses: Array<unknown>; };\n'
        "}>; };\n"
        "}>; }"
    )


def test_mcp_results_are_call_tool_results_of_their_structured_content() -> None:
    structured = {
        "type": "object",
        "properties": {
            "results": {"type": "array", "items": {"$ref": "#/definitions/Result~1item~0v1"}}
        },
        "required": ["results"],
        "additionalProperties": False,
        "definitions": {
            "Result/item~v1": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "score": {"type": "number"}},
                "required": ["id", "score"],
                "additionalProperties": False,
            }
        },
    }
    definition = cm.ToolDefinition(
        "mcp__sample__search",
        "Search",
        input_schema=EMPTY_OBJECT,
        output_schema=mcp_result(structured),
        namespace="mcp__sample__",
    )
    assert (
        "mcp__sample__search(args: {}): Promise<CallToolResult<{ results: Array<{ id: string; "
        "score: number; }>; }>>;"
    ) in augment_definition(definition).description


def test_keywords_beside_a_ref_are_intersected_with_it() -> None:
    schema = {"$ref": "#/$defs/Label", "enum": ["A"], "$defs": {"Label": {"type": "string"}}}
    assert render_json_schema_to_typescript(schema) == '(string) & ("A")'


def test_the_exec_description_has_a_section_per_tool() -> None:
    description = exec_tool_description([cm.ToolDefinition("foo", "bar")])
    assert "### `foo`\nbar\n\nexec tool declaration:\n```ts\n" in description
    assert "declare const tools: { foo(args: unknown): Promise<unknown>; };" in description


def test_the_shared_mcp_types_are_declared_once_and_only_when_needed() -> None:
    tools = [
        cm.ToolDefinition(name, name, input_schema=EMPTY_OBJECT, output_schema=mcp_result(s))
        for name, s in [("mcp__sample__alpha", EMPTY_OBJECT), ("mcp__sample__beta", True)]
    ]
    description = exec_tool_description(tools)
    assert description.count("Shared MCP Types:") == 1
    assert description.count("type CallToolResult<TStructured = { [key: string]: unknown }>") == 1
    assert (
        "declare const tools: { mcp__sample__alpha(args: {}): Promise<CallToolResult<{}>>; };"
    ) in description
    # A structured content of `true` says nothing: the plain CallToolResult.
    assert "mcp__sample__beta(args: {}): Promise<CallToolResult>;" in description
    assert "Shared MCP Types" not in exec_tool_description([cm.ToolDefinition("foo", "bar")])


def test_a_heading_shows_the_raw_name_beside_its_binding() -> None:
    description = exec_tool_description([cm.ToolDefinition("hidden-dynamic-tool", "x")])
    assert "### `hidden_dynamic_tool` (`hidden-dynamic-tool`)\nx" in description
    assert "hidden_dynamic_tool(args: unknown)" in description


def test_the_exec_description_lists_tools_by_name_and_describes_the_pragma() -> None:
    description = exec_tool_description(
        [cm.ToolDefinition("b", "second"), cm.ToolDefinition("a", "first")]
    )
    assert description.index("### `a`") < description.index("### `b`")
    assert '`// @exec: {"yield_time_ms": 10000, "max_output_tokens": 1000}`' in description
    for helper in ("text(", "image(", "content(", "store(", "load(", "notify(", "exit()"):
        assert f"`{helper}" in description


# --------------------------------------------------------------------------- the other rules


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (True, "unknown"),
        (False, "never"),
        ({}, "unknown"),
        (None, "unknown"),
        ({"type": "integer"}, "number"),
        ({"type": ["string", "null"]}, "string | null"),
        ({"type": ["nope"]}, "unknown"),
        ({"type": 5}, "unknown"),
        ({"type": []}, "unknown"),
        ({"const": None}, "null"),
        ({"const": {"a": [1, 2.5]}}, '{"a":[1,2.5]}'),
        ({"enum": ["x", 1, 1e21, 1.5e-7, True]}, '"x" | 1 | 1e21 | 1.5e-7 | true'),
        ({"enum": [], "type": "string"}, "string"),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, "string | null"),
        ({"oneOf": [], "allOf": [{"type": "string"}, {"minLength": 1}]}, "string & unknown"),
        ({"type": "array"}, "unknown[]"),
        ({"items": {"type": "string"}}, "Array<string>"),
        ({"prefixItems": [{"type": "string"}, {"type": "integer"}]}, "[string, number]"),
        ({"type": "object"}, "{ [key: string]: unknown; }"),
        ({"type": "object", "additionalProperties": False}, "{}"),
        ({"additionalProperties": {"type": "integer"}}, "{ [key: string]: number; }"),
        ({"required": ["a"]}, "{ [key: string]: unknown; }"),
        (
            {"properties": {"b": {}, "a": {"type": "string"}}, "required": ["a"]},
            "{ a: string; b?: unknown; }",
        ),
        (
            {"properties": {"a": {}}, "additionalProperties": True},
            "{ a?: unknown; [key: string]: unknown; }",
        ),
        (
            {"properties": {"not-an id": {}, "$ok": {}, "9": {}}},
            '{ $ok?: unknown; "9"?: unknown; "not-an id"?: unknown; }',
        ),
        ({"$ref": "#/$defs/Missing"}, "unknown"),
        ({"$ref": "https://example.com/schema"}, "unknown"),
        ({"$ref": "other.json#/a"}, "unknown"),
        ({"$ref": "#/$defs/Missing", "type": "string"}, "string"),
        # Each of the two expansions of the root keeps its own sibling keywords.
        (
            {"$ref": "#", "type": "object", "additionalProperties": False},
            "(({}) & ({})) & ({})",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {"$ref": "#/properties/b/items/0"},
                    "b": {"items": [{"type": "null"}]},
                },
            },
            "{ a?: null; b?: Array<unknown>; }",
        ),
    ],
)
def test_schema_rules(schema: Any, expected: str) -> None:
    assert render_json_schema_to_typescript(schema) == expected


def test_a_self_reference_is_shown_twice_then_unknown() -> None:
    schema = {
        "type": "object",
        "properties": {"next": {"$ref": "#"}},
        "additionalProperties": False,
    }
    assert render_json_schema_to_typescript(schema) == (
        "{ next?: { next?: { next?: unknown; }; }; }"
    )


def test_a_description_cannot_end_its_comment_early() -> None:
    schema = {
        "properties": {
            "a": {"type": "string", "description": " one \r two\u2028three\u2029 \r\n  \nfour "},
        }
    }
    assert render_json_schema_to_typescript(schema) == (
        "{\n  // one\n  // two\n  // three\n  // four\n  a?: string;\n}"
    )


def test_freeform_tools_take_a_string_input() -> None:
    definition = cm.ToolDefinition("patch", "Apply a patch", kind="freeform")
    assert "patch(input: string): Promise<unknown>;" in augment_definition(definition).description


def test_declarations_keep_the_last_tool_of_a_binding_and_comment_descriptions() -> None:
    text = typescript_declarations(
        [
            cm.ToolDefinition("my-tool", "first", input_schema=EMPTY_OBJECT),
            cm.ToolDefinition("other", "line one\nline two"),
            cm.ToolDefinition("my_tool", "second", input_schema=EMPTY_OBJECT),
        ]
    )
    assert text == (
        "declare const tools: {\n"
        "  // line one\n"
        "  // line two\n"
        "  other(args: unknown): Promise<unknown>;\n"
        "  // second\n"
        "  my_tool(args: {}): Promise<unknown>;\n"
        "};\n"
    )
    assert typescript_declarations([]) == "declare const tools: {};\n"
