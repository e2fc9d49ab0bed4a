"""Every message of the code-mode host protocol V1, in both directions.

Each message is an ``attrs`` frozen class with ``to_wire()`` (a JSON-ready dict) and
``from_wire()``. The module is sans-IO: no trio, no sockets, no awaiting.

Host to client: :class:`ConnectionReady`, :class:`ConnectionRejected`,
:class:`OperationResponse`, :class:`InitialResponse`, :class:`DelegateRequest`,
:class:`DelegateCancel`, :class:`CellClosed`.

Client to host: :class:`ConnectionHello`, :class:`OperationRequest`, :class:`OperationCancel`,
:class:`OperationYield`, :class:`DelegateResponse`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from ._wire import (
    I64_MAX,
    I64_MIN,
    JSON,
    U32_MAX,
    DecodeContext,
    Fields,
    OffHappyPath,
    is_opt_u64,
    is_u64,
    null_keys,
    slot_builder,
)
from .content import (
    CellLimits,
    Notification,
    RuntimeResponse,
    ToolCall,
    ToolDefinition,
    WaitOutcome,
    _put_optional,
)
from .ids import DelegateRequestId, RequestId, check_hello, is_blank

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


# --------------------------------------------------------------------------- WireResult


@attrs.frozen
class WireOk(Generic[T]):
    """``{"status":"ok","value":...}``."""

    value: T


@attrs.frozen
class WireError:
    """``{"status":"error","message":...}``: the peer answered with an error."""

    message: str


WireResult = WireOk[T] | WireError

# Constructors for the fast decoders (see _wire.slot_builder).
_new_wire_ok = slot_builder(WireOk)
_new_wire_error = slot_builder(WireError)

_OK_KEYS = frozenset({"status", "value"})
_ERR_KEYS = frozenset({"status", "message"})
_STATUSES = {"ok": None, "error": None}


def _result_to_wire(result: WireOk[Any] | WireError) -> dict[str, Any]:
    if type(result) is WireError:
        return {"status": "error", "message": result.message}
    return {"status": "ok", "value": result.value.to_wire()}  # type: ignore[union-attr]


def _fast_result(data: Any, decode_value: Callable[[Any], Any]) -> Any:
    # The happy path of _decode_result, with the ``ok`` value decoded by ``decode_value``.
    if type(data) is dict and len(data) == 2:
        status = data.get("status")
        if status == "ok" and "value" in data:
            return _new_wire_ok(decode_value(data["value"]))
        if status == "error":
            message = data.get("message")
            if type(message) is str:
                return _new_wire_error(message)
    raise OffHappyPath


def _fast_id(data: dict[str, Any]) -> int:
    # The happy path of ``f.req_i64("id")``.
    value = data.get("id")
    if type(value) is not int or not I64_MIN <= value <= I64_MAX:
        raise OffHappyPath
    return value


def _decode_result(data: object, where: str, ctx: DecodeContext) -> tuple[Fields, bool]:
    """Read the ``status`` tag; return the fields and whether it is ``ok``."""
    f = Fields(data, where, ctx)
    status = f.tag("status", _STATUSES)
    if status == "error":
        f.req_str("message")
        f.done(_ERR_KEYS)
        return f, False
    if "value" not in f.data:
        f.missing("value")
    f.done(_OK_KEYS)
    return f, True


# --------------------------------------------------------------------------- handshake


_HELLO_KEYS = frozenset(
    {"type", "supportedVersions", "requiredCapabilities", "optionalCapabilities"}
)


@attrs.frozen
class ConnectionHello:
    """The client's first frame: versions and capabilities it requires or would like."""

    TYPE: ClassVar[str] = ClientMessageType.CONNECTION_HELLO
    supported_versions: tuple[int, ...] = (1,)
    required_capabilities: tuple[str, ...] = ()
    optional_capabilities: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {
            "type": "connection/hello",
            "supportedVersions": list(self.supported_versions),
            "requiredCapabilities": list(self.required_capabilities),
            "optionalCapabilities": list(self.optional_capabilities),
        }

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> ConnectionHello:
        # The happy path of from_fields (see _wire.OffHappyPath).
        versions = d.get("supportedVersions")
        required = d.get("requiredCapabilities")
        optional = d.get("optionalCapabilities")
        if (
            len(d) != 4
            or type(versions) is not list
            or type(required) is not list
            or type(optional) is not list
        ):
            raise OffHappyPath
        for capability in (*required, *optional):
            if type(capability) is not str:
                raise OffHappyPath
        try:
            check_hello(versions, required, optional)
        except ValueError:
            raise OffHappyPath from None
        return _new_hello(tuple(versions), tuple(required), tuple(optional))

    @classmethod
    def from_fields(cls, f: Fields) -> ConnectionHello:
        """Decode from the message's fields.

        Applies the host's own rules (:func:`~codemode_trio.protocol.ids.check_hello`) in both
        modes: the host kills the connection over such a hello, so no mode may accept it.
        """
        hello = cls(
            f.req_u32_list("supportedVersions", nonzero=True),
            f.req_str_list("requiredCapabilities"),
            f.req_str_list("optionalCapabilities"),
        )
        try:
            check_hello(
                hello.supported_versions, hello.required_capabilities, hello.optional_capabilities
            )
        except ValueError as exc:
            f.ctx.fail(f.where, str(exc))
        f.done(_HELLO_KEYS)
        return hello


