"""The delegate protocol: how the host's reverse calls reach user code.

A delegate answers two kinds of ``delegate/request`` from the host, and hears when a cell is
over. The driver runs every call in its own task under its own :class:`trio.CancelScope`; when
the host cancels the call, closes the cell, shuts the session down or the connection fails, the
scope is cancelled and the call is *revoked* (its result is dropped, no reply is sent). The
driver never awaits a cancelled call, so a delegate may shield its own cleanup and finish later.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

import trio

from ..protocol.content import Notification, ToolCall
from ..protocol.values import JSON

__all__ = ["Delegate", "NoopDelegate", "ToolError", "describe_delegate_error", "safe_str"]

logger = logging.getLogger("codemode_trio.delegates")


@runtime_checkable
class Delegate(Protocol):
    """What a session needs from the application: tools, notifications, cell-closed hooks."""

    async def invoke_tool(self, call: ToolCall) -> JSON:
        """Run one nested tool call and return its JSON result (raise to send an error)."""

    async def notify(self, note: Notification) -> None:
        """Receive a ``notify(text)`` from a cell. The cell's result waits for this to return."""

    def cell_closed(self, cell_id: str) -> None:
        """Release per-cell state; called exactly once per cell, synchronously, by the driver."""


class ToolError(Exception):
    """Raise from a tool to reject the JavaScript promise with exactly this message."""


def describe_delegate_error(exc: BaseException) -> str:
    """Turn a delegate's exception into the error text the host passes to JavaScript.

    A :class:`ToolError` is sent verbatim (it is meant for the script). Anything else is a bug
    in the delegate, reported the way the reference client reports a panicking delegate task.
    Never fails: an exception whose ``__str__`` raises is described by its type.
    """
    text = safe_str(exc)
    if isinstance(exc, ToolError):
        return text
    name = type(exc).__name__
    detail = f"{name}: {text}" if text and text != name else name
    return f"code-mode delegate task failed: {detail}"


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or the exception's type name when ``__str__`` itself fails."""
    try:
        return str(exc)
    except Exception:
        return type(exc).__name__


class NoopDelegate:
    """A delegate with no tools: every tool call fails, notifications are accepted."""

    async def invoke_tool(self, call: ToolCall) -> JSON:
        """Refuse the call (after yielding once, so cancellation is observed)."""
        await trio.lowlevel.checkpoint()
        raise ToolError("code mode nested tools are unavailable")

    async def notify(self, note: Notification) -> None:
        """Accept and log the notification."""
        logger.info("cell %s notified: %s", note.cell_id, note.text)

    def cell_closed(self, cell_id: str) -> None:
        """Nothing to release."""
