"""The host role as a sans-IO state machine, in the style of h11 and wsproto.

:class:`HostProtocol` is what a code-mode host must do and check, with host 0.171.0's exact
texts, and nothing else: it never imports trio, never reads a clock it was not given and never
performs I/O. Its user (the reference host shell in :mod:`codemode_trio.host`) feeds it the
client's bytes, takes events out, calls commands, and writes what :meth:`~HostProtocol.data_to_send`
returns::

    protocol = HostProtocol()
    protocol.receive_data(chunk)           # or receive_eof()
    while not isinstance(event := protocol.next_event(), NeedData):
        ...                                # react: commands queue frames
    stream.write(protocol.data_to_send())

Events (returned by :meth:`~HostProtocol.next_event`, :class:`NeedData` when none is ready)
are declared in :mod:`~codemode_trio.protocol.host_events`, as the client's are in
:mod:`~codemode_trio.protocol.client_events`.

Commands: :meth:`~HostProtocol.answer_hello`, :meth:`~HostProtocol.accept_session`,
:meth:`~HostProtocol.start_cell`, :meth:`~HostProtocol.send_initial_response`,
:meth:`~HostProtocol.answer_wait`, :meth:`~HostProtocol.detach_initial`,
:meth:`~HostProtocol.answer_wait_missing`, :meth:`~HostProtocol.answer_terminate`,
:meth:`~HostProtocol.close_cell`, :meth:`~HostProtocol.close_session`,
:meth:`~HostProtocol.answer_error`,
:meth:`~HostProtocol.call_tool`, :meth:`~HostProtocol.send_notification` and
:meth:`~HostProtocol.cancel_delegate`. The machine adds what the host always adds: cell ids
``"1"``, ``"2"``, ... per session; ``tool-N`` call ids per cell; delegate ids from 1 per
connection; ``delegate/cancel`` for a cell's outstanding calls before its final response;
``cell/closed`` exactly once, after the cell's final response and its last observer;
``code_mode_host_duration_ns`` from the request's arrival (by the injected clock).

Faults are named by who made them: a client that breaks the protocol makes
:meth:`~HostProtocol.next_event` raise :class:`FatalClientError` (a
:class:`~codemode_trio.protocol.errors.ClientProtocolViolation` carrying the host's stderr text),
and the machine stays failed for good; a command that would break it (answering a request twice,
a wait outcome for an execute) raises :class:`HostCommandError` and sends nothing.

:class:`ClientMessageReader` (:mod:`~codemode_trio.protocol.host_reader`) is its first stage.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from .client_events import NEED_DATA, NeedData
from .codec import encode_host_frame
from .content import Notification, RuntimeResponse, ToolCall, ToolDefinition, WaitOutcome
from .errors import CodeModeError, EncodeError, UsageError
from .handshake import ALL_CAPABILITIES, DELEGATE_CAPACITY_4096, PROTOCOL_VERSION
from .host_events import (
    CancelRequested,
    ConnectionClosed,
    DelegateAnswered,
    ExecuteRequested,
    HelloReceived,
    HostEvent,
    SessionOpenRequested,
    ShutdownRequested,
    TerminateRequested,
    WaitRequested,
    YieldRequested,
)
from .host_reader import RECENT_ID_WINDOW, ClientMessageReader, FatalClientError
from .ids import DelegateRequestId, RecentIds, RequestId
from .lanes import DUAL_WEBSOCKET, Lane
from .messages import (
    CellClosed,
    ClientMessage,
    ConnectionHello,
    ConnectionReady,
    ConnectionRejected,
    DelegateCancel,
    DelegateRequest,
    DelegateResponse,
    ExecuteRequest,
    ExecutionStarted,
    HostMessage,
    HostResponse,
    InitialResponse,
    InvalidHello,
    MissingRequiredCapability,
    NoCompatibleVersion,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationResponse,
    OperationYield,
    SessionClosedResponse,
    SessionReady,
    ShutdownRequest,
    TerminateRequest,
    WaitCompleted,
    WaitRequest,
    WireError,
    WireOk,
)

__all__ = [
    "HOST_CAPABILITIES",
    "MAX_ACTIVE_CELLS",
    "MAX_PENDING_DELEGATES",
    "MAX_PENDING_DELEGATES_4096",
    "RECENT_ID_WINDOW",
    "CancelRequested",
    "ClientMessageReader",
    "ConnectionClosed",
    "DelegateAnswered",
    "DelegateRefused",
    "ExecuteRequested",
    "FatalClientError",
    "HelloReceived",
    "HostCommandError",
    "HostEvent",
    "HostProtocol",
    "NeedData",
    "SessionOpenRequested",
    "ShutdownRequested",
    "TerminateRequested",
    "WaitRequested",
    "YieldRequested",
]

#: The capabilities host 0.171.0 offers (it grants their intersection with the client's).
HOST_CAPABILITIES: frozenset[str] = frozenset(ALL_CAPABILITIES)
#: Cells per connection between ``execution/started`` and ``cell/closed`` (0.171.0).
MAX_ACTIVE_CELLS = 2048
#: Unanswered delegate calls per connection, and the same with ``delegate-capacity-4096``.
MAX_PENDING_DELEGATES = 1024
MAX_PENDING_DELEGATES_4096 = 4096
_FIRST_MESSAGE = "first message must be connection/hello"
_CANCELLED = "code-mode request cancelled"
_TOO_FEW_TOKENS = "invalid code-mode execute request: number too small to fit in target type"


class HostCommandError(UsageError):
    """A host command would break the protocol (the host program's own bug); nothing was sent."""


class DelegateRefused(CodeModeError):
    """A delegate call cannot be made; the script's call fails with ``message``.

    The reference host rejects the promise in JavaScript and sends nothing to the client, for
    example ``code-mode host has too many pending delegate calls``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ------------------------------------------------------------------------------ machine


@attrs.define
class _Cell:
    session_id: str
    cell_id: str
    tool_call_id: str
    # The execute's request id while its initial response is pending, else the wait's.
    observer: RequestId | None
    next_tool: int = 1
    # An initial response still pending that no longer counts as the observer (detach_initial).
    detached: RequestId | None = None
    terminates: set[RequestId] = attrs.Factory(set)
    delegates: set[DelegateRequestId] = attrs.Factory(set)
    # A final observation (Result, Terminated, or an initial-response error) was delivered.
    final: bool = False


@attrs.define
class _Session:
    session_id: str
    next_cell: int = 1
    cells: dict[str, _Cell] = attrs.Factory(dict)
    catalog_revision: int | None = None
    catalog: tuple[ToolDefinition, ...] = ()


@attrs.frozen
class _Pending:
    """An operation request awaiting its answer: what it was and when it arrived."""

    method: str
    session_id: str
    cell_id: str
    received_ns: int


class HostProtocol:
    """The host side of one code-mode connection (see the module docstring).

    ``capabilities`` is what the host offers (0.171.0's five by default); ``clock`` returns
    nanoseconds and stamps ``code_mode_host_duration_ns`` on responses that lack it.
    ``bulk_token`` (a WebSocket host only) also offers ``dual-websocket-v1``: when the client
    asks for it, ``connection/ready`` carries the token, and from then on the bulk lane has
    its own bytes each way (:meth:`data_to_send` and :meth:`receive_data` take the lane).
    """

    def __init__(
        self,
        *,
        capabilities: Iterable[str] = HOST_CAPABILITIES,
        clock: Callable[[], int] = time.monotonic_ns,
        bulk_token: str | None = None,
    ) -> None:
        self._offered = frozenset(capabilities)
        if bulk_token is not None:
            self._offered |= {DUAL_WEBSOCKET}
        self._bulk_token = bulk_token
        self._bulk_out: list[bytes] = []
        self._clock = clock
        self._reader = ClientMessageReader()
        self._events: deque[HostEvent] = deque()
        self._out: list[bytes] = []
        self._verdict: ConnectionReady | ConnectionRejected | None = None
        self._answered_hello = False
        self._granted: frozenset[str] = frozenset()
        self._sessions: dict[str, _Session] = {}
        self._opened: RecentIds[str] = RecentIds(RECENT_ID_WINDOW)
        self._pending: dict[RequestId, _Pending] = {}
        # Executes announced as events but not yet started or refused (they count as active).
        self._starting: dict[RequestId, ExecuteRequest] = {}
        self._active_cells = 0
        self._delegates: dict[DelegateRequestId, _Cell] = {}
        self._next_delegate = 1
        self._failure: FatalClientError | None = None

    # -------------------------------------------------------------------- observation

    @property
    def capabilities(self) -> frozenset[str]:
        """The capabilities granted in ``connection/ready`` (empty before it)."""
        return self._granted

    @property
    def delegate_capacity(self) -> int:
        """How many delegate calls may be pending at once on this connection."""
        if DELEGATE_CAPACITY_4096 in self._granted:
            return MAX_PENDING_DELEGATES_4096
        return MAX_PENDING_DELEGATES

    @property
    def pending_delegates(self) -> int:
        """Delegate calls sent and neither answered nor cancelled."""
        return len(self._delegates)

    @property
    def active_cells(self) -> int:
        """Cells started and not yet closed."""
        return self._active_cells

    @property
    def rejected(self) -> bool:
        """Whether the handshake was answered with ``connection/rejected``."""
        return self._answered_hello and type(self._verdict) is ConnectionRejected

    def is_pending(self, request_id: int) -> bool:
        """Whether request ``request_id`` still awaits an answer from the host."""
        return RequestId(request_id) in self._pending or RequestId(request_id) in self._starting

    def cell_is_open(self, session_id: str, cell_id: str) -> bool:
        """Whether the cell exists and has not been closed."""
        session = self._sessions.get(session_id)
        return session is not None and cell_id in session.cells

    # -------------------------------------------------------------------- bytes in/out

    @property
    def lanes(self) -> bool:
        """Whether ``dual-websocket-v1`` was granted: the connection has a bulk lane."""
        return self._reader.lanes

    def receive_data(self, data: bytes | bytearray | memoryview, lane: Lane = Lane.CONTROL) -> None:
        """Feed bytes read from the client on ``lane``."""
        self._reader.receive_data(data, lane)

    def receive_eof(self, lane: Lane = Lane.CONTROL) -> None:
        """The client closed its side (on either lane)."""
        self._reader.receive_eof(lane)

    def has_data_to_send(self, lane: Lane = Lane.CONTROL) -> bool:
        """Whether frames are queued for ``lane`` (so a writer need not wake for nothing)."""
        return bool(self._out if lane is Lane.CONTROL else self._bulk_out)

    def data_to_send(self, lane: Lane = Lane.CONTROL) -> bytes:
        """Every frame queued for ``lane`` since the last call, in order."""
        out = self._out if lane is Lane.CONTROL else self._bulk_out
        data = b"".join(out)
        out.clear()
        return data

    def next_event(self) -> HostEvent:
        """The next event; raises :class:`FatalClientError` if the client broke the protocol."""
        if self._failure is not None:
            raise self._failure
        while not self._events:
            if self._verdict is not None and not self._answered_hello:
                return NEED_DATA  # nothing is read until the handshake is answered
            if self.rejected:
                return ConnectionClosed()
            try:
                message = self._reader.next_message()
                if message is None:
                    return NEED_DATA
                if isinstance(message, ConnectionClosed):
                    return message
                self._dispatch(message)
            except FatalClientError as exc:
                self._failure = exc
                raise
        return self._events.popleft()

    # -------------------------------------------------------------------- dispatch

    def _dispatch(self, message: ClientMessage) -> None:
        if self._verdict is None:
            self._judge_hello(message)
            return
        match message:  # the commonest first: each class pattern is one isinstance test
            case DelegateResponse():
                self._on_delegate_response(message)
            case OperationRequest():
                self._on_request(message)
            case OperationCancel(id=request_id):
                self._on_cancel(RequestId(request_id))
            case OperationYield(id=request_id):
                self._on_yield(RequestId(request_id))

    def _judge_hello(self, message: ClientMessage) -> None:
        if type(message) is not ConnectionHello:
            self._verdict = ConnectionRejected(InvalidHello(_FIRST_MESSAGE))
            self._events.append(HelloReceived(None, self._verdict))
            return
        # The order of 0.171.0: the version first, then the smallest missing capability.
        missing = sorted(set(message.required_capabilities) - self._offered)
        if PROTOCOL_VERSION not in message.supported_versions:
            self._verdict = ConnectionRejected(NoCompatibleVersion((PROTOCOL_VERSION,)))
        elif missing:
            self._verdict = ConnectionRejected(MissingRequiredCapability(missing[0]))
        else:
            asked = set(message.required_capabilities) | set(message.optional_capabilities)
            granted = tuple(sorted(asked & self._offered))
            token = self._bulk_token if DUAL_WEBSOCKET in granted else None
            self._verdict = ConnectionReady(PROTOCOL_VERSION, granted, token)
        self._events.append(HelloReceived(message, self._verdict))

    def _on_request(self, message: OperationRequest) -> None:
        request_id = message.id
        request = message.request
        now = self._clock()
        if isinstance(request, OpenSessionRequest):
            self._on_open(request_id, request, now)
            return
        session_id = request.session_id
        session = self._sessions.get(session_id)
        if session is None:
            self._respond(request_id, WireError(f"unknown code-mode session {session_id}"))
            return
        match request:
            case ExecuteRequest():
                self._on_execute(request_id, session, request, now)
            case WaitRequest() | TerminateRequest():
                self._on_observe(request_id, session, request, now)
            case ShutdownRequest():
                self._pending[request_id] = _Pending("shutdown", session_id, "", now)
                self._events.append(ShutdownRequested(request_id, session_id))

    def _on_open(self, request_id: RequestId, request: OpenSessionRequest, now: int) -> None:
        session_id = request.session_id
        opening = self._opening(session_id)
        self._pending[request_id] = _Pending("open", session_id, "", now)
        if session_id in self._sessions or opening:
            self._reply_error(request_id, f"code-mode session ID `{session_id}` is already open")
        elif session_id in self._opened:
            self._reply_error(request_id, f"code-mode session ID `{session_id}` was reused")
        else:
            limits = request.cell_execution_limits
            server = request.output_truncation == "server"
            self._events.append(SessionOpenRequested(request_id, session_id, limits, server))

    def _opening(self, session_id: str) -> bool:
        return any(
            p.method == "open" and p.session_id == session_id for p in self._pending.values()
        )

    def _on_execute(
        self, request_id: RequestId, session: _Session, request: ExecuteRequest, now: int
    ) -> None:
        self._pending[request_id] = _Pending("execute", session.session_id, "", now)
        tokens = request.max_output_tokens
        if tokens is not None and tokens < 0:
            self._reply_error(request_id, _TOO_FEW_TOKENS)
            return
        tools = self._resolve_catalog(session, request)
        if isinstance(tools, str):
            self._reply_error(request_id, tools)
            return
        if self._active_cells + len(self._starting) >= MAX_ACTIVE_CELLS:
            self._reply_error(request_id, "code-mode host has too many active cells")
            return
        self._starting[request_id] = request
        self._events.append(ExecuteRequested(request_id, session.session_id, request, tools))

    @staticmethod
    def _resolve_catalog(
        session: _Session, request: ExecuteRequest
    ) -> tuple[ToolDefinition, ...] | str:
        """The tools an execute runs with, or the error text (spec 6.2.2)."""
        revision = request.catalog_revision
        tools = request.enabled_tools
        if revision is None:
            return tools
        if revision == 0:
            return "invalid code-mode catalog revision"
        current = session.catalog_revision
        if not tools:
            if revision == current:
                return session.catalog
            return "unknown code-mode catalog revision"
        if revision == current:
            if tools != session.catalog:
                return "conflicting code-mode catalog revision"
        elif current is None or revision > current:
            session.catalog_revision = revision
            session.catalog = tools
        return tools

    def _on_observe(
        self, rid: RequestId, session: _Session, request: WaitRequest | TerminateRequest, now: int
    ) -> None:
        session_id, cell_id = session.session_id, request.cell_id
        tokens = request.max_output_tokens
        method = "wait" if type(request) is WaitRequest else "terminate"
        self._pending[rid] = _Pending(method, session_id, cell_id, now)
        cell = session.cells.get(cell_id)
        if cell is None or cell.final:
            self._reply_missing(rid, cell_id)
        elif isinstance(request, TerminateRequest):
            cell.terminates.add(rid)
            self._events.append(TerminateRequested(rid, session_id, cell_id, tokens))
        elif cell.observer is not None:
            self._reply_error(rid, f"exec cell {cell_id} already has an active observer")
        else:
            cell.observer = rid
            self._events.append(
                WaitRequested(rid, session_id, cell_id, request.yield_time_ms, tokens)
            )

    def _on_cancel(self, request_id: RequestId) -> None:
        pending = self._pending.get(request_id)
        if pending is None or pending.method != "wait":
            return  # executes, terminates, opens and shutdowns are not cancellable
        self._unobserve(request_id, pending)
        self._reply_error(request_id, _CANCELLED)
        self._events.append(CancelRequested(request_id, pending.session_id, pending.cell_id))

    def _on_yield(self, request_id: RequestId) -> None:
        pending = self._pending.get(request_id)
        if pending is None or pending.method not in ("wait", "initial"):
            return
        self._events.append(YieldRequested(request_id, pending.session_id, pending.cell_id))

    def _on_delegate_response(self, message: DelegateResponse) -> None:
        cell = self._delegates.pop(message.id, None)
        if cell is None:
            return  # unknown, answered or cancelled: ignored
        cell.delegates.discard(message.id)
        self._events.append(
            DelegateAnswered(message.id, cell.session_id, cell.cell_id, message.result)
        )

    # -------------------------------------------------------------------- commands

    def answer_hello(self) -> ConnectionReady | ConnectionRejected:
        """Send the handshake verdict announced by :class:`HelloReceived`; return it."""
        if self._verdict is None or self._answered_hello:
            raise HostCommandError("there is no unanswered connection/hello")
        self._answered_hello = True
        if type(self._verdict) is ConnectionReady:
            self._granted = frozenset(self._verdict.capabilities)
        self._send(self._verdict)
        # Everything read from now on is checked against its lane.
        self._reader.lanes = DUAL_WEBSOCKET in self._granted
        return self._verdict

    def accept_session(self, request_id: int) -> None:
        """Answer a :class:`SessionOpenRequested` with ``session/ready``."""
        pending = self._take(request_id, "open")
        self._sessions[pending.session_id] = _Session(pending.session_id)
        self._opened.add(pending.session_id)
        self._respond(RequestId(request_id), WireOk(SessionReady(pending.session_id)))

    def start_cell(self, request_id: int) -> str:
        """Answer an :class:`ExecuteRequested` with ``execution/started``; return the cell id.

        The execute's initial response is now pending: send it with
        :meth:`send_initial_response`.
        """
        rid = RequestId(request_id)
        request = self._starting.pop(rid, None)
        pending = self._pending.get(rid)
        if request is None or pending is None:
            raise HostCommandError(f"{rid!r} is not an execute awaiting its start")
        session = self._sessions[pending.session_id]
        cell_id = str(session.next_cell)
        session.next_cell += 1
        session.cells[cell_id] = _Cell(pending.session_id, cell_id, request.tool_call_id, rid)
        self._active_cells += 1
        # The same id now names the pending initial response.
        self._pending[rid] = _Pending("initial", pending.session_id, cell_id, pending.received_ns)
        self._send(OperationResponse(rid, WireOk(ExecutionStarted(cell_id))))
        return cell_id

    def send_initial_response(self, request_id: int, response: RuntimeResponse | str) -> None:
        """Send an execute's ``execute/initialResponse``: an observation or an error text.

        A final observation (or an error) first cancels the cell's outstanding delegate
        calls; ``cell/closed`` follows once no other observer of the cell is pending.
        """
        rid = RequestId(request_id)
        pending = self._take(rid, "initial")
        cell = self._unobserve(rid, pending)
        assert cell is not None
        if cell.detached == rid:
            cell.detached = None
        if isinstance(response, str):
            self._finalise(cell)
            self._send(InitialResponse(rid, WireError(response)))
        else:
            response = self._stamp(response, cell, pending)
            if response.kind != "yielded":
                self._finalise(cell)
            try:
                frame = encode_host_frame(InitialResponse(rid, WireOk(response)))
            except EncodeError as exc:
                # The host never sends an oversize frame: the cell's output is lost instead.
                self._finalise(cell)
                message = f"code-mode initial response exceeds the IPC frame limit: {exc}"
                self._send(InitialResponse(rid, WireError(message)))
            else:
                self._out.append(frame)
        self._maybe_close(cell)

    def answer_wait(self, request_id: int, response: RuntimeResponse) -> None:
        """Answer a :class:`WaitRequested` with a ``LiveCell`` observation."""
        rid = RequestId(request_id)
        pending = self._take(rid, "wait")
        cell = self._unobserve(rid, pending)
        assert cell is not None
        self._answer_observation(rid, cell, pending, response)

    def detach_initial(self, request_id: int) -> None:
        """Let a wait observe a cell whose initial response is still pending.

        0.171.0 does this when the deadline passed after the script ended but before its
        notifications were acknowledged: the initial response waits for the result, and a wait
        may attach meanwhile (see :meth:`answer_wait_missing`).
        """
        rid = RequestId(request_id)
        pending = self._pending.get(rid)
        cell = None if pending is None else self._cell(pending.session_id, pending.cell_id)
        if pending is None or pending.method != "initial" or cell is None:
            raise HostCommandError(f"{rid!r} is not a pending initial response")
        if cell.observer == rid:
            cell.observer = None
        cell.detached = rid

    def answer_wait_missing(self, request_id: int) -> None:
        """Answer a wait with ``MissingCell``: the result goes to the detached initial response."""
        rid = RequestId(request_id)
        pending = self._pending.get(rid)
        if pending is None or pending.method != "wait":
            raise HostCommandError(f"{rid!r} is not a pending wait")
        cell = self._unobserve(rid, pending)
        self._reply_missing(rid, pending.cell_id)
        if cell is not None:
            self._maybe_close(cell)

    def answer_terminate(self, request_id: int, response: RuntimeResponse) -> None:
        """Answer a :class:`TerminateRequested` (``Terminated``, or the undelivered ``Result``)."""
        rid = RequestId(request_id)
        pending = self._take(rid, "terminate")
        cell = self._cell(pending.session_id, pending.cell_id)
        assert cell is not None
        cell.terminates.discard(rid)
        if response.kind == "yielded":
            raise HostCommandError("a terminate is answered with Terminated or Result")
        self._answer_observation(rid, cell, pending, response)

    def close_session(self, request_id: int) -> None:
        """Finish a :class:`ShutdownRequested`: close every cell, then ``session/closed``.

        Answer the cells' pending observers (``Terminated``) first; each remaining cell's
        outstanding delegate calls are cancelled and it gets its ``cell/closed``.
        """
        rid = RequestId(request_id)
        pending = self._pending.get(rid)
        if pending is None or pending.method != "shutdown":
            raise HostCommandError(f"{rid!r} is not a pending session/shutdown")
        session = self._sessions[pending.session_id]
        for cell in session.cells.values():
            if cell.observer is not None or cell.detached is not None or cell.terminates:
                raise HostCommandError(
                    f"exec cell {cell.cell_id} still has observers to answer before shutdown"
                )
        for cell in list(session.cells.values()):
            self._cancel_delegates(cell)
            self._close(cell)
        del self._sessions[session.session_id]
        self._take(rid, "shutdown")
        self._respond(RequestId(rid), WireOk(SessionClosedResponse(session.session_id)))

    def close_cell(self, session_id: str, cell_id: str) -> None:
        """End a cell that has no observer to answer (as a shutdown does, cell by cell).

        Its outstanding delegate calls are cancelled, then ``cell/closed`` is sent.
        """
        cell = self._cell(session_id, cell_id)
        if cell is None:
            raise HostCommandError(f"exec cell {cell_id} of session {session_id} is not open")
        if cell.observer is not None or cell.detached is not None or cell.terminates:
            raise HostCommandError(f"exec cell {cell_id} still has observers to answer")
        self._cancel_delegates(cell)
        self._close(cell)

    def answer_error(self, request_id: int, message: str) -> None:
        """Answer any pending request with an error (an execute then has no cell)."""
        rid = RequestId(request_id)
        pending = self._pending.get(rid)
        if pending is None or pending.method == "initial":
            raise HostCommandError(f"{rid!r} is not a pending request")
        self._starting.pop(rid, None)
        if pending.method == "wait":
            self._unobserve(rid, pending)
        elif pending.method == "terminate":
            cell = self._cell(pending.session_id, pending.cell_id)
            if cell is not None:
                cell.terminates.discard(rid)
        self._reply_error(rid, message)

    def call_tool(
        self, session_id: str, cell_id: str, tool: ToolDefinition, input: Any
    ) -> DelegateRequestId:
        """Send a ``tool/invoke`` for ``tool`` from a live cell; return its delegate id.

        Raises :class:`DelegateRefused` (the script's call fails, nothing is sent) when the
        pending-delegate cap is reached or the call does not fit in a frame.
        """
        cell = self._live_cell(session_id, cell_id)
        self._check_capacity()
        call_id = f"tool-{cell.next_tool}"
        name = tool.name if tool.tool_name is None else tool.tool_name
        call = ToolCall(cell_id, call_id, name, tool.namespace, tool.kind, input)
        delegate_id = self._delegate(cell, call)
        cell.next_tool += 1
        return delegate_id

    def send_notification(self, session_id: str, cell_id: str, text: str) -> DelegateRequestId:
        """Send a ``notification/send`` (``callId`` is the execute's ``tool_call_id``)."""
        cell = self._live_cell(session_id, cell_id)
        self._check_capacity()
        return self._delegate(cell, Notification(cell.tool_call_id, cell_id, text))

    def cancel_delegate(self, delegate_id: int) -> bool:
        """Send ``delegate/cancel`` for a pending call; ``False`` if it was not pending."""
        did = DelegateRequestId(delegate_id)
        cell = self._delegates.pop(did, None)
        if cell is None:
            return False
        cell.delegates.discard(did)
        frame = encode_host_frame(DelegateCancel(did))
        (self._bulk_out if self._reader.lanes else self._out).append(frame)
        return True

    # -------------------------------------------------------------------- helpers

    def _send(self, message: HostMessage) -> None:
        self._out.append(encode_host_frame(message))

    def _respond(self, request_id: RequestId, result: WireOk[HostResponse] | WireError) -> None:
        try:
            frame = encode_host_frame(OperationResponse(request_id, result))
        except EncodeError as exc:
            message = f"code-mode host response exceeds the IPC frame limit: {exc}"
            frame = encode_host_frame(OperationResponse(request_id, WireError(message)))
        self._out.append(frame)
        self._reader.finish_request(request_id)

    def _reply_error(self, request_id: RequestId, message: str) -> None:
        self._pending.pop(request_id, None)
        self._respond(request_id, WireError(message))

    def _reply_missing(self, request_id: RequestId, cell_id: str) -> None:
        pending = self._pending.pop(request_id)
        duration = max(0, self._clock() - pending.received_ns)
        response = RuntimeResponse(
            "result", cell_id, (), f"exec cell {cell_id} not found", 0, duration
        )
        self._respond(request_id, WireOk(WaitCompleted(WaitOutcome(False, response))))

    def _take(self, request_id: int, method: str) -> _Pending:
        rid = RequestId(request_id)
        pending = self._pending.get(rid)
        if pending is None or pending.method != method:
            what = "initial response" if method == "initial" else method
            raise HostCommandError(f"{rid!r} is not a pending {what}")
        del self._pending[rid]
        if method == "initial":
            self._reader.finish_request(rid)
        return pending

    def _cell(self, session_id: str, cell_id: str) -> _Cell | None:
        session = self._sessions.get(session_id)
        return None if session is None else session.cells.get(cell_id)

    def _unobserve(self, rid: RequestId, pending: _Pending) -> _Cell | None:
        # The request's cell, if it is still open; ``rid`` no longer observes it.
        cell = self._cell(pending.session_id, pending.cell_id)
        if cell is not None and cell.observer == rid:
            cell.observer = None
        return cell

    def _live_cell(self, session_id: str, cell_id: str) -> _Cell:
        cell = self._cell(session_id, cell_id)
        if cell is None or cell.final:
            raise HostCommandError(f"exec cell {cell_id} of session {session_id} is not live")
        return cell

    def _stamp(self, response: RuntimeResponse, cell: _Cell, pending: _Pending) -> RuntimeResponse:
        changes: dict[str, Any] = {}
        if response.cell_id != cell.cell_id:
            changes["cell_id"] = cell.cell_id
        if response.code_mode_host_duration_ns is None:
            changes["code_mode_host_duration_ns"] = max(0, self._clock() - pending.received_ns)
        if response.kind == "result" and response.result_buffered_for_ns is None:
            changes["result_buffered_for_ns"] = 0
        return attrs.evolve(response, **changes) if changes else response

    def _answer_observation(
        self, rid: RequestId, cell: _Cell, pending: _Pending, response: RuntimeResponse
    ) -> None:
        response = self._stamp(response, cell, pending)
        if response.kind != "yielded":
            self._finalise(cell)
        self._respond(rid, WireOk(WaitCompleted(WaitOutcome(True, response))))
        self._maybe_close(cell)

    def _finalise(self, cell: _Cell) -> None:
        # Outstanding calls are cancelled before the final response, as 0.171.0 orders them.
        cell.final = True
        self._cancel_delegates(cell)

    def _cancel_delegates(self, cell: _Cell) -> None:
        # Newest first, the order 0.171.0 sends them in.
        for did in sorted(cell.delegates, reverse=True):
            self.cancel_delegate(did)

    def _maybe_close(self, cell: _Cell) -> None:
        if cell.final and cell.observer is None and cell.detached is None and not cell.terminates:
            self._close(cell)

    def _close(self, cell: _Cell) -> None:
        session = self._sessions.get(cell.session_id)
        if session is None or session.cells.pop(cell.cell_id, None) is None:
            return
        self._active_cells -= 1
        self._send(CellClosed(cell.session_id, cell.cell_id))

    def _check_capacity(self) -> None:
        if len(self._delegates) >= self.delegate_capacity:
            raise DelegateRefused("code-mode host has too many pending delegate calls")

    def _delegate(self, cell: _Cell, request: ToolCall | Notification) -> DelegateRequestId:
        did = DelegateRequestId(self._next_delegate)
        try:
            frame = encode_host_frame(DelegateRequest(did, cell.session_id, request))
        except EncodeError as exc:
            raise DelegateRefused(str(exc)) from None
        self._next_delegate += 1
        self._delegates[did] = cell
        cell.delegates.add(did)
        # Tool calls take the bulk lane (when there is one); notifications stay on control.
        bulk = self._reader.lanes and type(request) is ToolCall
        (self._bulk_out if bulk else self._out).append(frame)
        return did