_new_hello = slot_builder(ConnectionHello)

_READY_KEYS = frozenset({"type", "selectedVersion", "capabilities", "bulkConnectionToken"})


@attrs.frozen
class ConnectionReady:
    """The host accepted the hello; ``capabilities`` is what both sides support (sorted)."""

    TYPE: ClassVar[str] = HostMessageType.CONNECTION_READY
    selected_version: int
    capabilities: tuple[str, ...] = ()
    bulk_connection_token: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict (``bulkConnectionToken`` only when present, as on 0.150 ws)."""
        out: dict[str, Any] = {
            "type": "connection/ready",
            "selectedVersion": self.selected_version,
            "capabilities": list(self.capabilities),
        }
        if self.bulk_connection_token is not None:
            out["bulkConnectionToken"] = self.bulk_connection_token
        return out

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> ConnectionReady:
        # The happy path of from_fields (see _wire.OffHappyPath).
        version = d.get("selectedVersion")
        capabilities = d.get("capabilities")
        token = d.get("bulkConnectionToken")
        if (
            len(d) != (3 if token is None else 4)
            or type(version) is not int
            or not 0 < version <= U32_MAX
            or type(capabilities) is not list
            or (token is not None and type(token) is not str)
        ):
            raise OffHappyPath
        for capability in capabilities:
            if type(capability) is not str:
                raise OffHappyPath
        return _new_ready(version, tuple(capabilities), token)

    @classmethod
    def from_fields(cls, f: Fields) -> ConnectionReady:
        """Decode from the message's fields."""
        ready = cls(
            f._int("selectedVersion", f.raw("selectedVersion"), 1, 2**32 - 1, "a nonzero u32"),
            f.req_str_list("capabilities"),
            f.opt_str("bulkConnectionToken"),
        )
        f.done(_READY_KEYS)
        return ready


_new_ready = slot_builder(ConnectionReady)


@attrs.frozen
class NoCompatibleVersion:
    """Rejection: none of our versions is supported; ``supported_versions`` are the host's."""

    TYPE: ClassVar[str] = "noCompatibleVersion"
    supported_versions: tuple[int, ...]

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "supportedVersions": list(self.supported_versions)}


@attrs.frozen
class MissingRequiredCapability:
    """Rejection: the host lacks a capability we required (the smallest missing one)."""

    TYPE: ClassVar[str] = "missingRequiredCapability"
    capability: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "capability": self.capability}


@attrs.frozen
class InvalidHello:
    """Rejection: the first message was not a hello."""

    TYPE: ClassVar[str] = "invalidHello"
    message: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "message": self.message}


RejectReason = NoCompatibleVersion | MissingRequiredCapability | InvalidHello

_REASON_KEYS = {
    "noCompatibleVersion": frozenset({"type", "supportedVersions"}),
    "missingRequiredCapability": frozenset({"type", "capability"}),
    "invalidHello": frozenset({"type", "message"}),
}


def _decode_reason(data: object, where: str, ctx: DecodeContext) -> RejectReason:
    f = Fields(data, where, ctx)
    kind = f.tag("type", _REASON_KEYS)
    reason: RejectReason
    if kind == "noCompatibleVersion":
        reason = NoCompatibleVersion(f.req_u32_list("supportedVersions", nonzero=True))
    elif kind == "missingRequiredCapability":
        reason = MissingRequiredCapability(f.req_str("capability"))
    else:
        reason = InvalidHello(f.req_str("message"))
    f.done(_REASON_KEYS[kind])
    return reason


