"""What :class:`~codemode_trio.protocol.host_protocol.HostProtocol` tells its user.

The host machine's ``next_event()`` returns one of the events below, in the order the client's
bytes caused them, or :class:`NeedData` when nothing more is ready until more bytes (or EOF)
arrive: the same convention as the client machine (see
:mod:`~codemode_trio.protocol.client_events`).

============================  ===============================================================
event                         what the user of the machine does with it
============================  ===============================================================
:class:`HelloReceived`        send its ``verdict`` with ``answer_hello`` (nothing more is read
                              until then)
:class:`SessionOpenRequested` ``accept_session`` (or ``answer_error``)
:class:`ExecuteRequested`     ``start_cell`` then ``send_initial_response`` (or
                              ``answer_error``)
:class:`WaitRequested`        the wait is now the cell's observer: ``answer_wait``
:class:`TerminateRequested`   ``answer_terminate``
:class:`ShutdownRequested`    answer the cells' observers, then ``close_session``
:class:`CancelRequested`      an in-flight wait was cancelled (already answered); the cell runs on
:class:`YieldRequested`       answer that wait or initial response with ``Yielded`` now
:class:`DelegateAnswered`     the client answered a pending delegate call
:class:`ConnectionClosed`     clean EOF at a frame boundary (the host then exits 0 at once)
:class:`NeedData`             nothing more until more bytes arrive
============================  ===============================================================

Requests the rules decide alone never become events: the machine answers them itself (an
unknown session, a reused session id, a wait on a missing cell or on a cell that already has an
observer, a bad ``max_output_tokens`` or catalog revision, too many active cells). Cancels,
yields and delegate responses naming unknown or finished ids are ignored silently, as the host
does. This module never imports trio.
"""

from __future__ import annotations

import attrs

from .client_events import NeedData
from .content import CellLimits, ToolDefinition
from .ids import DelegateRequestId, RequestId
from .messages import (
    ConnectionHello,
    ConnectionReady,
    ConnectionRejected,
    DelegateResult,
    ExecuteRequest,
    WireError,
    WireOk,
)

__all__ = [
    "CancelRequested",
    "ConnectionClosed",
    "DelegateAnswered",
    "ExecuteRequested",
    "HelloReceived",
    "HostEvent",
    "SessionOpenRequested",
    "ShutdownRequested",
    "TerminateRequested",
    "WaitRequested",
    "YieldRequested",
]


@attrs.frozen
class ConnectionClosed:
    """The client closed its side at a frame boundary."""


@attrs.frozen
class HelloReceived:
    """The first frame; ``hello`` is ``None`` when it was another (valid) client message.

    ``verdict`` is what the reference host answers; send it with
    :meth:`HostProtocol.answer_hello`. After a rejection the host exits 0.
    """

    hello: ConnectionHello | None
    verdict: ConnectionReady | ConnectionRejected


@attrs.frozen
class SessionOpenRequested:
    """``session/open`` for a new id; answer with :meth:`HostProtocol.accept_session`."""

    request_id: RequestId
    session_id: str
    limits: CellLimits | None
    server_truncation: bool


@attrs.frozen
class ExecuteRequested:
    """``session/execute`` that passed every rule; ``tools`` is the catalog to run with.

    Start it with :meth:`HostProtocol.start_cell` (or refuse it with
    :meth:`HostProtocol.answer_error`).
    """

    request_id: RequestId
    session_id: str
    request: ExecuteRequest
    tools: tuple[ToolDefinition, ...]


@attrs.frozen
class WaitRequested:
    """``session/wait`` on a live cell that had no observer; the wait is now its observer."""

    request_id: RequestId
    session_id: str
    cell_id: str
    yield_time_ms: int
    max_output_tokens: int | None


@attrs.frozen
class TerminateRequested:
    """``session/terminate`` of a live cell; answer with :meth:`HostProtocol.answer_terminate`."""

    request_id: RequestId
    session_id: str
    cell_id: str
    max_output_tokens: int | None


@attrs.frozen
class ShutdownRequested:
    """``session/shutdown`` of an open session; finish with :meth:`HostProtocol.close_session`."""

    request_id: RequestId
    session_id: str


@attrs.frozen
class CancelRequested:
    """An in-flight wait was cancelled and already answered ``code-mode request cancelled``."""

    request_id: RequestId
    session_id: str
    cell_id: str


@attrs.frozen
class YieldRequested:
    """``operation/yield``: answer this observation (a wait or initial response) now."""

    request_id: RequestId
    session_id: str
    cell_id: str


@attrs.frozen
class DelegateAnswered:
    """The client answered pending delegate call ``delegate_id`` (it is no longer pending)."""

    delegate_id: DelegateRequestId
    session_id: str
    cell_id: str
    result: WireOk[DelegateResult] | WireError


#: Whatever :meth:`HostProtocol.next_event` returns.
HostEvent = (
    NeedData
    | ConnectionClosed
    | HelloReceived
    | SessionOpenRequested
    | ExecuteRequested
    | WaitRequested
    | TerminateRequested
    | ShutdownRequested
    | CancelRequested
    | YieldRequested
    | DelegateAnswered
)
