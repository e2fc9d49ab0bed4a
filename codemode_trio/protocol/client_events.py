"""What :class:`~codemode_trio.protocol.client_protocol.ClientProtocol` tells its user.

The machine's commands (``open_session``, ``execute``, ``wait``, ...) return an
:class:`Operation`: the handle of one request. Everything that later happens to it, and every
reverse call of the host, comes out of ``next_event()`` as one of the events below, in the order
the host's bytes (or the caller's own commands) caused it.

========================  ===================================================================
event                     what the user of the machine does with it
========================  ===================================================================
:class:`SessionOpened`    the open succeeded: hand the session to the caller, then ``claim``
:class:`CellStarted`      ``execution/started``: hand the cell to the caller, then ``claim``
:class:`InitialResult`    the cell's first observation (``execute/initialResponse``)
:class:`CellObserved`     a wait or terminate answered with a wait outcome
:class:`SessionShutDown`  ``session/closed`` arrived for a shutdown
:class:`OperationFailed`  the operation failed; ``fault`` says whose fault, ``message`` why
:class:`DelegateStarted`  run the delegate call (answer with ``complete_tool_call`` etc.)
:class:`DelegateRevoked`  stop the delegate call; its result will be dropped
:class:`CellReleased`     the cell's life is over: tell the session's delegate, once
:class:`SessionReleased`  every cell of the session has been released locally
:class:`InternalRequest`  the machine sent a request of its own (put a deadline on it)
:class:`Failed`           the connection failed (last event; every other one came before it)
:class:`NeedData`         nothing more until new input (bytes, EOF, or a command)
========================  ===================================================================

This module never imports trio.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from .content import Notification, RuntimeResponse, ToolCall, WaitOutcome
from .ids import RequestId

__all__ = [
    "CellObserved",
    "CellReleased",
    "CellStarted",
    "DelegateCall",
    "DelegateRevoked",
    "DelegateStarted",
    "Event",
    "Failed",
    "Fault",
    "InitialResult",
    "InternalRequest",
    "NEED_DATA",
    "NeedData",
    "Operation",
    "OperationFailed",
    "OperationKind",
    "SessionOpened",
    "SessionReleased",
    "SessionShutDown",
]


@attrs.frozen(slots=True)
class NeedData:
    """No event is ready: feed more input. Both machines return it (see ``NEED_DATA``)."""


#: The one :class:`NeedData` the machines return, so an idle poll allocates nothing.
NEED_DATA: Final = NeedData()


class OperationKind(enum.Enum):
    """Which request an :class:`Operation` is."""

    OPEN = "session/open"
    EXECUTE = "session/execute"
    WAIT = "session/wait"
    TERMINATE = "session/terminate"
    SHUTDOWN = "session/shutdown"


class Fault(enum.Enum):
    """Who is at fault when an operation fails."""

    #: The host answered the request with an error; the connection stays up.
    HOST = "host"
    #: The session is unknown, shutting down or closed.
    SESSION = "session"
    #: The connection failed; ``message`` is its first failure reason.
    CONNECTION = "connection"


@attrs.define(eq=False, slots=True)
class Operation:
    """One request, from the command that made it until its outcome.

    ``request_id`` is set once the request is on the wire (a wait held back behind a cancelled
    wait on the same cell gets its id when it is finally sent). ``cell_id`` is the targeted cell
    (wait, terminate) or the cell the host admitted (execute, after :class:`CellStarted`).
    ``internal`` marks requests the machine sent on its own (the shutdown of an abandoned open,
    the terminate of an abandoned cell): nobody awaits them.
    """

    kind: OperationKind
    session_id: str
    cell_id: str | None = None
    request_id: RequestId | None = None
    internal: bool = False
    yield_time_ms: int | None = None
    max_output_tokens: int | None = None
    # The caller went away; at most one operation/cancel is ever sent for it.
    abandoned: bool = attrs.field(default=False, repr=False)
    cancel_sent: bool = attrs.field(default=False, repr=False)
    # The outcome was handed over (SessionOpened/CellStarted) and the caller took it.
    delivered: bool = attrs.field(default=False, repr=False)
    claimed: bool = attrs.field(default=False, repr=False)


@attrs.define(eq=False, slots=True)
class DelegateCall:
    """One ``delegate/request`` the user should run: a tool call or a notification."""

    id: int
    session_id: str
    cell_id: str
    request: ToolCall | Notification

    @property
    def is_tool_call(self) -> bool:
        """True for ``tool/invoke``, False for ``notification/send``."""
        return type(self.request) is ToolCall


@attrs.frozen(slots=True)
class SessionOpened:
    """``session/ready`` arrived for ``op``."""

    op: Operation


@attrs.frozen(slots=True)
class CellStarted:
    """``execution/started`` arrived for ``op``; ``op.cell_id`` is the new cell."""

    op: Operation


@attrs.frozen(slots=True)
class InitialResult:
    """The first observation of the cell that execute ``op`` started."""

    op: Operation
    response: RuntimeResponse


@attrs.frozen(slots=True)
class CellObserved:
    """A wait or terminate (``op``) was answered."""

    op: Operation
    outcome: WaitOutcome


@attrs.frozen(slots=True)
class SessionShutDown:
    """``session/closed`` arrived for shutdown ``op``."""

    op: Operation


@attrs.frozen(slots=True)
class OperationFailed:
    """``op`` failed. For an execute after :class:`CellStarted`, its initial response failed."""

    op: Operation
    fault: Fault
    message: str


@attrs.frozen(slots=True)
class DelegateStarted:
    """Run ``call`` and report its outcome to the machine."""

    call: DelegateCall


@attrs.frozen(slots=True)
class DelegateRevoked:
    """``call`` was cancelled (``delegate/cancel``, its cell closed, or the connection failed).

    Its result is dropped whenever it comes; no reply is ever sent for it.
    """

    call: DelegateCall


@attrs.frozen(slots=True)
class CellReleased:
    """A cell left the registry (``cell/closed``, its session closed, or failure); exactly once."""

    session_id: str
    cell_id: str


@attrs.frozen(slots=True)
class SessionReleased:
    """Every cell of the session was released locally (after ``session/closed`` or failure)."""

    session_id: str


@attrs.frozen(slots=True)
class InternalRequest:
    """The machine sent ``op`` on its own; its answer is consumed by the machine."""

    op: Operation


@attrs.frozen(slots=True)
class Failed:
    """The connection failed with ``reason`` (the first failure); nothing follows it."""

    reason: str


#: Every event :meth:`ClientProtocol.next_event` returns, apart from :class:`NeedData`.
Event = (
    SessionOpened
    | CellStarted
    | InitialResult
    | CellObserved
    | SessionShutDown
    | OperationFailed
    | DelegateStarted
    | DelegateRevoked
    | CellReleased
    | SessionReleased
    | InternalRequest
    | Failed
)
