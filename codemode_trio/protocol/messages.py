"""Every message of the code-mode host protocol V1, in both directions.

Each message is an ``attrs`` frozen class with ``to_wire()`` (a JSON-ready dict) and
``from_wire()``, both derived from the message's one declaration (a node of
:mod:`~codemode_trio.protocol.schema`, declared right after the class). The module is sans-IO:
no trio, no sockets, no awaiting.

Host to client: :class:`ConnectionReady`, :class:`ConnectionRejected`,
:class:`OperationResponse`, :class:`InitialResponse`, :class:`DelegateRequest`,
:class:`DelegateCancel`, :class:`CellClosed`.

Client to host: :class:`ConnectionHello`, :class:`OperationRequest`, :class:`OperationCancel`,
:class:`OperationYield`, :class:`DelegateResponse`.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Generic, TypeVar

import attrs

from ._wire import JSON
from .content import (
    CELL_LIMITS,
    NOTIFICATION,
    RUNTIME_RESPONSE,
    TOOL_CALL,
    TOOL_DEFINITION,
    WAIT_OUTCOME,
    CellLimits,
    Notification,
    RuntimeResponse,
    ToolCall,
    ToolDefinition,
    WaitOutcome,
)
from .ids import DelegateRequestId, RequestId, check_hello
from .schema import (
    I32,
    I64,
    IDENTIFIER,
    NONZERO_U32,
    RAW,
    STR,
    U64,
    Choice,
    Field,
    Inline,
    Nested,
    Node,
    Presence,
    ScalarList,
    Struct,
    StructList,
    Union,
    WireValue,
    Wrap,
)

__all__ = [
    "CellClosed",
    "ClientMessage",
    "ClientMessageType",
    "ConnectionHello",
    "ConnectionReady",
    "ConnectionRejected",
    "DelegateCancel",
    "DelegateRequest",
    "DelegateResponse",
    "DelegateResult",
    "ExecuteRequest",
    "ExecutionStarted",
    "HostMessage",
    "HostMessageType",
    "HostRequest",
    "HostResponse",
    "InitialResponse",
    "InvalidHello",
    "MissingRequiredCapability",
    "NoCompatibleVersion",
    "NotificationDelivered",
    "OpenSessionRequest",
    "OperationCancel",
    "OperationRequest",
    "OperationResponse",
    "OperationYield",
    "RejectReason",
    "SessionClosedResponse",
    "SessionReady",
    "ShutdownRequest",
    "TerminateRequest",
    "ToolResult",
    "WaitCompleted",
    "WaitRequest",
    "WireError",
    "WireOk",
    "WireResult",
]


class HostMessageType(enum.StrEnum):
    """The ``type`` tags of host-to-client messages."""

    CONNECTION_READY = "connection/ready"
    CONNECTION_REJECTED = "connection/rejected"
    OPERATION_RESPONSE = "operation/response"
    INITIAL_RESPONSE = "execute/initialResponse"
    DELEGATE_REQUEST = "delegate/request"
    DELEGATE_CANCEL = "delegate/cancel"
    CELL_CLOSED = "cell/closed"


class ClientMessageType(enum.StrEnum):
    """The ``type`` tags of client-to-host messages."""

    CONNECTION_HELLO = "connection/hello"
    OPERATION_REQUEST = "operation/request"
    OPERATION_CANCEL = "operation/cancel"
    OPERATION_YIELD = "operation/yield"
    DELEGATE_RESPONSE = "delegate/response"


T = TypeVar("T")

OPTIONAL = Presence.OPTIONAL

_REQUEST_ID = I64.with_type(RequestId)
_DELEGATE_ID = I64.with_type(DelegateRequestId)

# --------------------------------------------------------------------------- WireResult


@attrs.frozen
class WireOk(Generic[T]):
    """``{"status":"ok","value":...}``."""

    value: T


@attrs.frozen
class WireError:
    """``{"status":"error","message":...}``: the peer answered with an error."""

    message: str


#: A result on the wire: ``{"status": "ok", "value": ...}`` or an error (SPEC §5.3).
WireResult = WireOk[T] | WireError

_WIRE_ERROR = Struct(
    WireError, [Field("message", "message", STR)], tag=("status", "error"), method=False
)


def _wire_result(value: Node) -> Union:
    """``{"status": "ok", "value": <value>}`` or ``{"status": "error", "message": "..."}``."""
    ok = Struct(
        WireOk,
        [Field("value", "value", Nested(value))],
        tag=("status", "ok"),
        # The envelope is checked before its payload is decoded.
        unknown_first=True,
        method=False,
    )
    return Union("status", [ok, _WIRE_ERROR])


# --------------------------------------------------------------------------- handshake


@attrs.frozen
class ConnectionHello(WireValue):
    """The client's first frame: versions and capabilities it requires or would like."""

    TYPE: ClassVar[str] = ClientMessageType.CONNECTION_HELLO
    supported_versions: tuple[int, ...] = (1,)
    required_capabilities: tuple[str, ...] = ()
    optional_capabilities: tuple[str, ...] = ()


