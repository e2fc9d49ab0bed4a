"""How a tool's name becomes its JavaScript binding, ``tools.<binding>`` (SPEC §16.2)."""

from __future__ import annotations

from collections.abc import Sequence

from .content import ToolDefinition

__all__ = ["bind_tools", "normalize_identifier"]

_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_FIRST = _ASCII_LETTERS | {"_", "$"}
_LATER = _FIRST | frozenset("0123456789")


def normalize_identifier(name: str) -> str:
    """The binding of ``name``: every character not allowed in an identifier becomes ``_``.

    The first character may be ``_``, ``$`` or an ASCII letter; later ones may also be ASCII
    digits. The empty name becomes ``_``. ``my-tool.x`` -> ``my_tool_x``, ``123 bad`` ->
    ``_23_bad``.
    """
    if not name:
        return "_"
    head = name[0] if name[0] in _FIRST else "_"
    return head + "".join(c if c in _LATER else "_" for c in name[1:])


def bind_tools(tools: Sequence[ToolDefinition]) -> dict[str, ToolDefinition]:
    """Each binding's tool, in first-seen order; when two names share a binding, the last wins."""
    return {normalize_identifier(tool.name): tool for tool in tools}