@attrs.frozen
class ConnectionRejected:
    """The host refused the hello; it exits after sending this."""

    TYPE: ClassVar[str] = HostMessageType.CONNECTION_REJECTED
    reason: RejectReason

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "connection/rejected", "reason": self.reason.to_wire()}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> ConnectionRejected:
        # The happy path of from_fields (see _wire.OffHappyPath).
        reason = d.get("reason")
        if len(d) != 2 or type(reason) is not dict or len(reason) != 2:
            raise OffHappyPath
        kind = reason.get("type")
        if kind == "noCompatibleVersion":
            versions = reason.get("supportedVersions")
            if type(versions) is list and all(
                type(version) is int and 0 < version <= U32_MAX for version in versions
            ):
                return _new_rejected(_new_no_compatible_version(tuple(versions)))
        elif kind == "missingRequiredCapability":
            capability = reason.get("capability")
            if type(capability) is str:
                return _new_rejected(_new_missing_required_capability(capability))
        elif kind == "invalidHello":
            message = reason.get("message")
            if type(message) is str:
                return _new_rejected(_new_invalid_hello(message))
        raise OffHappyPath

    @classmethod
    def from_fields(cls, f: Fields) -> ConnectionRejected:
        """Decode from the message's fields."""
        rejected = cls(_decode_reason(f.raw("reason"), f"{f.where}.reason", f.ctx))
        f.done(frozenset({"type", "reason"}))
        return rejected


_new_rejected = slot_builder(ConnectionRejected)
_new_no_compatible_version = slot_builder(NoCompatibleVersion)
_new_missing_required_capability = slot_builder(MissingRequiredCapability)
_new_invalid_hello = slot_builder(InvalidHello)

# --------------------------------------------------------------------------- requests


_OPEN_KEYS = frozenset({"method", "sessionId", "cellExecutionLimits", "outputTruncation"})
_OPEN_OPTIONAL = ("cellExecutionLimits", "outputTruncation")


@attrs.frozen
class OpenSessionRequest:
    """``session/open``. ``output_truncation`` (``"client"``/``"server"``) needs 0.171."""

    METHOD: ClassVar[str] = "session/open"
    session_id: str
    cell_execution_limits: CellLimits | None = None
    output_truncation: str | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict; extension fields are omitted unless set."""
        out: dict[str, Any] = {"method": self.METHOD, "sessionId": self.session_id}
        limits = self.cell_execution_limits
        _put_optional(
            out,
            "cellExecutionLimits",
            None if limits is None else limits.to_wire(),
            self.wire_nulls,
            null=False,
        )
        _put_optional(out, "outputTruncation", self.output_truncation, self.wire_nulls, null=False)
        return out

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> OpenSessionRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        truncation = d.get("outputTruncation")
        if (
            not d.keys() <= _OPEN_KEYS
            or type(session_id) is not str
            or is_blank(session_id)
            or (truncation is not None and truncation != "client" and truncation != "server")
        ):
            raise OffHappyPath
        raw_limits = d.get("cellExecutionLimits")
        limits = None if raw_limits is None else CellLimits._fast(raw_limits)
        return _new_open(session_id, limits, truncation, null_keys(d, _OPEN_OPTIONAL))

    @classmethod
    def from_fields(cls, f: Fields) -> OpenSessionRequest:
        """Decode from the request's fields."""
        raw_limits = f.opt_raw("cellExecutionLimits")
        limits = (
            None
            if raw_limits is None
            else CellLimits.from_wire(raw_limits, f"{f.where}.cellExecutionLimits", f.ctx)
        )
        truncation = f.opt_str("outputTruncation")
        if truncation is not None and truncation not in ("client", "server"):
            f.ctx.fail(
                f"{f.where}.outputTruncation",
                f"unknown variant `{truncation}`, expected `client` or `server`",
            )
        request = cls(f.req_identifier("sessionId"), limits, truncation, f.nulls_frozen())
        f.done(_OPEN_KEYS)
        return request


_new_open = slot_builder(OpenSessionRequest)

_EXECUTE_KEYS = frozenset({"method", "sessionId", "request"})
_EXECUTE_BODY_KEYS = frozenset(
    {
        "catalog_revision",
        "tool_call_id",
        "enabled_tools",
        "source",
        "yield_time_ms",
        "max_output_tokens",
    }
)
_EXECUTE_OPTIONAL = ("catalog_revision", "yield_time_ms", "max_output_tokens")
_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1