def _check_hello(hello: ConnectionHello) -> None:
    # The host's own rules, in both modes: the host kills the connection over such a hello,
    # so no mode may accept it.
    check_hello(hello.supported_versions, hello.required_capabilities, hello.optional_capabilities)


_HELLO = Struct(
    ConnectionHello,
    [
        Field("supportedVersions", "supported_versions", ScalarList(NONZERO_U32)),
        Field("requiredCapabilities", "required_capabilities", ScalarList(STR)),
        Field("optionalCapabilities", "optional_capabilities", ScalarList(STR)),
    ],
    tag=("type", ClientMessageType.CONNECTION_HELLO),
    check=_check_hello,
)


@attrs.frozen
class ConnectionReady(WireValue):
    """The host accepted the hello; ``capabilities`` is what both sides support (sorted)."""

    TYPE: ClassVar[str] = HostMessageType.CONNECTION_READY
    selected_version: int
    capabilities: tuple[str, ...] = ()
    bulk_connection_token: str | None = None


# ``bulkConnectionToken`` only when present, as on 0.150 ws.
_READY = Struct(
    ConnectionReady,
    [
        Field("selectedVersion", "selected_version", NONZERO_U32),
        Field("capabilities", "capabilities", ScalarList(STR)),
        Field("bulkConnectionToken", "bulk_connection_token", STR, OPTIONAL),
    ],
    tag=("type", HostMessageType.CONNECTION_READY),
)


@attrs.frozen
class NoCompatibleVersion(WireValue):
    """Rejection: none of our versions is supported; ``supported_versions`` are the host's."""

    TYPE: ClassVar[str] = "noCompatibleVersion"
    supported_versions: tuple[int, ...]


@attrs.frozen
class MissingRequiredCapability(WireValue):
    """Rejection: the host lacks a capability we required (the smallest missing one)."""

    TYPE: ClassVar[str] = "missingRequiredCapability"
    capability: str


@attrs.frozen
class InvalidHello(WireValue):
    """Rejection: the first message was not a hello."""

    TYPE: ClassVar[str] = "invalidHello"
    message: str


#: Why a host refused the handshake (SPEC §4.3).
RejectReason = NoCompatibleVersion | MissingRequiredCapability | InvalidHello

_REJECT_REASON = Union(
    "type",
    [
        Struct(
            NoCompatibleVersion,
            [Field("supportedVersions", "supported_versions", ScalarList(NONZERO_U32))],
            tag=("type", NoCompatibleVersion.TYPE),
        ),
        Struct(
            MissingRequiredCapability,
            [Field("capability", "capability", STR)],
            tag=("type", MissingRequiredCapability.TYPE),
        ),
        Struct(InvalidHello, [Field("message", "message", STR)], tag=("type", InvalidHello.TYPE)),
    ],
)


@attrs.frozen
class ConnectionRejected(WireValue):
    """The host refused the hello; it exits after sending this."""

    TYPE: ClassVar[str] = HostMessageType.CONNECTION_REJECTED
    reason: RejectReason


_REJECTED = Struct(
    ConnectionRejected,
    [Field("reason", "reason", Nested(_REJECT_REASON))],
    tag=("type", HostMessageType.CONNECTION_REJECTED),
)

# --------------------------------------------------------------------------- requests


@attrs.frozen
class OpenSessionRequest(WireValue):
    """``session/open``. ``output_truncation`` (``"client"``/``"server"``) needs 0.171."""

    METHOD: ClassVar[str] = "session/open"
    session_id: str
    cell_execution_limits: CellLimits | None = None
    output_truncation: str | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)


