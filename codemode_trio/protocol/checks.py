"""Checks on a caller's arguments, shared by every client: refused before anything is sent.

The host exits over a frame it cannot decode, so a value it would refuse (an integer that does
not fit its type, a schema nested too deeply) is a :class:`UsageError` here, with the reference
client's text where it has one. :class:`~codemode_trio.protocol.client_protocol.ClientProtocol`
and the gRPC session both use these, so a mistake reads the same on every transport.
"""

from __future__ import annotations

from collections.abc import Iterable

from .codec import MAX_FRAME_NESTING
from .content import CellLimits, ToolDefinition
from .errors import UsageError
from .ids import is_blank
from .values import describe_value, is_opt_u64, nests_deeper_than

__all__ = [
    "check_cell_id",
    "check_cell_limits",
    "check_execute",
    "check_opt_u64",
    "check_output_truncation",
    "check_session_id",
    "check_tools",
    "check_u64",
]

# A tool's schemas sit five levels deep in an execute frame (message, request, its body, the
# enabled_tools array, the tool definition); the host refuses frames deeper than
# MAX_FRAME_NESTING levels, fatally, so deeper schemas are refused here instead.
_SCHEMA_NESTING = MAX_FRAME_NESTING - 5
_TOOL_KINDS = ("function", "freeform")
_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1


def check_opt_u64(value: object, name: str) -> None:
    """Refuse ``value`` unless it is ``None`` or an integer the host accepts as ``u64``."""
    if not is_opt_u64(value):
        raise UsageError(
            f"{name} must be an integer from 0 to 2**64-1, not {describe_value(value)}"
        )


def check_u64(value: object, name: str) -> None:
    """Refuse ``value`` unless it is an integer the host accepts as ``u64`` (``None`` too)."""
    if value is None:
        raise UsageError(f"{name} must be an integer from 0 to 2**64-1, not None")
    check_opt_u64(value, name)


def check_session_id(session_id: object) -> None:
    """Refuse a session id that is not a string or is blank."""
    if type(session_id) is not str:
        raise UsageError(f"session_id must be a string, not {describe_value(session_id)}")
    if is_blank(session_id):
        raise UsageError("session_id: identifier must not be empty")


def check_output_truncation(mode: object) -> None:
    """Refuse an output truncation mode other than ``"client"`` and ``"server"``."""
    if mode not in ("client", "server"):
        raise UsageError("output_truncation must be 'client' or 'server'")


def check_execute(
    source: object,
    tool_call_id: object,
    tools: object,
    yield_time_ms: object,
    max_output_tokens: object,
    catalog_revision: object,
) -> tuple[ToolDefinition, ...]:
    """Refuse an execute's arguments the host would not accept; return the tool definitions."""
    if type(source) is not str:
        raise UsageError(f"source must be a string, not {describe_value(source)}")
    if type(tool_call_id) is not str:
        raise UsageError(f"tool_call_id must be a string, not {describe_value(tool_call_id)}")
    definitions = check_tools(tools)
    check_opt_u64(yield_time_ms, "yield_time_ms")
    if max_output_tokens is not None and (
        type(max_output_tokens) is not int or not _I32_MIN <= max_output_tokens <= _I32_MAX
    ):
        raise UsageError(
            "failed to encode code-mode execute request: max_output_tokens does not fit i32"
        )
    check_opt_u64(catalog_revision, "catalog_revision")
    return definitions


def check_cell_limits(limits: object) -> CellLimits:
    """Refuse session limits that are not a :class:`CellLimits` or whose values overflow u64."""
    if not isinstance(limits, CellLimits):
        raise UsageError(f"limits must be a CellLimits, not {describe_value(limits)}")
    for value, name in (
        (limits.max_yield_time_ms, "max_yield_time_ms"),
        (limits.max_heap_size_bytes, "max_heap_size_bytes"),
    ):
        if not is_opt_u64(value):
            raise UsageError(
                "failed to encode code-mode session execution limits: "
                f"{name}={describe_value(value)} does not fit u64"
            )
    return limits


def check_cell_id(cell_id: object) -> None:
    """Refuse a cell id that is not a string."""
    if type(cell_id) is not str:
        raise UsageError(f"cell_id must be a string, not {describe_value(cell_id)}")


def check_tools(tools: object) -> tuple[ToolDefinition, ...]:
    """Refuse tool definitions the host would reject fatally (it exits over a bad frame)."""
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Iterable):
        raise UsageError(f"tools must be a sequence of ToolDefinition, not {describe_value(tools)}")
    definitions = tuple(tools)
    for index, tool in enumerate(definitions):
        where = f"tools[{index}]"
        if not isinstance(tool, ToolDefinition):
            raise UsageError(f"{where} must be a ToolDefinition, not {describe_value(tool)}")
        for field, text in (("name", tool.name), ("description", tool.description)):
            if type(text) is not str:
                raise UsageError(f"{where}.{field} must be a string, not {describe_value(text)}")
        for field, value in (("namespace", tool.namespace), ("tool_name", tool.tool_name)):
            if value is not None and type(value) is not str:
                raise UsageError(
                    f"{where}.{field} must be a string or None, not {describe_value(value)}"
                )
        if tool.kind not in _TOOL_KINDS:
            raise UsageError(
                f"{where}.kind must be 'function' or 'freeform', not {describe_value(tool.kind)}"
            )
        for field, schema in (
            ("input_schema", tool.input_schema),
            ("output_schema", tool.output_schema),
        ):
            if nests_deeper_than(schema, _SCHEMA_NESTING):
                raise UsageError(
                    f"{where}.{field} nests deeper than {_SCHEMA_NESTING} levels; the host "
                    f"refuses frames nested deeper than {MAX_FRAME_NESTING}"
                )
    return definitions
