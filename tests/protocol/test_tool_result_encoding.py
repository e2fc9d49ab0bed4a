"""The tool-result fast encoder writes what the declared encoder writes, and fails where it fails.

``encode_tool_result`` is the client's path for the commonest frame it sends; it must agree with
``encode_client_message`` of the whole ``delegate/response`` on every value: JSON of any shape,
and the values that cannot be sent (not JSON, NaN, a cycle, too deep, over the frame limit).
The reply the client machine sends for a tool call (``ClientProtocol.complete_tool_call``) is
then byte for byte the declared one, error replies included.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemode_trio.protocol import (
    ClientProtocol,
    DelegateStarted,
    EncodeError,
    encode_client_message,
    encode_host_frame,
)
from codemode_trio.protocol.client_delegates import encode_reply
from codemode_trio.protocol.codec import MAX_FRAME_NESTING, encode_tool_result
from codemode_trio.protocol.framing import MAX_FRAME_BYTES, FrameDecoder
from codemode_trio.protocol.ids import DelegateRequestId, RequestId
from codemode_trio.protocol.messages import (
    ConnectionReady,
    DelegateRequest,
    DelegateResponse,
    ExecutionStarted,
    OperationResponse,
    SessionReady,
    ToolCall,
    ToolResult,
    WireOk,
)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


def declared(delegate_id: int, result: Any) -> bytes | None:
    try:
        return encode_client_message(
            DelegateResponse(DelegateRequestId(delegate_id), WireOk(ToolResult(result)))
        )
    except EncodeError:
        return None


def fast(delegate_id: int, result: Any) -> bytes | None:
    try:
        return encode_tool_result(delegate_id, result)
    except EncodeError:
        return None


def sent_reply(delegate_id: int, result: Any) -> bytes:
    """The payload a client machine sends when tool call ``delegate_id`` returns ``result``."""
    proto = ClientProtocol()
    proto.receive_data(encode_host_frame(ConnectionReady(1, ())))
    proto.claim(proto.open_session("s"))
    proto.receive_data(
        encode_host_frame(OperationResponse(RequestId(1), WireOk(SessionReady("s"))))
    )
    execute = proto.execute("s", "await tools.t()")
    proto.receive_data(
        encode_host_frame(OperationResponse(RequestId(2), WireOk(ExecutionStarted("1"))))
    )
    proto.claim(execute)
    call = ToolCall("1", "t-1", "t", None, "function", None)
    proto.receive_data(
        encode_host_frame(DelegateRequest(DelegateRequestId(delegate_id), "s", call))
    )
    proto.data_to_send()
    while not isinstance(event := proto.next_event(), DelegateStarted):
        pass
    proto.complete_tool_call(event.call, result)
    (payload,) = FrameDecoder().feed(proto.data_to_send())
    return payload


def check(delegate_id: int, result: Any) -> None:
    assert fast(delegate_id, result) == declared(delegate_id, result)
    reply, bulk = encode_reply(int(delegate_id), WireOk(ToolResult(result)))
    assert bulk
    assert sent_reply(int(delegate_id), result) == reply


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), JSON_VALUES)
def test_every_json_value_encodes_to_the_declared_bytes(delegate_id: int, result: Any) -> None:
    check(delegate_id, result)


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _cycle() -> Any:
    items: list[Any] = []
    items.append(items)
    return items


@pytest.mark.parametrize("delegate_id", [DelegateRequestId(7), True, 2**63 - 1, -(2**63)])
def test_an_id_of_any_int_kind_is_written_as_its_number(delegate_id: int) -> None:
    # DelegateRequestId's str() is its repr ("DelegateRequestId(7)"), a bool's is "True".
    check(delegate_id, {"x": 1})


@pytest.mark.parametrize(
    "result",
    [
        {1, 2},
        math.nan,
        {"x": [math.inf]},
        object(),
        _cycle(),
        _nested(MAX_FRAME_NESTING - 3),
        _nested(MAX_FRAME_NESTING - 2),
        [_nested(MAX_FRAME_NESTING - 2), {1, 2}],  # too deep and not JSON: too deep is said
        _nested(2000),  # deeper than Python's recursion limit
        "x" * MAX_FRAME_BYTES,
        "\ud800",
        {"é": "\u2028\x00"},
        (1, 2),
        {3: "int key"},
    ],
    ids=lambda value: type(value).__name__,
)
def test_values_on_the_edge_encode_or_fail_as_declared(result: Any) -> None:
    check(7, result)