# Extension fields are omitted unless set.
_OPEN = Struct(
    OpenSessionRequest,
    [
        Field("sessionId", "session_id", IDENTIFIER),
        Field("cellExecutionLimits", "cell_execution_limits", Nested(CELL_LIMITS), OPTIONAL),
        Field(
            "outputTruncation",
            "output_truncation",
            Choice(("client", "server"), "`client` or `server`"),
            OPTIONAL,
        ),
    ],
    tag=("method", OpenSessionRequest.METHOD),
    # The keys checked first: this fixes which fault a frame with several reports.
    order=("cellExecutionLimits", "outputTruncation"),
)


@attrs.frozen
class ExecuteRequest(WireValue):
    """``session/execute``: run ``source`` (a JavaScript module body) as a new cell.

    ``yield_time_ms=None`` means the host default (10 s); ``max_output_tokens`` only matters with
    server-side truncation; ``catalog_revision`` needs ``tool-catalog-revision-v1``.
    """

    METHOD: ClassVar[str] = "session/execute"
    session_id: str
    source: str
    tool_call_id: str = ""
    enabled_tools: tuple[ToolDefinition, ...] = ()
    yield_time_ms: int | None = None
    max_output_tokens: int | None = None
    catalog_revision: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)


# A snake_case body; ``catalog_revision`` only when set, the two limits ``null`` when unset.
_EXECUTE = Struct(
    ExecuteRequest,
    [
        Field("sessionId", "session_id", IDENTIFIER),
        Inline(
            "request",
            (
                Field("catalog_revision", "catalog_revision", U64, OPTIONAL),
                Field("tool_call_id", "tool_call_id", STR),
                Field("enabled_tools", "enabled_tools", StructList(TOOL_DEFINITION)),
                Field("source", "source", STR),
                Field("yield_time_ms", "yield_time_ms", U64, OPTIONAL, write_null=True),
                Field("max_output_tokens", "max_output_tokens", I32, OPTIONAL, write_null=True),
            ),
            # The keys checked first: this fixes which fault a frame with several reports.
            order=("enabled_tools", "source", "tool_call_id", "yield_time_ms", "max_output_tokens"),
        ),
    ],
    tag=("method", ExecuteRequest.METHOD),
)


@attrs.frozen
class WaitRequest(WireValue):
    """``session/wait``: observe a cell for up to ``yield_time_ms`` (required on the wire)."""

    METHOD: ClassVar[str] = "session/wait"
    session_id: str
    cell_id: str
    yield_time_ms: int
    max_output_tokens: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)


# ``maxOutputTokens`` only when set: it needs 0.171.
_WAIT = Struct(
    WaitRequest,
    [
        Field("sessionId", "session_id", IDENTIFIER),
        Inline(
            "request",
            (Field("cell_id", "cell_id", STR), Field("yield_time_ms", "yield_time_ms", U64)),
        ),
        Field("maxOutputTokens", "max_output_tokens", U64, OPTIONAL),
    ],
    tag=("method", WaitRequest.METHOD),
)


@attrs.frozen
class TerminateRequest(WireValue):
    """``session/terminate``: stop a cell; answered with a wait outcome."""

    METHOD: ClassVar[str] = "session/terminate"
    session_id: str
    cell_id: str
    max_output_tokens: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)


_TERMINATE = Struct(
    TerminateRequest,
    [
        Field("sessionId", "session_id", IDENTIFIER),
        Field("cellId", "cell_id", STR),
        Field("maxOutputTokens", "max_output_tokens", U64, OPTIONAL),
    ],
    tag=("method", TerminateRequest.METHOD),
)


@attrs.frozen
class ShutdownRequest(WireValue):
    """``session/shutdown``: terminate every cell of the session and forget it."""

    METHOD: ClassVar[str] = "session/shutdown"
    session_id: str


_SHUTDOWN = Struct(
    ShutdownRequest,
    [Field("sessionId", "session_id", IDENTIFIER)],
    tag=("method", ShutdownRequest.METHOD),
)

#: The request of an ``operation/request``, by its ``method`` (SPEC §6).
HostRequest = OpenSessionRequest | ExecuteRequest | WaitRequest | TerminateRequest | ShutdownRequest

# Located as ``operation/request.request(session/open)``.
_HOST_REQUEST = Union("method", [_OPEN, _EXECUTE, _WAIT, _TERMINATE, _SHUTDOWN], where="call")


