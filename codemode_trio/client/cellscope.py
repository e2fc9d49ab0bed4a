"""What one ``execute`` fixes for every delegate call of its cell: context, budget, trace.

A delegate call is started by the connection's reader task, whose :mod:`contextvars` are those
of whoever opened the connection. Each cell therefore keeps a copy of the context of the task
that called ``execute`` (or ``run``), and every delegate task of that cell is spawned in it, so
a tool sees the caller's context variables (a request id, the current trace span...).

The same object counts the cell's tool calls against ``max_tool_calls``: the count is taken
synchronously where the call is dispatched, and a call past the budget is answered by
:class:`BudgetSpent` in its own task, so nothing waits in the reader.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..protocol.content import Notification, ToolCall
from ..protocol.values import JSON
from .delegates import Delegate, ToolError

if TYPE_CHECKING:
    from ..tracing import CellTrace

__all__ = ["BudgetSpent", "CellScope", "check_max_tool_calls"]


def check_max_tool_calls(value: object) -> int | None:
    """Validate ``max_tool_calls`` at the public boundary (None means no budget)."""
    if value is None:
        return None
    if type(value) is not int:
        raise UsageError(f"max_tool_calls must be an int or None, not {type(value).__name__}")
    if value < 0:
        raise UsageError(f"max_tool_calls must be 0 or more, not {value}")
    return value


class CellScope:
    """The caller's context, the tool-call budget and the trace of one cell."""

    __slots__ = ("context", "limit", "remaining", "trace")

    def __init__(self, max_tool_calls: int | None, trace: CellTrace | None) -> None:
        # Taken in the caller's task: a copy, so the caller's later changes are not seen.
        self.context = contextvars.copy_context()
        self.limit = max_tool_calls
        self.remaining = max_tool_calls
        self.trace = trace

    def admit(self, tool: str) -> Delegate | None:
        """Count one tool call; return the delegate that refuses it if it is over budget."""
        if self.remaining == 0:
            return BudgetSpent(
                f"tools.{tool}: refused, this cell has made its "
                f"max_tool_calls={self.limit} tool calls"
            )
        if self.remaining is not None:
            self.remaining -= 1
        return None


class BudgetSpent:
    """The delegate of a tool call past its cell's budget: it refuses, the cell goes on."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    async def invoke_tool(self, call: ToolCall) -> JSON:
        """Reject the call with the budget's message."""
        raise ToolError(self.message)

    async def notify(self, note: Notification) -> None:
        """Never used: only tool calls count against the budget."""

    def cell_closed(self, cell_id: str) -> None:
        """Nothing to release."""