@attrs.frozen
class ExecuteRequest:
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

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict (snake_case body; ``catalog_revision`` only when set)."""
        nulls = self.wire_nulls
        body: dict[str, Any] = {}
        _put_optional(body, "catalog_revision", self.catalog_revision, nulls, null=False)
        body["tool_call_id"] = self.tool_call_id
        body["enabled_tools"] = [tool.to_wire() for tool in self.enabled_tools]
        body["source"] = self.source
        _put_optional(body, "yield_time_ms", self.yield_time_ms, nulls, null=True)
        _put_optional(body, "max_output_tokens", self.max_output_tokens, nulls, null=True)
        return {"method": self.METHOD, "sessionId": self.session_id, "request": body}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> ExecuteRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        body = d.get("request")
        if (
            len(d) != 3
            or type(session_id) is not str
            or is_blank(session_id)
            or type(body) is not dict
            or not body.keys() <= _EXECUTE_BODY_KEYS
        ):
            raise OffHappyPath
        call_id = body.get("tool_call_id")
        tools = body.get("enabled_tools")
        source = body.get("source")
        yield_time = body.get("yield_time_ms")
        max_tokens = body.get("max_output_tokens")
        revision = body.get("catalog_revision")
        if (
            type(call_id) is not str
            or type(tools) is not list
            or type(source) is not str
            or not is_opt_u64(yield_time)
            or (
                max_tokens is not None
                and (type(max_tokens) is not int or not _I32_MIN <= max_tokens <= _I32_MAX)
            )
            or not is_opt_u64(revision)
        ):
            raise OffHappyPath
        return _new_execute(
            session_id,
            source,
            call_id,
            tuple(map(ToolDefinition._fast, tools)) if tools else (),
            yield_time,
            max_tokens,
            revision,
            null_keys(body, _EXECUTE_OPTIONAL),
        )

    @classmethod
    def from_fields(cls, f: Fields) -> ExecuteRequest:
        """Decode from the request's fields."""
        session_id = f.req_identifier("sessionId")
        where = f"{f.where}.request"
        body = Fields(f.raw("request"), where, f.ctx)
        tools = tuple(
            ToolDefinition.from_wire(tool, f"{where}.enabled_tools[{i}]", f.ctx)
            for i, tool in enumerate(body.req_list("enabled_tools"))
        )
        request = cls(
            session_id,
            body.req_str("source"),
            body.req_str("tool_call_id"),
            tools,
            body.opt_u64("yield_time_ms"),
            body.opt_i32("max_output_tokens"),
            body.opt_u64("catalog_revision"),
            body.nulls_frozen(),
        )
        body.done(_EXECUTE_BODY_KEYS)
        f.done(_EXECUTE_KEYS)
        return request


_new_execute = slot_builder(ExecuteRequest)

_WAIT_KEYS = frozenset({"method", "sessionId", "request", "maxOutputTokens"})
_WAIT_BODY_KEYS = frozenset({"cell_id", "yield_time_ms"})
_MAX_TOKENS = ("maxOutputTokens",)


@attrs.frozen
class WaitRequest:
    """``session/wait``: observe a cell for up to ``yield_time_ms`` (required on the wire)."""

    METHOD: ClassVar[str] = "session/wait"
    session_id: str
    cell_id: str
    yield_time_ms: int
    max_output_tokens: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict (``maxOutputTokens`` only when set: it needs 0.171)."""
        out: dict[str, Any] = {
            "method": self.METHOD,
            "sessionId": self.session_id,
            "request": {"cell_id": self.cell_id, "yield_time_ms": self.yield_time_ms},
        }
        _put_optional(out, "maxOutputTokens", self.max_output_tokens, self.wire_nulls, null=False)
        return out

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> WaitRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        body = d.get("request")
        max_tokens = d.get("maxOutputTokens")
        if (
            not d.keys() <= _WAIT_KEYS
            or type(session_id) is not str
            or is_blank(session_id)
            or type(body) is not dict
            or len(body) != 2
            or not is_opt_u64(max_tokens)
        ):
            raise OffHappyPath
        cell_id = body.get("cell_id")
        yield_time = body.get("yield_time_ms")
        if type(cell_id) is not str or not is_u64(yield_time):
            raise OffHappyPath
        return _new_wait(session_id, cell_id, yield_time, max_tokens, null_keys(d, _MAX_TOKENS))

    @classmethod
    def from_fields(cls, f: Fields) -> WaitRequest:
        """Decode from the request's fields."""
        session_id = f.req_identifier("sessionId")
        body = Fields(f.raw("request"), f"{f.where}.request", f.ctx)
        request = cls(
            session_id,
            body.req_str("cell_id"),
            body.req_u64("yield_time_ms"),
            f.opt_u64("maxOutputTokens"),
            f.nulls_frozen(),
        )
        body.done(_WAIT_BODY_KEYS)
        f.done(_WAIT_KEYS)
        return request


_new_wait = slot_builder(WaitRequest)

_TERMINATE_KEYS = frozenset({"method", "sessionId", "cellId", "maxOutputTokens"})