@attrs.frozen
class OperationRequest(WireValue):
    """``operation/request``: one request with a client-chosen id (never reused)."""

    TYPE: ClassVar[str] = ClientMessageType.OPERATION_REQUEST
    id: RequestId
    request: HostRequest


_OPERATION_REQUEST = Struct(
    OperationRequest,
    [Field("id", "id", _REQUEST_ID), Field("request", "request", Nested(_HOST_REQUEST))],
    tag=("type", ClientMessageType.OPERATION_REQUEST),
)


@attrs.frozen
class OperationCancel(WireValue):
    """``operation/cancel``: abandon an in-flight request (only waits really stop)."""

    TYPE: ClassVar[str] = ClientMessageType.OPERATION_CANCEL
    id: RequestId


_OPERATION_CANCEL = Struct(
    OperationCancel,
    [Field("id", "id", _REQUEST_ID)],
    tag=("type", ClientMessageType.OPERATION_CANCEL),
)


@attrs.frozen
class OperationYield(WireValue):
    """``operation/yield``: make an in-flight wait return now (0.160+, ``yield-observation``)."""

    TYPE: ClassVar[str] = ClientMessageType.OPERATION_YIELD
    id: RequestId


_OPERATION_YIELD = Struct(
    OperationYield,
    [Field("id", "id", _REQUEST_ID)],
    tag=("type", ClientMessageType.OPERATION_YIELD),
)

# --------------------------------------------------------------------------- responses


@attrs.frozen
class SessionReady(WireValue):
    """Answer to ``session/open``."""

    TYPE: ClassVar[str] = "session/ready"
    session_id: str


@attrs.frozen
class ExecutionStarted(WireValue):
    """Answer to ``session/execute``: the host assigned ``cell_id``."""

    TYPE: ClassVar[str] = "execution/started"
    cell_id: str


@attrs.frozen
class WaitCompleted(WireValue):
    """Answer to ``session/wait`` and ``session/terminate``."""

    TYPE: ClassVar[str] = "wait/completed"
    outcome: WaitOutcome


@attrs.frozen
class SessionClosedResponse(WireValue):
    """Answer to ``session/shutdown``."""

    TYPE: ClassVar[str] = "session/closed"
    session_id: str


#: The value of a successful ``operation/response`` (SPEC §5.4).
HostResponse = SessionReady | ExecutionStarted | WaitCompleted | SessionClosedResponse

_HOST_RESPONSE = Union(
    "type",
    [
        Struct(
            SessionReady, [Field("sessionId", "session_id", STR)], tag=("type", SessionReady.TYPE)
        ),
        Struct(
            ExecutionStarted, [Field("cellId", "cell_id", STR)], tag=("type", ExecutionStarted.TYPE)
        ),
        Struct(
            WaitCompleted,
            [Field("outcome", "outcome", Nested(WAIT_OUTCOME))],
            tag=("type", WaitCompleted.TYPE),
        ),
        Struct(
            SessionClosedResponse,
            [Field("sessionId", "session_id", STR)],
            tag=("type", SessionClosedResponse.TYPE),
        ),
    ],
)


@attrs.frozen
class OperationResponse(WireValue):
    """``operation/response``: the answer to the request with the same ``id``."""

    TYPE: ClassVar[str] = HostMessageType.OPERATION_RESPONSE
    id: RequestId
    result: WireOk[HostResponse] | WireError


_OPERATION_RESPONSE = Struct(
    OperationResponse,
    [
        Field("id", "id", _REQUEST_ID),
        Field("result", "result", Nested(_wire_result(_HOST_RESPONSE))),
    ],
    tag=("type", HostMessageType.OPERATION_RESPONSE),
)


@attrs.frozen
class InitialResponse(WireValue):
    """``execute/initialResponse``: the first observation of the cell started by request ``id``."""

    TYPE: ClassVar[str] = HostMessageType.INITIAL_RESPONSE
    id: RequestId
    result: WireOk[RuntimeResponse] | WireError


_INITIAL_RESPONSE = Struct(
    InitialResponse,
    [
        Field("id", "id", _REQUEST_ID),
        Field("result", "result", Nested(_wire_result(RUNTIME_RESPONSE))),
    ],
    tag=("type", HostMessageType.INITIAL_RESPONSE),
)

# --------------------------------------------------------------------------- delegates


