"""What the model reads about each tool: a TypeScript declaration, and the ``exec`` description.

:func:`augment_definition` appends a tool's declaration to its description, in the layout
Codex gives the host (so that ``ALL_TOOLS`` in a cell shows the same text)::

    Add two integers.

    exec tool declaration:
    ```ts
    declare const tools: { add(args: { a: number; b: number; }): Promise<number>; };
    ```

:func:`exec_tool_description` is the whole description of the ``exec`` tool for a model's
prompt: how a cell runs, the ``// @exec:`` pragma, the helpers, the MCP result types when a tool
returns a ``CallToolResult``, and one section per tool. :func:`typescript_declarations` is the
same tools as one ``.d.ts`` text, for the TypeScript compiler or for a prompt of one's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from ..protocol.content import ToolDefinition
from ..protocol.toolnames import normalize_identifier
from .typescript import (
    MCP_TYPES,
    comment_lines,
    mcp_structured_content_schema,
    render_json_schema_to_typescript,
)

__all__ = [
    "DECLARATION_MARKER",
    "EXEC_TOOL_NAME",
    "WAIT_TOOL_NAME",
    "augment_definition",
    "exec_tool_description",
    "input_type",
    "output_type",
    "tool_declaration",
    "typescript_declarations",
]

EXEC_TOOL_NAME = "exec"
WAIT_TOOL_NAME = "wait"
#: The line that introduces a tool's declaration in its description.
DECLARATION_MARKER = "exec tool declaration:"

_EXEC_INTRODUCTION = """\
Run a JavaScript program that calls the tools below and combines their results.
- The input is the program's source text, as is: not JSON, not a quoted string, no Markdown \
fences. It runs as one ES module, so top-level `await` works.
- Each program gets a fresh V8 isolate. Its variables, timers and unawaited promises are gone \
when it ends; only values saved with `store` reach later programs of the same session.
- Plain ECMAScript only: no Node.js, `require`, `console`, `fetch`, file system or network. \
Output comes only from the helpers below; the value of the last expression is not reported.
- Each tool is an async function on the global `tools` object: `await tools.NAME(input)`. Names \
are JavaScript identifiers (other characters are replaced by `_`); the declarations below give \
each one's input and result types.
- A failed tool call rejects with a plain string, not an `Error`. An uncaught exception ends \
the program; its output so far is kept and the error is reported after it.
- The first line may be a pragma, `// @exec: {"yield_time_ms": 10000, "max_output_tokens": \
1000}`, with the program on the lines after it.
- `yield_time_ms` (default 10000): how long to wait before answering with the output so far \
while the program keeps running in the background.
- `max_output_tokens` (default 10000): the token budget for the output this call returns.
- An answer that starts `Script running with cell ID <id>` means the program is still running: \
call `wait` with that `cell_id` for more output, or with `terminate: true` to stop it.

