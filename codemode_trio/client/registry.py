"""ToolRegistry: expose async Python functions to cells as ``tools.NAME(...)``.

.. code-block:: python

    tools = ToolRegistry()

    @tools.function
    async def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b

The input schema is derived from the signature by pydantic (see
:mod:`codemode_trio.client.toolschema`); a call's JSON object input is validated and converted
to the annotated types, then passed as keyword arguments. The output schema comes from the
return annotation. A registry is a :class:`~codemode_trio.Delegate`, so it is what you pass to
``open_session(delegate=...)``.

Each definition's description carries the tool's TypeScript declaration (see
:mod:`codemode_trio.agent.declarations`), as Codex sends it, so ``ALL_TOOLS`` in a cell reads
the same text; :meth:`ToolRegistry.exec_tool_description` is the ``exec`` tool's description for
a model's prompt.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, TypeVar, overload

import attrs
import trio

from ..agent.declarations import augment_definition, exec_tool_description, typescript_declarations
from ..errors import UsageError
from ..protocol.content import Notification, ToolCall, ToolDefinition
from ..protocol.values import JSON
from .delegates import ToolError, describe_delegate_error

if TYPE_CHECKING:
    from .toolschema import ToolSignature

__all__ = ["ToolRegistry"]

logger = logging.getLogger("codemode_trio.tools")

#: An async function, kept with its exact type by :meth:`ToolRegistry.function`.
AsyncFunction = TypeVar("AsyncFunction", bound=Callable[..., Awaitable[Any]])
NotificationHandler = Callable[[Notification], Awaitable[None]]
CellClosedHandler = Callable[[str], None]
#: A tool given as its definition and a function of the call's raw input (see add_tool).
ToolHandler = Callable[[JSON], Awaitable[JSON]]
_Function = Callable[..., Awaitable[Any]]


class _Limits:
    """A tool's ``timeout`` and ``max_concurrency``, enforced in each call's own task."""

    __slots__ = ("semaphore", "timeout")

    def __init__(self, timeout: float | None, max_concurrency: int | None) -> None:
        self.timeout = timeout
        # The calls over the cap wait here, each in its own delegate task (never in the
        # reader or the protocol machine), and go first come, first served.
        self.semaphore = trio.Semaphore(max_concurrency) if max_concurrency is not None else None

    async def run(self, name: str, function: _Function, args: list[Any], kw: dict[str, Any]) -> Any:
        async with nullcontext() if self.semaphore is None else self.semaphore:
            if self.timeout is None:
                return await function(*args, **kw)
            with trio.move_on_after(self.timeout):
                return await function(*args, **kw)
        raise ToolError(f"tool {name!r} timed out: it ran past its timeout={self.timeout:g} s")


def _check_limits(timeout: object, max_concurrency: object) -> _Limits | None:
    """Validate ``timeout=``/``max_concurrency=`` of a tool (UsageError at registration)."""
    if timeout is not None:
        if type(timeout) not in (int, float):
            raise UsageError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
        assert isinstance(timeout, int | float)
        if math.isnan(timeout) or timeout <= 0:
            raise UsageError(f"timeout must be more than 0 seconds, not {timeout}")
    if max_concurrency is not None:
        if type(max_concurrency) is not int:
            raise UsageError(
                f"max_concurrency must be an int, not {type(max_concurrency).__name__}"
            )
        if max_concurrency < 1:
            raise UsageError(f"max_concurrency must be 1 or more, not {max_concurrency}")
    if timeout is None and max_concurrency is None:
        return None
    return _Limits(timeout, max_concurrency)


def check_tool_limits(timeout: object, max_concurrency: object) -> None:
    """Raise :class:`~codemode_trio.UsageError` for limits :meth:`ToolRegistry.function` refuses."""
    _check_limits(timeout, max_concurrency)


def _as_is(value: Any) -> JSON:
    return value


@attrs.frozen
class _Tool:
    # What the host is sent: the description with the tool's declaration appended.
    definition: ToolDefinition
    # The same with the tool's own description, for the exec description and declarations.
    declared: ToolDefinition
    function: Callable[..., Awaitable[Any]]
    raw_input: bool
    # None for a raw-input tool and for a hand-written schema: neither is validated here.
    signature: ToolSignature | None
    # Only used to explain a call that does not fit a hand-written schema's function.
    python_signature: inspect.Signature
    # toolschema.jsonable_result, held here so that a call does not repeat the lazy import.
    to_json: Callable[[Any], JSON]
    limits: _Limits | None = None


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

    @property
    def notification_handler(self) -> NotificationHandler | None:
        """The handler set with :meth:`on_notification`, or None."""
        return self._notification_handler

    @property
    def cell_closed_handler(self) -> CellClosedHandler | None:
        """The handler set with :meth:`on_cell_closed`, or None."""
        return self._cell_closed_handler

    @overload
    def function(
        self,
        function: AsyncFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: JSON = None,
        output_schema: JSON = None,
        namespace: str | None = None,
        raw_input: bool = False,
        model_input: bool = False,
        timeout: float | None = None,
        max_concurrency: int | None = None,
    ) -> AsyncFunction: ...

    @overload
    def function(
        self,
        function: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: JSON = None,
        output_schema: JSON = None,
        namespace: str | None = None,
        raw_input: bool = False,
        model_input: bool = False,
        timeout: float | None = None,
        max_concurrency: int | None = None,
    ) -> Callable[[AsyncFunction], AsyncFunction]: ...

    def function(
        self,
        function: AsyncFunction | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: JSON = None,
        output_schema: JSON = None,
        namespace: str | None = None,
        raw_input: bool = False,
        model_input: bool = False,
        timeout: float | None = None,
        max_concurrency: int | None = None,
    ) -> AsyncFunction | Callable[[AsyncFunction], AsyncFunction]:
        """Register an async function as a tool (usable bare or with arguments).

        The function is returned unchanged, with its type. ``name`` defaults to the function's
        name, ``description`` to its docstring's summary line, ``input_schema`` to the JSON
        Schema pydantic derives from the signature (parameter descriptions come from
        ``Annotated[..., Field(description=...)]`` or the docstring's Args/Parameters
        section). Each call's input is then validated and converted before the function runs;
        a hand-written ``input_schema`` is the tool's own business and is not checked.
        ``output_schema`` defaults to the schema of the return annotation (none for ``-> None``
        or no annotation: the script sees ``unknown``); results are converted, not checked.
        Besides what pydantic takes, parameters and results may be attrs classes and
        ``typing.TypedDict``; a result may be a ``TextItem``/``ImageItem``/``AudioItem`` (or
        contain some), which the script receives as an MCP content block for ``content()``.

        With ``model_input=True`` the function's one required parameter is a pydantic model
        that receives the whole input object (its own config decides about unknown fields).
        With ``raw_input=True`` the function receives the call's input, unchecked, as a single
        positional argument (a ``freeform`` tool).

        ``timeout`` (seconds) bounds each call once it runs: a call past it is cancelled and
        rejected with one line naming the tool and the limit. ``max_concurrency`` caps the
        calls running at once; the others wait their turn, each in its own task.

        Raises :class:`TypeError` for a function that is not async or whose signature pydantic
        cannot validate, :class:`ValueError` for a name already registered, and
        :class:`~codemode_trio.UsageError` for a ``timeout`` that is not more than 0 or a
        ``max_concurrency`` that is not an int of 1 or more.
        """
        limits = _check_limits(timeout, max_concurrency)

        def register(fn: AsyncFunction) -> AsyncFunction:
            candidate: Any = fn  # checked as Any: the check would narrow fn's own type
            if not inspect.iscoroutinefunction(candidate):
                raise TypeError(f"tool {getattr(fn, '__name__', fn)!r} must be an async function")
            tool_name = name or fn.__name__
            if tool_name in self._tools:
                raise ValueError(f"a tool named {tool_name!r} is already registered")
            # pydantic is imported here, at the first registration, not with the package.
            from .toolschema import (
                compile_output_schema,
                compile_signature,
                describe_function,
                jsonable_result,
            )

            signature = None
            if input_schema is None and not raw_input:
                signature = compile_signature(fn, name=tool_name, whole_input=model_input)
            declared = ToolDefinition(
                tool_name,
                description if description is not None else describe_function(fn),
                input_schema=input_schema if signature is None else signature.schema,
                output_schema=compile_output_schema(fn) if output_schema is None else output_schema,
                kind="freeform" if raw_input else "function",
                namespace=namespace,
            )
            self._tools[tool_name] = _Tool(
                augment_definition(declared),
                declared,
                fn,
                raw_input,
                signature,
                inspect.signature(fn),
                jsonable_result,
                limits,
            )
            return fn

        return register if function is None else register(function)

    def add_tool(
        self,
        definition: ToolDefinition,
        handler: ToolHandler,
        *,
        timeout: float | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        """Register a tool given as its definition and an async function of its raw input.

        The definition is sent as it is, its description followed by its TypeScript
        declaration as for every tool (its schemas are the tool's own business); the handler
        receives the call's input, unchecked, and returns a JSON value. For tools whose
        description comes from elsewhere, e.g. an MCP server's. ``timeout`` and
        ``max_concurrency`` are :meth:`function`'s.
        """
        limits = _check_limits(timeout, max_concurrency)
        if definition.name in self._tools:
            raise ValueError(f"a tool named {definition.name!r} is already registered")
        self._tools[definition.name] = _Tool(
            augment_definition(definition),
            definition,
            handler,
            True,
            None,
            inspect.signature(handler),
            _as_is,
            limits,
        )

    def include(self, other: ToolRegistry) -> None:
        """Add every tool of ``other`` (with its limits) to this registry.

        Its notification and cell-closed handlers are not taken. Raises :class:`ValueError`,
        adding nothing, if a name is already registered here.
        """
        if clashes := sorted(name for name in other._tools if name in self._tools):
            raise ValueError(f"a tool named {clashes[0]!r} is already registered")
        self._tools.update(other._tools)

    def on_notification(self, handler: NotificationHandler) -> NotificationHandler:
        """Set the async handler for ``notify(text)`` calls (a decorator)."""
        self._notification_handler = handler
        return handler

    def on_cell_closed(self, handler: CellClosedHandler) -> CellClosedHandler:
        """Set the synchronous handler called once per closed cell (a decorator)."""
        self._cell_closed_handler = handler
        return handler

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The definitions to pass as ``tools=`` to ``execute``/``run``.

        Each description ends with the tool's TypeScript declaration (what ``ALL_TOOLS``
        shows in a cell).
        """
        return tuple(tool.definition for tool in self._tools.values())

    def typescript_declarations(self) -> str:
        """Every tool as one TypeScript declaration, ``declare const tools: {...};``.

        A ``.d.ts`` text the TypeScript compiler accepts on its own (the MCP result types
        included when a tool needs them); each tool's description is a ``//`` comment above
        it. Types are rendered by Codex's rules, each local ``$ref`` expanded in place.
        """
        return typescript_declarations([tool.declared for tool in self._tools.values()])

    def exec_tool_description(self) -> str:
        """The ``exec`` tool's description for a model's prompt, every tool declared in it.

        How a program runs, the ``// @exec:`` pragma, the helpers, then one section per tool
        with its description and declaration. See also :func:`codemode_trio.exec_tool_spec`.
        """
        return exec_tool_description([tool.declared for tool in self._tools.values()])

    async def invoke_tool(self, call: ToolCall) -> JSON:
        """Run the tool named by ``call`` with its input; return its result as JSON values.

        Raises :class:`ToolError` (which reaches JavaScript as its message) for an unknown
        tool, an input that does not fit the signature, a result that is not JSON, and a tool
        that raised anything else; every message names the tool.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            raise ToolError(f"unknown tool {call.name!r}")
        if tool.raw_input:
            positional: list[Any] = [call.input]
            keywords: dict[str, Any] = {}
        elif tool.signature is not None:
            # Raises a ToolError naming the tool and the argument.
            positional, keywords = tool.signature.arguments(call.input)
        else:
            positional, keywords = _unchecked_arguments(tool, call)
        try:
            if tool.limits is None:
                result = await tool.function(*positional, **keywords)
            else:
                result = await tool.limits.run(call.name, tool.function, positional, keywords)
        except ToolError:
            raise
        except Exception as exc:
            # A bug in the tool, not a rejection meant for the script: keep the traceback, and
            # say which tool (the delegate layer only knows a call number).
            logger.warning("tool %r raised %r", call.name, exc, exc_info=True)
            raise ToolError(f"tool {call.name!r}: {describe_delegate_error(exc)}") from exc
        try:
            return tool.to_json(result)
        except ValueError as exc:
            raise ToolError(
                f"tool {call.name!r} returned a value that is not JSON: {exc}"
            ) from None

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


def _unchecked_arguments(tool: _Tool, call: ToolCall) -> tuple[list[Any], dict[str, Any]]:
    """Spread an object input over a function whose schema was written by hand."""
    arguments = {} if call.input is None else call.input
    if not isinstance(arguments, dict):
        raise ToolError(f"tool {call.name!r}: expects an object input, got {arguments!r:.60}")
    positional: list[Any] = []
    keywords = dict(arguments)
    for parameter_name, parameter in tool.python_signature.parameters.items():
        if parameter.kind is not parameter.POSITIONAL_ONLY or parameter_name not in keywords:
            break
        positional.append(keywords.pop(parameter_name))
    try:
        tool.python_signature.bind(*positional, **keywords)
    except TypeError as exc:
        raise ToolError(f"tool {call.name!r}: {exc}") from None
    return positional, keywords