@attrs.frozen
class DelegateRequest(WireValue):
    """``delegate/request``: a cell calls a tool (:class:`ToolCall`) or notifies."""

    TYPE: ClassVar[str] = HostMessageType.DELEGATE_REQUEST
    id: DelegateRequestId
    session_id: str
    request: ToolCall | Notification

    @property
    def cell_id(self) -> str:
        """The wire cell id the call belongs to."""
        return self.request.cell_id


# A tool call sits one level down, under ``invocation``; a notification's fields sit beside
# its tag.
_DELEGATE_CALL = Union(
    "type", [Wrap(("type", "tool/invoke"), "invocation", TOOL_CALL), NOTIFICATION]
)

_DELEGATE_REQUEST = Struct(
    DelegateRequest,
    [
        Field("id", "id", _DELEGATE_ID),
        Field("sessionId", "session_id", STR),
        Field("request", "request", Nested(_DELEGATE_CALL)),
    ],
    tag=("type", HostMessageType.DELEGATE_REQUEST),
)


@attrs.frozen
class DelegateCancel(WireValue):
    """``delegate/cancel``: the host abandoned delegate call ``id``; send no reply for it."""

    TYPE: ClassVar[str] = HostMessageType.DELEGATE_CANCEL
    id: DelegateRequestId


_DELEGATE_CANCEL = Struct(
    DelegateCancel, [Field("id", "id", _DELEGATE_ID)], tag=("type", HostMessageType.DELEGATE_CANCEL)
)


@attrs.frozen
class ToolResult(WireValue):
    """A tool's successful result (any JSON)."""

    TYPE: ClassVar[str] = "tool/result"
    result: JSON


@attrs.frozen
class NotificationDelivered(WireValue):
    """Acknowledges a notification (the cell's result waits for this)."""

    TYPE: ClassVar[str] = "notification/delivered"


#: A client's answer to a delegate request (SPEC §10.3).
DelegateResult = ToolResult | NotificationDelivered

_DELEGATE_RESULT = Union(
    "type",
    [
        Struct(ToolResult, [Field("result", "result", RAW)], tag=("type", ToolResult.TYPE)),
        Struct(NotificationDelivered, [], tag=("type", NotificationDelivered.TYPE)),
    ],
)


@attrs.frozen
class DelegateResponse(WireValue):
    """``delegate/response``: the client's answer to delegate call ``id``."""

    TYPE: ClassVar[str] = ClientMessageType.DELEGATE_RESPONSE
    id: DelegateRequestId
    result: WireOk[DelegateResult] | WireError


_DELEGATE_RESPONSE = Struct(
    DelegateResponse,
    [
        Field("id", "id", _DELEGATE_ID),
        Field("result", "result", Nested(_wire_result(_DELEGATE_RESULT))),
    ],
    tag=("type", ClientMessageType.DELEGATE_RESPONSE),
)


@attrs.frozen
class CellClosed(WireValue):
    """``cell/closed``: the cell's lifecycle is over (sent exactly once per cell)."""

    TYPE: ClassVar[str] = HostMessageType.CELL_CLOSED
    session_id: str
    cell_id: str


_CELL_CLOSED = Struct(
    CellClosed,
    [Field("sessionId", "session_id", STR), Field("cellId", "cell_id", STR)],
    tag=("type", HostMessageType.CELL_CLOSED),
)

#: Any message a host sends (SPEC §5.2).
HostMessage = (
    ConnectionReady
    | ConnectionRejected
    | OperationResponse
    | InitialResponse
    | DelegateRequest
    | DelegateCancel
    | CellClosed
)

#: Any message a client sends (SPEC §5.1).
ClientMessage = (
    ConnectionHello | OperationRequest | OperationCancel | OperationYield | DelegateResponse
)

#: Every host-to-client message, tagged by ``type`` (a message's location is its tag).
HOST_MESSAGES = Union(
    "type",
    [
        _READY,
        _REJECTED,
        _OPERATION_RESPONSE,
        _INITIAL_RESPONSE,
        _DELEGATE_REQUEST,
        _DELEGATE_CANCEL,
        _CELL_CLOSED,
    ],
    where="tag",
)

#: Every client-to-host message, tagged by ``type``.
CLIENT_MESSAGES = Union(
    "type",
    [_HELLO, _OPERATION_REQUEST, _OPERATION_CANCEL, _OPERATION_YIELD, _DELEGATE_RESPONSE],
    where="tag",
)
