"""The ``exec`` and ``wait`` tools as a model API declares them, and their answers.

:func:`exec_tool_spec` and :func:`wait_tool_spec` return OpenAI Responses-API tool dicts
(``{"type": "function", "name", "description", "parameters", "strict"}``; the JSON Schema under
``parameters`` is what other APIs call ``input_schema`` or ``function.parameters``).
:func:`parse_wait_arguments` reads a model's ``wait`` call, and :func:`format_observation`
turns what the host answered into the content items a model is handed back, headed the way
Codex heads them (``Script running with cell ID 3``, ``Script completed``...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from ..errors import UsageError
from ..protocol.content import ContentItem, RuntimeResponse, TextItem, ToolDefinition
from .declarations import EXEC_TOOL_NAME, WAIT_TOOL_NAME, exec_tool_description

__all__ = [
    "EXEC_GRAMMAR",
    "WaitArgumentsError",
    "WaitRequest",
    "exec_tool_spec",
    "format_observation",
    "parse_wait_arguments",
    "wait_tool_spec",
]

#: The default ``yield_time_ms`` of a ``wait`` call, as the exec description states.
DEFAULT_WAIT_YIELD_TIME_MS = 10_000

#: A Lark grammar for ``exec`` as a freeform (custom) tool: an optional pragma line, then source.
EXEC_GRAMMAR = r"""
start: with_pragma | source_only
with_pragma: PRAGMA LINE_END BODY
source_only: BODY

PRAGMA: /[ \t]*\/\/ @exec:[^\r\n]*/
LINE_END: /\r?\n/
BODY: /[\s\S]+/
"""

_WAIT_DESCRIPTION = """\
Waits on a running `exec` program; returns the output it produced since the last answer, or \
its final result.
- Use it only after `exec` or `wait` answered `Script running with cell ID <id>`, with that \
`cell_id`.
- `yield_time_ms` (default 10000): how long to wait for more output before answering again.
- `max_tokens` (default 10000): the token budget for this answer's output.
- `terminate: true` stops the program and returns the output not yet returned.
- A program still running may answer `Script running with cell ID <id>` again; once it has \
finished, `wait` returns its final result and the cell is gone."""


class _Describes(Protocol):
    def exec_tool_description(self) -> str: ...


def exec_tool_spec(
    tools: _Describes | Sequence[ToolDefinition], *, freeform: bool = False
) -> dict[str, Any]:
    """The ``exec`` tool for a model API, its description listing ``tools``.

    ``tools`` is a :class:`~codemode_trio.ToolRegistry` (anything with
    ``exec_tool_description()``) or tool definitions with their own descriptions. By default a
    function tool with one string parameter, ``source``; with ``freeform=True`` a Responses-API
    custom tool whose raw input is the program, constrained by :data:`EXEC_GRAMMAR` (what Codex
    declares).
    """
    if isinstance(tools, Sequence):
        description = exec_tool_description(tools)
    else:
        description = tools.exec_tool_description()
    if freeform:
        return {
            "type": "custom",
            "name": EXEC_TOOL_NAME,
            "description": description,
            "format": {"type": "grammar", "syntax": "lark", "definition": EXEC_GRAMMAR},
        }
    source = {
        "type": "string",
        "description": "The JavaScript program, optionally starting with a `// @exec:` "
        "pragma line. No Markdown fences.",
    }
    return _function_tool(EXEC_TOOL_NAME, description, {"source": source}, ["source"])


def wait_tool_spec() -> dict[str, Any]:
    """The ``wait`` tool for a model API.

    Its arguments: ``cell_id`` (required), ``yield_time_ms``, ``max_tokens``, ``terminate``.
    """
    properties = {
        "cell_id": {"type": "string", "description": "The cell ID of the running program."},
        "yield_time_ms": {
            "type": "number",
            "description": "How long to wait for more output, in milliseconds, before answering.",
        },
        "max_tokens": {
            "type": "number",
            "description": "The token budget for the output this call returns.",
        },
        "terminate": {"type": "boolean", "description": "Stop the program instead of waiting."},
    }
    return _function_tool(WAIT_TOOL_NAME, _WAIT_DESCRIPTION, properties, ["cell_id"])


def _function_tool(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


class WaitArgumentsError(UsageError):
    """A ``wait`` call's arguments do not fit its schema; the message is for the model."""


@attrs.frozen
class WaitRequest:
    """A model's ``wait`` call: observe (or, with ``terminate``, stop) cell ``cell_id``."""

    cell_id: str
    yield_time_ms: int = DEFAULT_WAIT_YIELD_TIME_MS
    max_tokens: int | None = None
    terminate: bool = False


def parse_wait_arguments(arguments: str | Mapping[str, Any]) -> WaitRequest:
    """Read a ``wait`` call's arguments, given as the model's JSON text or decoded.

    Unknown keys are ignored, as Codex ignores them. Raises :class:`WaitArgumentsError`
    (``failed to parse function arguments: ...``) for text that is not a JSON object, a missing
    or non-string ``cell_id``, a count that is not a non-negative integer, and a ``terminate``
    that is not a boolean.
    """
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except ValueError as exc:
            raise _invalid(str(exc)) from None
    else:
        decoded = dict(arguments)
    if not isinstance(decoded, dict):
        raise _invalid("expected an object")
    cell_id = decoded.get("cell_id")
    if not isinstance(cell_id, str):
        problem = "missing field `cell_id`" if cell_id is None else "`cell_id` must be a string"
        raise _invalid(problem)
    yield_time_ms = _count(decoded, "yield_time_ms")
    terminate = decoded.get("terminate")
    if terminate is not None and type(terminate) is not bool:
        raise _invalid("`terminate` must be a boolean")
    return WaitRequest(
        cell_id,
        DEFAULT_WAIT_YIELD_TIME_MS if yield_time_ms is None else yield_time_ms,
        _count(decoded, "max_tokens"),
        bool(terminate),
    )


def _count(arguments: Mapping[str, Any], key: str) -> int | None:
    value = arguments.get(key)
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise _invalid(f"`{key}` must be a non-negative integer, got {json.dumps(value)}")
    return value


def _invalid(problem: str) -> WaitArgumentsError:
    return WaitArgumentsError(f"failed to parse function arguments: {problem}")


def format_observation(
    response: RuntimeResponse, *, wall_time_seconds: float
) -> tuple[ContentItem, ...]:
    r"""What the model is handed back for one observation of a cell.

    A first text item states the cell's status and the call's wall time::

        Script running with cell ID 3       (or Script completed / failed / terminated)
        Wall time 0.4 seconds
        Output:

    then the cell's content items as they are, then, if the script threw,
    ``Script error:\n<error text>``. A wait on a cell that no longer exists reads as a failed
    script whose error is the host's ``exec cell <id> not found``.
    """
    if response.kind == "yielded":
        status = f"Script running with cell ID {response.cell_id}"
    elif response.kind == "terminated":
        status = "Script terminated"
    elif response.error_text is None:
        status = "Script completed"
    else:
        status = "Script failed"
    header = TextItem(f"{status}\nWall time {wall_time_seconds:.1f} seconds\nOutput:\n")
    items: list[ContentItem] = [header, *response.content_items]
    if response.error_text is not None:
        items.append(TextItem(f"Script error:\n{response.error_text}"))
    return tuple(items)