@attrs.frozen
class TerminateRequest:
    """``session/terminate``: stop a cell; answered with a wait outcome."""

    METHOD: ClassVar[str] = "session/terminate"
    session_id: str
    cell_id: str
    max_output_tokens: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        out: dict[str, Any] = {
            "method": self.METHOD,
            "sessionId": self.session_id,
            "cellId": self.cell_id,
        }
        _put_optional(out, "maxOutputTokens", self.max_output_tokens, self.wire_nulls, null=False)
        return out

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> TerminateRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        cell_id = d.get("cellId")
        max_tokens = d.get("maxOutputTokens")
        if (
            not d.keys() <= _TERMINATE_KEYS
            or type(session_id) is not str
            or is_blank(session_id)
            or type(cell_id) is not str
            or not is_opt_u64(max_tokens)
        ):
            raise OffHappyPath
        return _new_terminate(session_id, cell_id, max_tokens, null_keys(d, _MAX_TOKENS))

    @classmethod
    def from_fields(cls, f: Fields) -> TerminateRequest:
        """Decode from the request's fields."""
        request = cls(
            f.req_identifier("sessionId"),
            f.req_str("cellId"),
            f.opt_u64("maxOutputTokens"),
            f.nulls_frozen(),
        )
        f.done(_TERMINATE_KEYS)
        return request


_new_terminate = slot_builder(TerminateRequest)


@attrs.frozen
class ShutdownRequest:
    """``session/shutdown``: terminate every cell of the session and forget it."""

    METHOD: ClassVar[str] = "session/shutdown"
    session_id: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"method": self.METHOD, "sessionId": self.session_id}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> ShutdownRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        if len(d) != 2 or type(session_id) is not str or is_blank(session_id):
            raise OffHappyPath
        return _new_shutdown(session_id)

    @classmethod
    def from_fields(cls, f: Fields) -> ShutdownRequest:
        """Decode from the request's fields."""
        request = cls(f.req_identifier("sessionId"))
        f.done(frozenset({"method", "sessionId"}))
        return request


_new_shutdown = slot_builder(ShutdownRequest)

HostRequest = OpenSessionRequest | ExecuteRequest | WaitRequest | TerminateRequest | ShutdownRequest

_REQUEST_CLASSES: dict[str, Any] = {
    cls.METHOD: cls
    for cls in (OpenSessionRequest, ExecuteRequest, WaitRequest, TerminateRequest, ShutdownRequest)
}


@attrs.frozen
class OperationRequest:
    """``operation/request``: one request with a client-chosen id (never reused)."""

    TYPE: ClassVar[str] = ClientMessageType.OPERATION_REQUEST
    id: RequestId
    request: HostRequest

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "operation/request", "id": self.id, "request": self.request.to_wire()}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> OperationRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        request = d.get("request")
        if len(d) != 3 or type(request) is not dict:
            raise OffHappyPath
        method = request.get("method")
        request_class = _REQUEST_CLASSES.get(method) if type(method) is str else None
        if request_class is None:
            raise OffHappyPath
        return _new_operation_request(RequestId(_fast_id(d)), request_class._fast(request))

    @classmethod
    def from_fields(cls, f: Fields) -> OperationRequest:
        """Decode from the message's fields."""
        request_id = RequestId(f.req_i64("id"))
        inner = Fields(f.raw("request"), f"{f.where}.request", f.ctx)
        method = inner.tag("method", _REQUEST_CLASSES)
        inner.where = f"{f.where}.request({method})"
        message = cls(request_id, _REQUEST_CLASSES[method].from_fields(inner))
        f.done(frozenset({"type", "id", "request"}))
        return message


_new_operation_request = slot_builder(OperationRequest)


def _id_only(f: Fields) -> int:
    value = f.req_i64("id")
    f.done(frozenset({"type", "id"}))
    return value


@attrs.frozen
class OperationCancel:
    """``operation/cancel``: abandon an in-flight request (only waits really stop)."""

    TYPE: ClassVar[str] = ClientMessageType.OPERATION_CANCEL
    id: RequestId

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "operation/cancel", "id": self.id}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> OperationCancel:
        # The happy path of from_fields (see _wire.OffHappyPath).
        if len(d) != 2:
            raise OffHappyPath
        return _new_operation_cancel(RequestId(_fast_id(d)))

    @classmethod
    def from_fields(cls, f: Fields) -> OperationCancel:
        """Decode from the message's fields."""
        return cls(RequestId(_id_only(f)))


@attrs.frozen
class OperationYield:
    """``operation/yield``: make an in-flight wait return now (0.160+, ``yield-observation``)."""

    TYPE: ClassVar[str] = ClientMessageType.OPERATION_YIELD
    id: RequestId

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "operation/yield", "id": self.id}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> OperationYield:
        # The happy path of from_fields (see _wire.OffHappyPath).
        if len(d) != 2:
            raise OffHappyPath
        return _new_operation_yield(RequestId(_fast_id(d)))

    @classmethod
    def from_fields(cls, f: Fields) -> OperationYield:
        """Decode from the message's fields."""
        return cls(RequestId(_id_only(f)))


