"""Code mode for agent builders: what a model is told about ``exec``, and how to read its calls.

- :mod:`.typescript`: a tool's JSON Schemas as TypeScript types, by Codex's rules;
- :mod:`.declarations`: each tool's ``declare const tools`` line, the ``exec`` description;
- :mod:`.pragma`: the ``// @exec: {...}`` first line of a model's program;
- :mod:`.specs`: the ``exec``/``wait`` tool specifications and the answers handed back.

A :class:`~codemode_trio.ToolRegistry` uses them for ``exec_tool_description()`` and
``typescript_declarations()``; see docs/agents.md for a whole agent loop.
"""

from .declarations import augment_definition, exec_tool_description, typescript_declarations
from .pragma import ExecPragmaError, ExecSource, parse_exec_source
from .specs import WaitArgumentsError as WaitArgumentsError
from .specs import WaitRequest as WaitRequest
from .specs import exec_tool_spec as exec_tool_spec
from .specs import format_observation as format_observation
from .specs import parse_wait_arguments as parse_wait_arguments
from .specs import wait_tool_spec as wait_tool_spec
from .typescript import render_json_schema_to_typescript as render_json_schema_to_typescript

__all__ = [
    "ExecPragmaError",
    "ExecSource",
    "WaitArgumentsError",
    "WaitRequest",
    "augment_definition",
    "exec_tool_description",
    "exec_tool_spec",
    "format_observation",
    "parse_exec_source",
    "parse_wait_arguments",
    "render_json_schema_to_typescript",
    "typescript_declarations",
    "wait_tool_spec",
]
