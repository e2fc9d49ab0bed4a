"""ToolRegistry: expose async Python functions to cells as ``tools.NAME(...)``.

.. code-block:: python

    tools = ToolRegistry()

    @tools.function(description="Add two integers")
    async def add(a: int, b: int) -> int:
        return a + b

The input schema is derived from the signature; a call's JSON object input is passed as
keyword arguments. A registry is a :class:`~codemode_trio.Delegate`, so it is what you pass to
``open_session(delegate=...)``.
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from ..protocol._wire import JSON
from ..protocol.content import Notification, ToolCall, ToolDefinition
from .delegates import ToolError
from .toolschema import Check, anything, compile_check, schema_for_function

__all__ = ["ToolRegistry", "schema_for_function"]

logger = logging.getLogger("codemode_trio.tools")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
NotificationHandler = Callable[[Notification], Awaitable[None]]
CellClosedHandler = Callable[[str], None]


@attrs.frozen
class _Tool:
    definition: ToolDefinition
    function: Callable[..., Awaitable[Any]]
    raw_input: bool
    # Computed once: inspecting a signature on every call costs more than the call itself.
    signature: inspect.Signature
    # One check per argument whose derived schema says anything (empty for a hand-written
    # schema, which is the tool's own business).
    checks: tuple[tuple[str, Check], ...]
    # For a signature of plain keyword-compatible parameters, the names it accepts and those it
    # requires: checking a call against two sets is far cheaper than Signature.bind, which is
    # kept for every other shape and for explaining a mismatch.
    accepted: frozenset[str] | None = attrs.field(init=False)
    required: frozenset[str] = attrs.field(init=False)

    @accepted.default
    def _accepted(self) -> frozenset[str] | None:
        kinds = {parameter.kind for parameter in self.signature.parameters.values()}
        if not kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
            return None
        return frozenset(self.signature.parameters)

    @required.default
    def _required(self) -> frozenset[str]:
        return frozenset(
            name
            for name, parameter in self.signature.parameters.items()
            if parameter.default is parameter.empty
        )


class ToolRegistry:
    """A set of Python tools, and the :class:`~codemode_trio.Delegate` that runs them.

    Notifications go to the handler set with :meth:`on_notification` (logged otherwise);
    ``cell_closed`` goes to the handler set with :meth:`on_cell_closed`.
    """

    def __init__(self) -> None:
        self._tools: dict[str, _Tool] = {}
        self._notification_handler: NotificationHandler | None = None
        self._cell_closed_handler: CellClosedHandler | None = None

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def function(
        self,
        function: F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: JSON = None,
        namespace: str | None = None,
        raw_input: bool = False,
    ) -> Any:
        """Register an async function as a tool (usable bare or with arguments).

        ``name`` defaults to the function's name, ``description`` to its docstring's first
        line, ``input_schema`` to one derived from the signature. With ``raw_input=True`` the
        function receives the call's input as a single positional argument instead of keyword
        arguments (a ``freeform`` tool).
        """

        def register(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"tool {fn.__name__!r} must be an async function")
            tool_name = name or fn.__name__
            doc = (inspect.getdoc(fn) or "").strip().splitlines()
            definition = ToolDefinition(
                tool_name,
                description if description is not None else (doc[0] if doc else ""),
                input_schema=(
                    input_schema
                    if input_schema is not None
                    else (None if raw_input else schema_for_function(fn))
                ),
                kind="freeform" if raw_input else "function",
                namespace=namespace,
            )
            if tool_name in self._tools:
                raise ValueError(f"a tool named {tool_name!r} is already registered")
            checks: list[tuple[str, Check]] = []
            if input_schema is None and not raw_input:
                assert isinstance(definition.input_schema, dict)
                for argument, schema in definition.input_schema["properties"].items():
                    check = compile_check(schema)
                    if check is not anything:
                        checks.append((argument, check))
            self._tools[tool_name] = _Tool(
                definition, fn, raw_input, inspect.signature(fn), tuple(checks)
            )
            return typing.cast(F, fn)

        return register if function is None else register(function)

    def on_notification(self, handler: NotificationHandler) -> NotificationHandler:
        """Set the async handler for ``notify(text)`` calls (a decorator)."""
        self._notification_handler = handler
        return handler

    def on_cell_closed(self, handler: CellClosedHandler) -> CellClosedHandler:
        """Set the synchronous handler called once per closed cell (a decorator)."""
        self._cell_closed_handler = handler
        return handler

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The definitions to pass as ``tools=`` to ``execute``/``run``."""
        return tuple(tool.definition for tool in self._tools.values())

    async def invoke_tool(self, call: ToolCall) -> JSON:
        """Run the tool named by ``call`` with its input."""
        tool = self._tools.get(call.name)
        if tool is None:
            raise ToolError(f"unknown tool {call.name!r}")
        if tool.raw_input:
            return await tool.function(call.input)
        arguments = {} if call.input is None else call.input
        if not isinstance(arguments, dict):
            raise ToolError(f"tool {call.name!r} expects an object input, got {arguments!r:.100}")
        positional: list[Any] = []
        keywords: dict[str, Any] = arguments
        accepted = tool.accepted
        if accepted is None or not tool.required <= arguments.keys() <= accepted:
            keywords = dict(arguments)
            for name, parameter in tool.signature.parameters.items():
                # Positional-only parameters are in the schema like any other: pass them by
                # position.
                if parameter.kind is not parameter.POSITIONAL_ONLY or name not in keywords:
                    break
                positional.append(keywords.pop(name))
            try:
                tool.signature.bind(*positional, **keywords)
            except TypeError as exc:
                raise ToolError(f"tool {call.name!r}: {exc}") from None
        for name, check in tool.checks:
            if name in arguments:
                problem = check(arguments[name])
                if problem is not None:
                    raise ToolError(f"tool {call.name!r}: argument {name!r} {problem}")
        return await tool.function(*positional, **keywords)

    async def notify(self, note: Notification) -> None:
        """Pass a notification to the handler (or log it)."""
        if self._notification_handler is not None:
            await self._notification_handler(note)
        else:
            logger.info("cell %s notified: %s", note.cell_id, note.text)

    def cell_closed(self, cell_id: str) -> None:
        """Pass the cell-closed event to the handler, if any."""
        if self._cell_closed_handler is not None:
            self._cell_closed_handler(cell_id)