Global helpers:
- `text(value)`: appends a text item; a value that is not a string is JSON-stringified.
- `image(url, detail?)`, `image({ image_url, detail? })`, `image(block)`: appends an image: a \
base64 `data:` URL, or an MCP `ImageContent` block as a tool returns it. `detail` is "auto", \
"low", "high" (the default) or "original".
- `audio(url)`, `audio({ audio_url })`, `audio(block)`: appends an audio clip (a `data:` URL or \
an MCP `AudioContent` block).
- `content(block)`, `content(blocks)`: appends MCP content blocks (`text`, `image`, `audio`), \
such as a tool's content result.
- `generatedImage(result)`: appends the image of an image-generation result.
- `notify(value)`: sends a progress message at once, while the program keeps running.
- `store(key, value)`, `load(key)`: a JSON value per key, kept for later programs of the \
session; `load` of a missing key is `undefined`.
- `yield_control()`: answers now with the output so far; the program keeps running.
- `exit()`: ends the program successfully at once.
- `setTimeout(callback, delayMs?)`, `clearTimeout(id)`: timers; one still pending when the \
program ends never fires.
- `as_settled(promises)`: an async iterator of `{ index, status, value | reason }` records in \
the order the promises settle; `stream_settled(promises, emit)` calls `emit` with each record.
- `ALL_TOOLS`: the enabled tools as `{ name, description }` entries."""


def input_type(definition: ToolDefinition) -> str:
    """The TypeScript type of a tool's input: its schema's, ``string`` for a freeform tool."""
    if definition.kind == "freeform":
        return "string"
    return render_json_schema_to_typescript(definition.input_schema)


def output_type(definition: ToolDefinition) -> str:
    """The TypeScript type a tool's promise resolves to (``unknown`` without an output schema).

    An MCP ``CallToolResult`` schema is shown as ``CallToolResult<structured content>``, which
    refers to :data:`~codemode_trio.agent.typescript.MCP_TYPES`.
    """
    structured = mcp_structured_content_schema(definition.output_schema)
    if structured is not None:
        rendered = render_json_schema_to_typescript(structured)
        return "CallToolResult" if rendered == "unknown" else f"CallToolResult<{rendered}>"
    return render_json_schema_to_typescript(definition.output_schema)


def _member(definition: ToolDefinition) -> str:
    parameter = "input" if definition.kind == "freeform" else "args"
    binding = normalize_identifier(definition.name)
    return f"{binding}({parameter}: {input_type(definition)}): Promise<{output_type(definition)}>;"


def tool_declaration(definition: ToolDefinition) -> str:
    """``declare const tools: { NAME(args: In): Promise<Out>; };`` for one tool."""
    return f"declare const tools: {{ {_member(definition)} }};"


def augment_definition(definition: ToolDefinition) -> ToolDefinition:
    """``definition`` with its declaration appended to its description (see the module doc)."""
    text = (
        f"{definition.description}\n\n{DECLARATION_MARKER}\n"
        f"```ts\n{tool_declaration(definition)}\n```"
    )
    return attrs.evolve(definition, description=text)


def _uses_mcp_types(definitions: Iterable[ToolDefinition]) -> bool:
    return any(mcp_structured_content_schema(d.output_schema) is not None for d in definitions)


def _heading(definition: ToolDefinition) -> str:
    binding = normalize_identifier(definition.name)
    if binding == definition.name:
        return f"### `{binding}`"
    return f"### `{binding}` (`{definition.name}`)"


def exec_tool_description(definitions: Sequence[ToolDefinition]) -> str:
    """The ``exec`` tool's description for a model, with every tool's declaration.

    ``definitions`` carry the tools' own descriptions (not yet augmented); they are listed by
    name, each under a ``### `name``` heading followed by its description and declaration.
    """
    sections = [_EXEC_INTRODUCTION]
    if _uses_mcp_types(definitions):
        sections.append(f"Shared MCP Types:\n```ts\n{MCP_TYPES}\n```")
    for definition in sorted(definitions, key=lambda d: d.name):
        body = augment_definition(definition).description.strip()
        sections.append(f"{_heading(definition)}\n{body}")
    return "\n\n".join(sections)


def typescript_declarations(definitions: Sequence[ToolDefinition]) -> str:
    """Every tool as one ``declare const tools: {...};``, a valid ``.d.ts`` on its own.

    Each member is preceded by its description as ``//`` comments. When two tools share a
    binding, the last one is declared, as it is the one a cell calls. The MCP result types are
    declared first when a tool returns a ``CallToolResult``.
    """
    bound: dict[str, ToolDefinition] = {}
    for definition in definitions:
        bound.pop(normalize_identifier(definition.name), None)
        bound[normalize_identifier(definition.name)] = definition
    parts = [MCP_TYPES] if _uses_mcp_types(bound.values()) else []
    members: list[str] = []
    for definition in bound.values():
        members.extend(f"  // {line}" for line in comment_lines(definition.description))
        members.append("  " + _member(definition).replace("\n", "\n  "))
    body = "\n".join(members)
    parts.append(f"declare const tools: {{\n{body}\n}};" if members else "declare const tools: {};")
    return "\n\n".join(parts) + "\n"
