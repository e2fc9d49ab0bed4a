"""Round-trip properties: ``decode(encode(m)) == m`` for every message of the protocol.

Strategies cover both directions and every nested shape. ``complete=True`` restricts generation
to messages that carry every field of the 0.171 schema (the timing fields of runtime
responses), which strict decoding must accept as well.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode_trio.protocol import (
    AudioItem,
    CellClosed,
    CellLimits,
    ClientMessageType,
    ConnectionHello,
    ConnectionReady,
    ConnectionRejected,
    DelegateCancel,
    DelegateRequest,
    DelegateResponse,
    ExecuteRequest,
    ExecutionStarted,
    HostMessageType,
    ImageItem,
    InitialResponse,
    InvalidHello,
    MissingRequiredCapability,
    NoCompatibleVersion,
    Notification,
    NotificationDelivered,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationResponse,
    OperationYield,
    RuntimeResponse,
    SessionClosedResponse,
    SessionReady,
    ShutdownRequest,
    TerminateRequest,
    TextItem,
    ToolCall,
    ToolDefinition,
    ToolResult,
    WaitCompleted,
    WaitOutcome,
    WaitRequest,
    WireError,
    WireOk,
    decode_client_message,
    decode_host_message,
    encode_client_message,
    encode_host_message,
)

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1

small_tuples = {"max_size": 4}
i64s = st.integers(I64_MIN, I64_MAX)
u64s = st.integers(0, U64_MAX)
i32s = st.integers(-(2**31), 2**31 - 1)
nonzero_u32s = st.integers(1, U32_MAX)
# Full Unicode (Hypothesis excludes lone surrogates, which UTF-8 cannot carry).
texts = st.text(max_size=12)
#: Session ids and capabilities are identifiers: never blank (spec §4.1, §6.1).
identifiers = st.tuples(texts, st.characters(categories=("L", "N")), texts).map("".join)
unique_versions = st.lists(nonzero_u32s, min_size=1, unique=True, **small_tuples).map(tuple)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
#: Any JSON value that ``json.dumps(allow_nan=False)`` can write.
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``None`` or a value of ``strategy``."""
    return st.none() | strategy


# --------------------------------------------------------------------------- content

image_details = optional(st.sampled_from(["auto", "low", "high", "original"]))
content_items = st.one_of(
    st.builds(TextItem, texts),
    st.builds(ImageItem, texts, image_details),
    st.builds(AudioItem, texts),
)


@st.composite
def runtime_responses(draw: st.DrawFn, *, complete: bool = False) -> RuntimeResponse:
    """Yielded, Terminated or Result, with or without the timing fields."""
    kind = draw(st.sampled_from(["yielded", "terminated", "result"]))
    timing = u64s if complete else optional(u64s)
    is_result = kind == "result"
    return RuntimeResponse(
        kind,
        draw(texts),
        tuple(draw(st.lists(content_items, max_size=4))),
        draw(optional(texts)) if is_result else None,
        draw(timing) if is_result else None,
        draw(timing),
    )


def wait_outcomes(*, complete: bool = False) -> st.SearchStrategy[WaitOutcome]:
    """LiveCell or MissingCell around any runtime response."""
    return st.builds(WaitOutcome, st.booleans(), runtime_responses(complete=complete))


tool_kinds = st.sampled_from(["function", "freeform"])


@st.composite
def tool_definitions(draw: st.DrawFn) -> ToolDefinition:
    """A tool definition with schemas, namespace and (sometimes) a distinct ``tool_name``."""
    name = draw(texts)
    # ``tool_name`` defaults to ``name``; an explicit one equal to ``name`` or empty is covered
    # by the dedicated tests at the end of this module.
    tool_name = draw(optional(texts.filter(lambda value: value not in ("", name))))
    return ToolDefinition(
        name,
        draw(texts),
        draw(json_values),
        draw(json_values),
        draw(tool_kinds),
        draw(optional(texts)),
        tool_name,
    )


