"""What flows into the driver: caller commands, host events and caller notices.

Two inboxes feed the driver task:

- the **inbox** (bounded): commands from callers and messages from the reader task. Senders
  wait for a free slot when it is full, which is how backpressure reaches the host (the reader
  stops reading) and callers.
- the **notices** channel (unbounded on purpose): caller cancellations, execute claims, delegate
  results and fire-and-forget commands. A cancelled caller reports from its ``except`` block,
  where it cannot await, so this channel must accept with ``send_nowait`` and never refuse.
  Delegate tasks use it too: a finished call hands over its result without another scheduler
  round trip (there is at most one result per active call, so it stays small).

The driver drains every notice before it handles each inbox item (the "sweep"), so a
cancellation is always acted on before a later command or host message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ..protocol.content import CellLimits, ToolDefinition, WaitOutcome
from ..protocol.messages import DelegateResult, HostMessage, WireError, WireOk
from .slots import ReplySlot

if TYPE_CHECKING:
    from .delegates import Delegate
    from .driver import DelegateCall
    from .session import StartedCell

__all__ = [
    "Abandon",
    "Claim",
    "Command",
    "DelegateDone",
    "ExecuteCommand",
    "FailNotice",
    "HostEof",
    "HostEvent",
    "InboxItem",
    "Notice",
    "OpenCommand",
    "ShutdownCommand",
    "TerminateCommand",
    "WaitCommand",
    "Wake",
    "YieldCommand",
]


@attrs.define(eq=False)
class OpenCommand:
    """Open a session (``session/open``)."""

    session_id: str
    delegate: Delegate
    limits: CellLimits | None
    output_truncation: str | None
    slot: ReplySlot[None]
    # Set by the driver once every cell of the session is closed locally (after
    # session/closed, or when the connection fails). Never waits for delegate calls.
    cleaned_up: trio.Event


@attrs.define(eq=False)
class ExecuteCommand:
    """Start a cell (``session/execute``); the slot receives a :class:`StartedCell`."""

    session_id: str
    source: str
    tool_call_id: str
    tools: tuple[ToolDefinition, ...]
    yield_time_ms: int | None
    max_output_tokens: int | None
    catalog_revision: int | None
    slot: ReplySlot[StartedCell]


@attrs.define(eq=False)
class WaitCommand:
    """Observe a cell (``session/wait``)."""

    session_id: str
    cell_id: str
    yield_time_ms: int
    max_output_tokens: int | None
    slot: ReplySlot[WaitOutcome]


@attrs.define(eq=False)
class TerminateCommand:
    """Terminate a cell; ``slot`` is None for the driver's own fire-and-forget terminations."""

    session_id: str
    cell_id: str
    max_output_tokens: int | None
    slot: ReplySlot[WaitOutcome] | None


@attrs.define(eq=False)
class ShutdownCommand:
    """Shut a session down; not cancellable (a dropped waiter never aborts remote cleanup)."""

    session_id: str
    slot: ReplySlot[None] | None


@attrs.define(eq=False)
class YieldCommand:
    """Send ``operation/yield`` for the cell's in-flight observation, if there is one."""

    session_id: str
    cell_id: str


Command = (
    OpenCommand | ExecuteCommand | WaitCommand | TerminateCommand | ShutdownCommand | YieldCommand
)


@attrs.frozen(eq=False)
class HostEvent:
    """A decoded message from the host."""

    message: HostMessage


@attrs.frozen(eq=False)
class HostEof:
    """The host closed its side; ``details`` describes the process (exit status, stderr).

    ``truncated`` is set when the stream ended inside a frame (a host that dies while writing
    leaves a length header with no payload).
    """

    details: str | None
    truncated: str | None = None


@attrs.frozen(eq=False)
class DelegateDone:
    """A delegate call finished (only ever posted for calls that were not revoked)."""

    call: DelegateCall
    result: WireOk[DelegateResult] | WireError


@attrs.frozen(eq=False)
class Wake:
    """Nothing to do but sweep the notices (posted with every notice)."""


InboxItem = Command | HostEvent | HostEof | Wake


@attrs.frozen(eq=False)
class Abandon:
    """A caller stopped waiting on ``slot`` (cancelled, or its deadline passed)."""

    slot: ReplySlot[object]


@attrs.frozen(eq=False)
class Claim:
    """The caller took the :class:`StartedCell` delivered in ``slot``."""

    slot: ReplySlot[object]


@attrs.frozen(eq=False)
class FailNotice:
    """Fail the connection (a caller's deadline expired, the writer broke, ...)."""

    reason: str


Notice = (
    Abandon | Claim | FailNotice | DelegateDone | TerminateCommand | ShutdownCommand | YieldCommand
)
