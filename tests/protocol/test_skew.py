"""Version skew: tolerant decoding absorbs newer and older hosts, strict decoding does not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from codemode_trio.protocol import (
    CodeModeError,
    DelegateRequest,
    HostProtocolViolation,
    InitialResponse,
    RuntimeResponse,
    TextItem,
    ToolCall,
    WireOk,
    decode_host_message,
    encode_host_message,
    unknown_field_counts,
)

RESULT_0171: dict[str, Any] = {
    "type": "execute/initialResponse",
    "id": 3,
    "result": {
        "status": "ok",
        "value": {
            "Result": {
                "cell_id": "2",
                "content_items": [{"type": "input_text", "text": '{"echo":{"a":1}}'}],
                "error_text": None,
                "result_buffered_for_ns": 0,
                "code_mode_host_duration_ns": 5164179,
            }
        },
    },
}

INVOKE_0171: dict[str, Any] = {
    "type": "delegate/request",
    "id": 1,
    "sessionId": "s1",
    "request": {
        "type": "tool/invoke",
        "invocation": {
            "cell_id": "2",
            "runtime_tool_call_id": "tool-1",
            "tool_name": {"name": "echo", "namespace": None},
            "tool_kind": "function",
            "input": {"a": 1},
        },
    },
}


def _with_extra(message: dict[str, Any], path: tuple[Any, ...], key: str) -> bytes:
    copy = json.loads(json.dumps(message))
    target = copy
    for step in path:
        target = target[step]
    target[key] = {"added": "by a newer host"}
    return json.dumps(copy, separators=(",", ":")).encode()


CONTENT_ITEM = ("result", "value", "Result", "content_items", 0)
SKEWED = [
    pytest.param(RESULT_0171, (), "x_new_top", "execute/initialResponse", id="top-level"),
    pytest.param(
        RESULT_0171,
        ("result", "value", "Result"),
        "x_new_runtime",
        "execute/initialResponse.result.value.Result",
        id="runtime-response",
    ),
    pytest.param(
        RESULT_0171,
        CONTENT_ITEM,
        "x_new_item",
        "execute/initialResponse.result.value.Result.content_items[0]",
        id="content-item",
    ),
    pytest.param(
        INVOKE_0171,
        ("request", "invocation"),
        "x_new_invocation",
        "delegate/request.request.invocation",
        id="invocation",
    ),
    pytest.param(
        INVOKE_0171,
        ("request", "invocation", "tool_name"),
        "x_new_tool_name",
        "delegate/request.request.invocation.tool_name",
        id="tool-name",
    ),
]


@pytest.mark.parametrize(("message", "path", "key", "where"), SKEWED)
def test_unknown_field_is_ignored_reported_once_and_counted_when_tolerant(
    message: dict[str, Any], path: tuple[Any, ...], key: str, where: str
) -> None:
    payload = _with_extra(message, path, key)
    reports: list[tuple[str, tuple[str, ...]]] = []
    before = unknown_field_counts[(where, key)]

    decoded = decode_host_message(payload, on_unknown=lambda w, names: reports.append((w, names)))

    assert decoded == decode_host_message(json.dumps(message).encode(), strict=True)
    assert reports == [(where, (key,))]
    assert unknown_field_counts[(where, key)] == before + 1
    # The unknown field is dropped: re-encoding yields the 0.171 frame.
    assert json.loads(encode_host_message(decoded)) == message


@pytest.mark.parametrize(("message", "path", "key", "where"), SKEWED)
def test_unknown_field_fails_strict_decoding(
    message: dict[str, Any], path: tuple[Any, ...], key: str, where: str
) -> None:
    payload = _with_extra(message, path, key)
    reports: list[Any] = []
    before = unknown_field_counts[(where, key)]
    with pytest.raises(CodeModeError, match=f"unknown field `{key}`") as info:
        decode_host_message(payload, strict=True, on_unknown=lambda *args: reports.append(args))
    assert isinstance(info.value, HostProtocolViolation)
    assert where in str(info.value)
    assert reports == []
    assert unknown_field_counts[(where, key)] == before


def test_several_unknown_fields_in_one_object_are_reported_in_one_call() -> None:
    copy = json.loads(json.dumps(RESULT_0171))
    copy["x_one"] = 1
    copy["x_two"] = 2
    reports: list[tuple[str, tuple[str, ...]]] = []
    decode_host_message(json.dumps(copy).encode(), on_unknown=lambda *args: reports.append(args))
    assert reports == [("execute/initialResponse", ("x_one", "x_two"))]


def test_result_without_timing_fields_from_0_150_decodes_tolerantly_with_none() -> None:
    old = json.loads(json.dumps(RESULT_0171))
    body = old["result"]["value"]["Result"]
    del body["code_mode_host_duration_ns"]
    del body["result_buffered_for_ns"]
    payload = json.dumps(old, separators=(",", ":")).encode()

    message = decode_host_message(payload)

    assert message == InitialResponse(
        3,
        WireOk(RuntimeResponse("result", "2", (TextItem('{"echo":{"a":1}}'),), None, None, None)),
    )
    assert isinstance(message, InitialResponse)
    assert isinstance(message.result, WireOk)
    assert message.result.value.code_mode_host_duration_ns is None
    assert message.result.value.result_buffered_for_ns is None
    assert encode_host_message(message) == payload
    with pytest.raises(HostProtocolViolation, match="missing field `code_mode_host_duration_ns`"):
        decode_host_message(payload, strict=True)


def test_result_from_0_160_lacks_only_the_buffered_time() -> None:
    old = json.loads(json.dumps(RESULT_0171))
    del old["result"]["value"]["Result"]["result_buffered_for_ns"]
    payload = json.dumps(old, separators=(",", ":")).encode()

    message = decode_host_message(payload)

    assert isinstance(message, InitialResponse)
    assert isinstance(message.result, WireOk)
    assert message.result.value.code_mode_host_duration_ns == 5164179
    assert message.result.value.result_buffered_for_ns is None
    assert encode_host_message(message) == payload
    with pytest.raises(HostProtocolViolation, match="missing field `result_buffered_for_ns`"):
        decode_host_message(payload, strict=True)


def test_tool_call_without_namespace_decodes_tolerantly() -> None:
    old = json.loads(json.dumps(INVOKE_0171))
    del old["request"]["invocation"]["tool_name"]["namespace"]
    message = decode_host_message(json.dumps(old).encode())
    assert isinstance(message, DelegateRequest)
    assert message.request == ToolCall("2", "tool-1", "echo", None, "function", {"a": 1})
    with pytest.raises(HostProtocolViolation, match="missing field `namespace`"):
        decode_host_message(json.dumps(old).encode(), strict=True)


@pytest.mark.parametrize("strict", [False, True], ids=["tolerant", "strict"])
def test_unknown_message_type_fails_in_both_modes(strict: bool) -> None:
    reports: list[Any] = []
    payload = b'{"type":"cell/receipt","sessionId":"s1","cellId":"2"}'
    with pytest.raises(HostProtocolViolation, match="unknown variant `cell/receipt`"):
        decode_host_message(payload, strict=strict, on_unknown=lambda *args: reports.append(args))
    assert reports == []
