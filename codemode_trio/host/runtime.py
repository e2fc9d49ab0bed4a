"""The contract between the host shell and a JavaScript cell runtime.

The host shell (:mod:`codemode_trio.host.server`) owns the protocol, deadlines and delegate
calls; a runtime owns one thing: running a cell's source to completion. The shell passes each
cell a :class:`CellHooks` object, through which the script's globals (``text``, ``notify``,
``tools.x``, ``store`` ...) reach the protocol. The V8 runtime in :mod:`codemode_trio.host.v8`
implements :class:`CellRuntime`; tests may supply their own.

Cancellation is the terminate path: cancelling the Trio scope that awaits
:meth:`CellRuntime.run` must stop the script promptly, even in ``while (true) {}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias

import attrs

from ..protocol.content import ContentItem, ToolDefinition

__all__ = [
    "JSON",
    "MISSING",
    "CellHooks",
    "CellOutcome",
    "CellRuntime",
    "Missing",
    "ToolCallRejected",
]

#: Any JSON value as :func:`json.loads` returns it (tool inputs and results, stored values).
JSON: TypeAlias = Any


class Missing:
    """The type of :data:`MISSING`: ``load`` of a key that was never stored."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: What :meth:`CellHooks.load` returns for an absent key (JavaScript sees ``undefined``).
MISSING = Missing()


class ToolCallRejected(Exception):
    """Raised by :meth:`CellHooks.call_tool`: reject the script's promise with ``message``.

    The script sees the message string itself (not an ``Error``), as with the reference host.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@attrs.frozen
class CellOutcome:
    r"""How a cell's script ended: ``error_text`` is ``None`` on success (or ``exit()``).

    Otherwise it is the text the reference host reports, for example
    ``"Error: boom\n    at exec_main.mjs:1:7"``.
    """

    error_text: str | None = None


class CellHooks(Protocol):
    """What a running cell may ask of its host (implemented by the host shell)."""

    def emit(self, item: ContentItem) -> None:
        """Add an output item (``text()``, ``image()``, ``audio()``, ``content()``)."""

    def yield_control(self) -> None:
        """``yield_control()``: the current observation returns ``Yielded`` now."""

    def notify(self, text: str) -> None:
        """``notify(text)``: send ``notification/send``; fire-and-forget for the script."""

    async def call_tool(self, binding: str, input: JSON) -> JSON:
        """Call the enabled tool bound as ``tools.<binding>``; return its result.

        Raises :class:`ToolCallRejected` to reject the script's promise with that message.
        """

    def store(self, key: str, value: JSON) -> None:
        """``store(key, value)``: keep a JSON value in the session's store."""

    def load(self, key: str) -> JSON | Missing:
        """``load(key)``: a stored value, or :data:`MISSING`."""


class CellRuntime(Protocol):
    """Runs the source of one cell."""

    async def run(
        self,
        source: str,
        tools: Sequence[ToolDefinition],
        hooks: CellHooks,
        *,
        max_heap_size_bytes: int | None,
    ) -> CellOutcome:
        """Run ``source`` as a module body until it finishes, throws or calls ``exit()``.

        ``tools`` are the cell's enabled tools (the runtime normalises their names into
        bindings). Cancelling the calling scope terminates the script.
        """