_new_operation_cancel = slot_builder(OperationCancel)
_new_operation_yield = slot_builder(OperationYield)

# --------------------------------------------------------------------------- responses


@attrs.frozen
class SessionReady:
    """Answer to ``session/open``."""

    TYPE: ClassVar[str] = "session/ready"
    session_id: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "sessionId": self.session_id}


@attrs.frozen
class ExecutionStarted:
    """Answer to ``session/execute``: the host assigned ``cell_id``."""

    TYPE: ClassVar[str] = "execution/started"
    cell_id: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "cellId": self.cell_id}


@attrs.frozen
class WaitCompleted:
    """Answer to ``session/wait`` and ``session/terminate``."""

    TYPE: ClassVar[str] = "wait/completed"
    outcome: WaitOutcome

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "outcome": self.outcome.to_wire()}


@attrs.frozen
class SessionClosedResponse:
    """Answer to ``session/shutdown``."""

    TYPE: ClassVar[str] = "session/closed"
    session_id: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "sessionId": self.session_id}


HostResponse = SessionReady | ExecutionStarted | WaitCompleted | SessionClosedResponse

_RESPONSE_KEYS = {
    "session/ready": frozenset({"type", "sessionId"}),
    "execution/started": frozenset({"type", "cellId"}),
    "wait/completed": frozenset({"type", "outcome"}),
    "session/closed": frozenset({"type", "sessionId"}),
}


_new_session_ready = slot_builder(SessionReady)
_new_execution_started = slot_builder(ExecutionStarted)
_new_wait_completed = slot_builder(WaitCompleted)
_new_session_closed = slot_builder(SessionClosedResponse)


def _fast_host_response(data: Any) -> HostResponse:
    # The happy path of _decode_host_response (see _wire.OffHappyPath).
    if type(data) is dict and len(data) == 2:
        kind = data.get("type")
        if kind == "execution/started":
            cell_id = data.get("cellId")
            if type(cell_id) is str:
                return _new_execution_started(cell_id)
        elif kind == "session/ready":
            session_id = data.get("sessionId")
            if type(session_id) is str:
                return _new_session_ready(session_id)
        elif kind == "wait/completed":
            outcome = data.get("outcome")
            if outcome is not None:
                return _new_wait_completed(WaitOutcome._fast(outcome))
        elif kind == "session/closed":
            session_id = data.get("sessionId")
            if type(session_id) is str:
                return _new_session_closed(session_id)
    raise OffHappyPath


def _decode_host_response(data: object, where: str, ctx: DecodeContext) -> HostResponse:
    f = Fields(data, where, ctx)
    kind = f.tag("type", _RESPONSE_KEYS)
    response: HostResponse
    if kind == "session/ready":
        response = SessionReady(f.req_str("sessionId"))
    elif kind == "execution/started":
        response = ExecutionStarted(f.req_str("cellId"))
    elif kind == "wait/completed":
        response = WaitCompleted(WaitOutcome.from_wire(f.raw("outcome"), f"{where}.outcome", ctx))
    else:
        response = SessionClosedResponse(f.req_str("sessionId"))
    f.done(_RESPONSE_KEYS[kind])
    return response


_RESPONSE_ENVELOPE_KEYS = frozenset({"type", "id", "result"})


@attrs.frozen
class OperationResponse:
    """``operation/response``: the answer to the request with the same ``id``."""

    TYPE: ClassVar[str] = HostMessageType.OPERATION_RESPONSE
    id: RequestId
    result: WireOk[HostResponse] | WireError

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "operation/response", "id": self.id, "result": _result_to_wire(self.result)}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> OperationResponse:
        # The happy path of from_fields (see _wire.OffHappyPath).
        if len(d) != 3:
            raise OffHappyPath
        result = _fast_result(d.get("result"), _fast_host_response)
        return _new_operation_response(RequestId(_fast_id(d)), result)

    @classmethod
    def from_fields(cls, f: Fields) -> OperationResponse:
        """Decode from the message's fields."""
        request_id = RequestId(f.req_i64("id"))
        where = f"{f.where}.result"
        inner, ok = _decode_result(f.raw("result"), where, f.ctx)
        result: WireOk[HostResponse] | WireError = (
            WireOk(_decode_host_response(inner.data["value"], f"{where}.value", f.ctx))
            if ok
            else WireError(inner.data["message"])
        )
        f.done(_RESPONSE_ENVELOPE_KEYS)
        return cls(request_id, result)