def tool_calls(*, strict: bool = True) -> st.SearchStrategy[ToolCall]:
    """A tool invocation with arbitrary JSON input (any ``tool_kind`` when tolerant)."""
    return st.builds(
        ToolCall,
        texts,
        texts,
        texts,
        optional(texts),
        tool_kinds if strict else tool_kinds | texts,
        json_values,
    )


notifications = st.builds(Notification, texts, texts, texts)


def wire_results(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``WireOk`` around ``values`` or a ``WireError``."""
    return st.builds(WireOk, values) | st.builds(WireError, texts)


# --------------------------------------------------------------------------- host messages

reject_reasons = st.one_of(
    st.builds(NoCompatibleVersion, unique_versions),
    st.builds(MissingRequiredCapability, identifiers),
    st.builds(InvalidHello, texts),
)


def host_responses(*, complete: bool = False) -> st.SearchStrategy[Any]:
    """The four ``operation/response`` payloads."""
    return st.one_of(
        st.builds(SessionReady, identifiers),
        st.builds(ExecutionStarted, texts),
        st.builds(WaitCompleted, wait_outcomes(complete=complete)),
        st.builds(SessionClosedResponse, identifiers),
    )


def host_messages_by_type(*, complete: bool = False) -> dict[str, st.SearchStrategy[Any]]:
    """One strategy per host-to-client message type."""
    return {
        "connection/ready": st.builds(
            ConnectionReady,
            nonzero_u32s,
            st.lists(identifiers, unique=True, **small_tuples).map(tuple),
            optional(texts),
        ),
        "connection/rejected": st.builds(ConnectionRejected, reject_reasons),
        "operation/response": st.builds(
            OperationResponse, i64s, wire_results(host_responses(complete=complete))
        ),
        "execute/initialResponse": st.builds(
            InitialResponse, i64s, wire_results(runtime_responses(complete=complete))
        ),
        "delegate/request": st.builds(
            DelegateRequest, i64s, identifiers, tool_calls(strict=complete) | notifications
        ),
        "delegate/cancel": st.builds(DelegateCancel, i64s),
        "cell/closed": st.builds(CellClosed, identifiers, texts),
    }


# --------------------------------------------------------------------------- client messages

cell_limits = st.builds(CellLimits, optional(u64s), optional(u64s))

host_requests = st.one_of(
    st.builds(
        OpenSessionRequest,
        identifiers,
        optional(cell_limits),
        optional(st.sampled_from(["client", "server"])),
    ),
    st.builds(
        ExecuteRequest,
        identifiers,
        texts,
        texts,
        st.lists(tool_definitions(), max_size=3).map(tuple),
        optional(u64s),
        optional(i32s),
        optional(u64s),
    ),
    st.builds(WaitRequest, identifiers, texts, u64s, optional(u64s)),
    st.builds(TerminateRequest, identifiers, texts, optional(u64s)),
    st.builds(ShutdownRequest, identifiers),
)

delegate_results = st.builds(ToolResult, json_values) | st.builds(NotificationDelivered)


@st.composite
def hellos(draw: st.DrawFn) -> ConnectionHello:
    """A hello the host accepts: unique versions, unique non-blank capabilities, no overlap."""
    required = draw(st.lists(identifiers, unique=True, **small_tuples))
    optional_ = draw(
        st.lists(identifiers.filter(lambda c: c not in required), unique=True, **small_tuples)
    )
    return ConnectionHello(draw(unique_versions), tuple(required), tuple(optional_))


def client_messages_by_type() -> dict[str, st.SearchStrategy[Any]]:
    """One strategy per client-to-host message type."""
    return {
        "connection/hello": hellos(),
        "operation/request": st.builds(OperationRequest, i64s, host_requests),
        "operation/cancel": st.builds(OperationCancel, i64s),
        "operation/yield": st.builds(OperationYield, i64s),
        "delegate/response": st.builds(DelegateResponse, i64s, wire_results(delegate_results)),
    }


# --------------------------------------------------------------------------- properties

ROUND_TRIP = settings(max_examples=200, deadline=None)

HOST_TYPES = sorted(host_messages_by_type())
CLIENT_TYPES = sorted(client_messages_by_type())
TOLERANT_HOST = host_messages_by_type(complete=False)
COMPLETE_HOST = host_messages_by_type(complete=True)
CLIENT = client_messages_by_type()


def test_strategies_cover_every_message_type() -> None:
    assert set(HOST_TYPES) == {str(member) for member in HostMessageType}
    assert set(CLIENT_TYPES) == {str(member) for member in ClientMessageType}


@pytest.mark.parametrize("kind", HOST_TYPES)
@ROUND_TRIP
@given(data=st.data())
def test_host_message_round_trips_tolerantly(kind: str, data: st.DataObject) -> None:
    message = data.draw(TOLERANT_HOST[kind])
    payload = encode_host_message(message)
    decoded = decode_host_message(payload)
    assert decoded == message
    assert encode_host_message(decoded) == payload


@pytest.mark.parametrize("kind", HOST_TYPES)
@ROUND_TRIP
@given(data=st.data())
def test_complete_host_message_round_trips_strictly(kind: str, data: st.DataObject) -> None:
    message = data.draw(COMPLETE_HOST[kind])
    payload = encode_host_message(message)
    decoded = decode_host_message(payload, strict=True)
    assert decoded == message
    assert encode_host_message(decoded) == payload


@pytest.mark.parametrize("strict", [False, True], ids=["tolerant", "strict"])
@pytest.mark.parametrize("kind", CLIENT_TYPES)
@ROUND_TRIP
@given(data=st.data())
def test_client_message_round_trips(kind: str, strict: bool, data: st.DataObject) -> None:
    message = data.draw(CLIENT[kind])
    payload = encode_client_message(message)
    decoded = decode_client_message(payload, strict=strict)
    assert decoded == message
    assert encode_client_message(decoded) == payload


@pytest.mark.parametrize("value", [I64_MIN, -1, 0, 1, I64_MAX])
def test_ids_round_trip_at_the_i64_bounds(value: int) -> None:
    for host in (DelegateCancel(value), OperationResponse(value, WireError("e"))):
        assert decode_host_message(encode_host_message(host), strict=True).id == value
    for client in (OperationCancel(value), OperationYield(value)):
        assert decode_client_message(encode_client_message(client), strict=True).id == value


@ROUND_TRIP
@given(response=runtime_responses(complete=False))
def test_runtime_response_without_timing_fields_omits_them_on_the_wire(
    response: RuntimeResponse,
) -> None:
    body = next(iter(response.to_wire().values()))
    assert ("code_mode_host_duration_ns" in body) == (
        response.code_mode_host_duration_ns is not None
    )
    assert ("result_buffered_for_ns" in body) == (response.result_buffered_for_ns is not None)
    assert ("error_text" in body) == (response.kind == "result")


def _execute_with(tool: ToolDefinition) -> OperationRequest:
    return OperationRequest(1, ExecuteRequest("s1", "text(1)", enabled_tools=(tool,)))


def test_empty_tool_name_is_sent_verbatim() -> None:
    # ``tool_name`` is opaque and echoed back by the host (spec §6.2); an empty one is legal.
    message = _execute_with(ToolDefinition("echo", "echo tool", tool_name=""))
    wire = json.loads(encode_client_message(message))
    assert wire["request"]["request"]["enabled_tools"][0]["tool_name"] == {
        "name": "",
        "namespace": None,
    }
    assert decode_client_message(encode_client_message(message), strict=True) == message


def test_tool_name_equal_to_name_round_trips_to_an_equal_definition() -> None:
    message = _execute_with(ToolDefinition("echo", "echo tool", tool_name="echo"))
    assert decode_client_message(encode_client_message(message), strict=True) == message