_new_operation_response = slot_builder(OperationResponse)


@attrs.frozen
class InitialResponse:
    """``execute/initialResponse``: the first observation of the cell started by request ``id``."""

    TYPE: ClassVar[str] = HostMessageType.INITIAL_RESPONSE
    id: RequestId
    result: WireOk[RuntimeResponse] | WireError

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {
            "type": "execute/initialResponse",
            "id": self.id,
            "result": _result_to_wire(self.result),
        }

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> InitialResponse:
        # The happy path of from_fields (see _wire.OffHappyPath).
        if len(d) != 3:
            raise OffHappyPath
        result = _fast_result(d.get("result"), RuntimeResponse._fast)
        return _new_initial_response(RequestId(_fast_id(d)), result)

    @classmethod
    def from_fields(cls, f: Fields) -> InitialResponse:
        """Decode from the message's fields."""
        request_id = RequestId(f.req_i64("id"))
        where = f"{f.where}.result"
        inner, ok = _decode_result(f.raw("result"), where, f.ctx)
        result: WireOk[RuntimeResponse] | WireError = (
            WireOk(RuntimeResponse.from_wire(inner.data["value"], f"{where}.value", f.ctx))
            if ok
            else WireError(inner.data["message"])
        )
        f.done(_RESPONSE_ENVELOPE_KEYS)
        return cls(request_id, result)


_new_initial_response = slot_builder(InitialResponse)

# --------------------------------------------------------------------------- delegates

_DELEGATE_KINDS = {"tool/invoke": None, "notification/send": None}
_DELEGATE_REQUEST_KEYS = frozenset({"type", "id", "sessionId", "request"})


@attrs.frozen
class DelegateRequest:
    """``delegate/request``: a cell calls a tool (:class:`ToolCall`) or notifies."""

    TYPE: ClassVar[str] = HostMessageType.DELEGATE_REQUEST
    id: DelegateRequestId
    session_id: str
    request: ToolCall | Notification

    @property
    def cell_id(self) -> str:
        """The wire cell id the call belongs to."""
        return self.request.cell_id

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        request = self.request
        body = (
            {"type": "tool/invoke", "invocation": request.to_wire()}
            if type(request) is ToolCall
            else request.to_wire()
        )
        return {
            "type": "delegate/request",
            "id": self.id,
            "sessionId": self.session_id,
            "request": body,
        }

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> DelegateRequest:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        inner = d.get("request")
        if len(d) != 4 or type(session_id) is not str or type(inner) is not dict:
            raise OffHappyPath
        kind = inner.get("type")
        request: ToolCall | Notification
        if kind == "tool/invoke" and len(inner) == 2:
            request = ToolCall._fast(inner.get("invocation"))
        elif kind == "notification/send":
            request = Notification._fast(inner)
        else:
            raise OffHappyPath
        return _new_delegate_request(DelegateRequestId(_fast_id(d)), session_id, request)

    @classmethod
    def from_fields(cls, f: Fields) -> DelegateRequest:
        """Decode from the message's fields."""
        delegate_id = DelegateRequestId(f.req_i64("id"))
        session_id = f.req_str("sessionId")
        where = f"{f.where}.request"
        inner = Fields(f.raw("request"), where, f.ctx)
        kind = inner.tag("type", _DELEGATE_KINDS)
        request: ToolCall | Notification
        if kind == "tool/invoke":
            request = ToolCall.from_wire(inner.raw("invocation"), f"{where}.invocation", f.ctx)
            inner.done(frozenset({"type", "invocation"}))
        else:
            request = Notification.from_wire(inner)
        f.done(_DELEGATE_REQUEST_KEYS)
        return cls(delegate_id, session_id, request)


_new_delegate_request = slot_builder(DelegateRequest)


@attrs.frozen
class DelegateCancel:
    """``delegate/cancel``: the host abandoned delegate call ``id``; send no reply for it."""

    TYPE: ClassVar[str] = HostMessageType.DELEGATE_CANCEL
    id: DelegateRequestId

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "delegate/cancel", "id": self.id}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> DelegateCancel:
        # The happy path of from_fields (see _wire.OffHappyPath).
        if len(d) != 2:
            raise OffHappyPath
        return _new_delegate_cancel(DelegateRequestId(_fast_id(d)))

    @classmethod
    def from_fields(cls, f: Fields) -> DelegateCancel:
        """Decode from the message's fields."""
        return cls(DelegateRequestId(_id_only(f)))


_new_delegate_cancel = slot_builder(DelegateCancel)


@attrs.frozen
class ToolResult:
    """A tool's successful result (any JSON)."""

    TYPE: ClassVar[str] = "tool/result"
    result: JSON

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE, "result": self.result}


@attrs.frozen
class NotificationDelivered:
    """Acknowledges a notification (the cell's result waits for this)."""

    TYPE: ClassVar[str] = "notification/delivered"

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": self.TYPE}


DelegateResult = ToolResult | NotificationDelivered

_DELEGATE_RESULT_KEYS = {
    "tool/result": frozenset({"type", "result"}),
    "notification/delivered": frozenset({"type"}),
}


_new_tool_result = slot_builder(ToolResult)
_new_notification_delivered = slot_builder(NotificationDelivered)


def _fast_delegate_result(data: Any) -> DelegateResult:
    # The happy path of the ``ok`` arm of DelegateResponse.from_fields.
    if type(data) is dict:
        kind = data.get("type")
        if kind == "tool/result" and len(data) == 2 and "result" in data:
            return _new_tool_result(data["result"])
        if kind == "notification/delivered" and len(data) == 1:
            return _new_notification_delivered()
    raise OffHappyPath


@attrs.frozen
class DelegateResponse:
    """``delegate/response``: the client's answer to delegate call ``id``."""

    TYPE: ClassVar[str] = ClientMessageType.DELEGATE_RESPONSE
    id: DelegateRequestId
    result: WireOk[DelegateResult] | WireError

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "delegate/response", "id": self.id, "result": _result_to_wire(self.result)}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> DelegateResponse:
        # The happy path of from_fields (see _wire.OffHappyPath).
        if len(d) != 3:
            raise OffHappyPath
        result = _fast_result(d.get("result"), _fast_delegate_result)
        return _new_delegate_response(DelegateRequestId(_fast_id(d)), result)

    @classmethod
    def from_fields(cls, f: Fields) -> DelegateResponse:
        """Decode from the message's fields."""
        delegate_id = DelegateRequestId(f.req_i64("id"))
        where = f"{f.where}.result"
        inner, ok = _decode_result(f.raw("result"), where, f.ctx)
        result: WireOk[DelegateResult] | WireError
        if ok:
            value = Fields(inner.data["value"], f"{where}.value", f.ctx)
            kind = value.tag("type", _DELEGATE_RESULT_KEYS)
            if kind == "tool/result":
                result = WireOk(ToolResult(value.raw("result")))
            else:
                result = WireOk(NotificationDelivered())
            value.done(_DELEGATE_RESULT_KEYS[kind])
        else:
            result = WireError(inner.data["message"])
        f.done(_RESPONSE_ENVELOPE_KEYS)
        return cls(delegate_id, result)


_new_delegate_response = slot_builder(DelegateResponse)

_CELL_CLOSED_KEYS = frozenset({"type", "sessionId", "cellId"})


@attrs.frozen
class CellClosed:
    """``cell/closed``: the cell's lifecycle is over (sent exactly once per cell)."""

    TYPE: ClassVar[str] = HostMessageType.CELL_CLOSED
    session_id: str
    cell_id: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "cell/closed", "sessionId": self.session_id, "cellId": self.cell_id}

    @classmethod
    def _fast(cls, d: dict[str, Any]) -> CellClosed:
        # The happy path of from_fields (see _wire.OffHappyPath).
        session_id = d.get("sessionId")
        cell_id = d.get("cellId")
        if len(d) != 3 or type(session_id) is not str or type(cell_id) is not str:
            raise OffHappyPath
        return _new_cell_closed(session_id, cell_id)

    @classmethod
    def from_fields(cls, f: Fields) -> CellClosed:
        """Decode from the message's fields."""
        closed = cls(f.req_str("sessionId"), f.req_str("cellId"))
        f.done(_CELL_CLOSED_KEYS)
        return closed


_new_cell_closed = slot_builder(CellClosed)

HostMessage = (
    ConnectionReady
    | ConnectionRejected
    | OperationResponse
    | InitialResponse
    | DelegateRequest
    | DelegateCancel
    | CellClosed
)

ClientMessage = (
    ConnectionHello | OperationRequest | OperationCancel | OperationYield | DelegateResponse
)

HOST_MESSAGE_CLASSES: dict[str, Any] = {
    cls.TYPE: cls
    for cls in (
        ConnectionReady,
        ConnectionRejected,
        OperationResponse,
        InitialResponse,
        DelegateRequest,
        DelegateCancel,
        CellClosed,
    )
}

CLIENT_MESSAGE_CLASSES: dict[str, Any] = {
    cls.TYPE: cls
    for cls in (
        ConnectionHello,
        OperationRequest,
        OperationCancel,
        OperationYield,
        DelegateResponse,
    )
}
