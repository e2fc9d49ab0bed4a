"""Malformed frames raise the right ``ProtocolViolation`` subclass and nothing else.

``decode_host_message`` blames the host (:class:`HostProtocolViolation`);
``decode_client_message`` blames the client (:class:`ClientProtocolViolation`). Every entry of
the catalogue is fatal to the reference host (spec §2, §3, §15).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode_trio.protocol import (
    ClientProtocolViolation,
    DelegateResponse,
    EncodeError,
    HostProtocolViolation,
    ToolResult,
    WireOk,
    decode_client_message,
    decode_host_message,
    encode_client_message,
    encode_host_message,
)

BOTH = ("tolerant", "strict")
STRICT = ("strict",)

HOST_OK = '{"type":"cell/closed","sessionId":"s1","cellId":"1"}'
CLIENT_OK = '{"type":"operation/cancel","id":3}'

DECODERS = {
    "host": (decode_host_message, HostProtocolViolation),
    "client": (decode_client_message, ClientProtocolViolation),
}


def _initial(value: str) -> str:
    return (
        '{"type":"execute/initialResponse","id":2,"result":{"status":"ok","value":' + value + "}}"
    )


RESULT_BODY = (
    '"cell_id":"2","content_items":[{"type":"input_text","text":"hi"}],'
    '"error_text":null,"result_buffered_for_ns":0,"code_mode_host_duration_ns":5'
)


def _result(body: str = RESULT_BODY) -> str:
    return _initial('{"Result":{' + body + "}}")


def _invoke(invocation: str) -> str:
    return (
        '{"type":"delegate/request","id":1,"sessionId":"s1",'
        '"request":{"type":"tool/invoke","invocation":{' + invocation + "}}}"
    )


INVOCATION = (
    '"cell_id":"2","runtime_tool_call_id":"tool-1",'
    '"tool_name":{"name":"echo","namespace":null},"tool_kind":"function","input":{"a":1}'
)


def _tool_result(value: str) -> str:
    return (
        '{"type":"delegate/response","id":1,"result":{"status":"ok","value":'
        '{"type":"tool/result","result":' + value + "}}}"
    )


def _request(request: str) -> str:
    return '{"type":"operation/request","id":1,"request":' + request + "}"


def _hello(versions: str, required: str, optional: str) -> str:
    return (
        '{"type":"connection/hello","supportedVersions":'
        + versions
        + ',"requiredCapabilities":'
        + required
        + ',"optionalCapabilities":'
        + optional
        + "}"
    )


DEEP_ARRAY = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000


def case(label: str, side: str, payload: str | bytes, modes: tuple[str, ...] = BOTH) -> Any:
    """One catalogue entry: ``payload`` must be rejected by ``side``'s decoder in ``modes``."""
    data = payload.encode() if isinstance(payload, str) else payload
    return pytest.param(side, data, modes, id=f"{side}-{label}")


def both_sides(label: str, payload: str | bytes, modes: tuple[str, ...] = BOTH) -> list[Any]:
    """The same entry for both decoders."""
    return [case(label, "host", payload, modes), case(label, "client", payload, modes)]


CATALOGUE = [
    # Not UTF-8 / not JSON / not exactly one value.
    *both_sides("invalid-utf8", b'{"type":"cell/closed","sessionId":"\xff","cellId":"1"}'),
    *both_sides("utf8-encoded-surrogate", b'{"type":"delegate/cancel","id":1,"x":"\xed\xa0\x80"}'),
    *both_sides("truncated-utf8", b'{"type":"cell/closed","sessionId":"\xe2\x82","cellId":"1"}'),
    *both_sides("empty", b""),
    *both_sides("whitespace-only", b" \n\t "),
    *both_sides("unterminated-object", '{"type":"delegate/cancel","id":1'),
    *both_sides("single-quotes", "{'type':'delegate/cancel','id':1}"),
    *both_sides("trailing-comma", '{"type":"delegate/cancel","id":1,}'),
    *both_sides("non-string-key", '{"type":"delegate/cancel",1:1}'),
    *both_sides("comment", '{"type":"delegate/cancel","id":1}//'),
    *both_sides("trailing-garbage", '{"type":"delegate/cancel","id":1} x'),
    *both_sides("two-values", '{"type":"delegate/cancel","id":1}{"type":"delegate/cancel","id":2}'),
    *both_sides("nul-after-value", b'{"type":"delegate/cancel","id":1}\x00'),
    # A JSON value that is not an object.
    *both_sides("top-level-array", '[{"type":"delegate/cancel","id":1}]'),
    *both_sides("top-level-string", '"delegate/cancel"'),
    *both_sides("top-level-number", "1"),
    *both_sides("top-level-null", "null"),
    *both_sides("top-level-true", "true"),
    # Non-standard number literals.
    case("nan-id", "host", '{"type":"delegate/cancel","id":NaN}'),
    case("infinity-id", "host", '{"type":"delegate/cancel","id":Infinity}'),
    case("minus-infinity-id", "client", '{"type":"operation/cancel","id":-Infinity}'),
    case("nan-tool-result", "client", _tool_result("NaN")),
    case("infinity-tool-input", "host", _invoke(INVOCATION.replace('{"a":1}', "[Infinity]"))),
    # Tags.
    *both_sides("missing-type", '{"id":1}'),
    *both_sides("numeric-type", '{"type":1,"id":1}'),
    *both_sides("null-type", '{"type":null,"id":1}'),
    *both_sides("unknown-type", '{"type":"zzz/unknown","id":1}'),
    *both_sides("type-case-mismatch", '{"type":"Delegate/Cancel","id":1}'),
    case("client-type-sent-by-host", "host", CLIENT_OK),
    case("host-type-sent-by-client", "client", HOST_OK),
    case(
        "hello-sent-by-host",
        "host",
        '{"type":"connection/hello","supportedVersions":[1],'
        '"requiredCapabilities":[],"optionalCapabilities":[]}',
    ),
    case("unknown-method", "client", _request('{"method":"session/zzz","sessionId":"s1"}')),
    case("missing-method", "client", _request('{"sessionId":"s1"}')),
    case(
        "request-tagged-with-type-not-method",
        "client",
        _request('{"type":"session/shutdown","sessionId":"s1"}'),
    ),
    case(
        "unknown-status",
        "host",
        '{"type":"operation/response","id":1,"result":'
        '{"status":"pending","value":{"type":"session/ready","sessionId":"s1"}}}',
    ),
    case(
        "unknown-status-client",
        "client",
        '{"type":"delegate/response","id":1,"result":'
        '{"status":"Ok","value":{"type":"notification/delivered"}}}',
    ),
    case(
        "missing-status",
        "host",
        '{"type":"operation/response","id":1,"result":'
        '{"value":{"type":"session/ready","sessionId":"s1"}}}',
    ),
    case(
        "unknown-response-type",
        "host",
        '{"type":"operation/response","id":1,"result":'
        '{"status":"ok","value":{"type":"session/zzz","sessionId":"s1"}}}',
    ),
    case("unknown-runtime-variant", "host", _initial('{"Running":{' + RESULT_BODY + "}}")),
    case("lowercase-runtime-variant", "host", _initial('{"result":{' + RESULT_BODY + "}}")),
    case(
        "two-runtime-variants",
        "host",
        _initial('{"Result":{' + RESULT_BODY + '},"Yielded":{' + RESULT_BODY + "}}"),
    ),
    case("empty-runtime-response", "host", _initial("{}")),
    case("runtime-response-as-list", "host", _initial("[]")),
    case(
        "unknown-wait-outcome",
        "host",
        '{"type":"operation/response","id":1,"result":'
        '{"status":"ok","value":{"type":"wait/completed","outcome":'
        '{"DeadCell":{"Result":{' + RESULT_BODY + "}}}}}}",
    ),
    case("unknown-content-item", "host", _result(RESULT_BODY.replace("input_text", "output_text"))),
    case(
        "unknown-delegate-kind",
        "host",
        '{"type":"delegate/request","id":1,"sessionId":"s1",'
        '"request":{"type":"tool/receipt","cellId":"1"}}',
    ),
    case(
        "unknown-delegate-result",
        "client",
        '{"type":"delegate/response","id":1,"result":'
        '{"status":"ok","value":{"type":"tool/receipt"}}}',
    ),
    case(
        "unknown-reject-reason",
        "host",
        '{"type":"connection/rejected","reason":{"type":"tooBusy","message":"x"}}',
    ),
    case(
        "unknown-tool-kind",
        "client",
        _request(
            '{"method":"session/execute","sessionId":"s1","request":{"tool_call_id":"c",'
            '"enabled_tools":[{"name":"a","tool_name":{"name":"a","namespace":null},'
            '"description":"","kind":"custom","input_schema":null,"output_schema":null}],'
            '"source":"","yield_time_ms":null,"max_output_tokens":null}}'
        ),
    ),
    case(
        "unknown-output-truncation",
        "client",
        _request('{"method":"session/open","sessionId":"s1","outputTruncation":"zzz"}'),
    ),
    # Wrong JSON types for ids.
    case("string-id", "host", '{"type":"delegate/cancel","id":"1"}'),
    case("float-id", "host", '{"type":"delegate/cancel","id":1.0}'),
    case("exponent-id", "host", '{"type":"delegate/cancel","id":1e2}'),
    case("bool-id", "host", '{"type":"delegate/cancel","id":true}'),
    case("null-id", "host", '{"type":"delegate/cancel","id":null}'),
    case("id-above-i64", "host", '{"type":"delegate/cancel","id":9223372036854775808}'),
    case("id-below-i64", "host", '{"type":"delegate/cancel","id":-9223372036854775809}'),
    case("huge-id", "host", '{"type":"delegate/cancel","id":' + "9" * 5000 + "}"),
    case("string-request-id", "client", '{"type":"operation/cancel","id":"3"}'),
    case("float-request-id", "client", '{"type":"operation/cancel","id":3.0}'),
    case("bool-request-id", "client", '{"type":"operation/yield","id":false}'),
    case("request-id-above-i64", "client", '{"type":"operation/cancel","id":9223372036854775808}'),
    # Wrong JSON types elsewhere.
    case("numeric-session-id", "host", '{"type":"cell/closed","sessionId":1,"cellId":"1"}'),
    case(
        "numeric-cell-id",
        "client",
        _request(
            '{"method":"session/wait","sessionId":"s1","request":{"cell_id":1,"yield_time_ms":0}}'
        ),
    ),
    case(
        "negative-yield",
        "client",
        _request(
            '{"method":"session/wait","sessionId":"s1","request":'
            '{"cell_id":"1","yield_time_ms":-1}}'
        ),
    ),
    case(
        "float-duration",
        "host",
        _result(
            RESULT_BODY.replace(
                '"code_mode_host_duration_ns":5', '"code_mode_host_duration_ns":5.0'
            )
        ),
    ),
    case(
        "duration-above-u64",
        "host",
        _result(
            RESULT_BODY.replace(
                '"code_mode_host_duration_ns":5',
                '"code_mode_host_duration_ns":18446744073709551616',
            )
        ),
    ),
    case(
        "max-output-tokens-above-i32",
        "client",
        _request(
            '{"method":"session/execute","sessionId":"s1","request":{"tool_call_id":"c",'
            '"enabled_tools":[],"source":"","yield_time_ms":null,"max_output_tokens":2147483648}}'
        ),
    ),
    case(
        "null-enabled-tools",
        "client",
        _request(
            '{"method":"session/execute","sessionId":"s1","request":{"tool_call_id":"c",'
            '"enabled_tools":null,"source":"","yield_time_ms":null,"max_output_tokens":null}}'
        ),
    ),
    case(
        "zero-version",
        "client",
        '{"type":"connection/hello","supportedVersions":[0],'
        '"requiredCapabilities":[],"optionalCapabilities":[]}',
    ),
    case(
        "version-above-u32",
        "client",
        '{"type":"connection/hello","supportedVersions":'
        '[4294967296],"requiredCapabilities":[],"optionalCapabilities":[]}',
    ),
    case(
        "numeric-capability",
        "host",
        '{"type":"connection/ready","selectedVersion":1,"capabilities":[1]}',
    ),
    case(
        "content-items-object",
        "host",
        _result(RESULT_BODY.replace('[{"type":"input_text","text":"hi"}]', "{}")),
    ),
    case(
        "content-item-string",
        "host",
        _result(RESULT_BODY.replace('{"type":"input_text","text":"hi"}', '"hi"')),
    ),
    case("numeric-text", "host", _result(RESULT_BODY.replace('"text":"hi"', '"text":1'))),
    case("request-as-list", "client", _request("[]")),
    case("result-as-string", "host", '{"type":"operation/response","id":1,"result":"ok"}'),
    case(
        "numeric-error-message",
        "host",
        '{"type":"operation/response","id":1,"result":{"status":"error","message":1}}',
    ),
    case(
        "error-text-number",
        "host",
        _result(RESULT_BODY.replace('"error_text":null', '"error_text":1')),
    ),
    # Missing required fields (fatal in both modes).
    case("missing-id", "host", '{"type":"delegate/cancel"}'),
    case("missing-cell-id", "host", '{"type":"cell/closed","sessionId":"s1"}'),
    case("missing-result", "host", '{"type":"operation/response","id":1}'),
    case(
        "missing-ok-value", "host", '{"type":"operation/response","id":1,"result":{"status":"ok"}}'
    ),
    case(
        "missing-error-message",
        "host",
        '{"type":"operation/response","id":1,"result":{"status":"error"}}',
    ),
    case("missing-runtime-cell-id", "host", _result(RESULT_BODY.replace('"cell_id":"2",', ""))),
    case(
        "missing-content-items",
        "host",
        _result(
            '"cell_id":"2","error_text":null,"result_buffered_for_ns":0,'
            '"code_mode_host_duration_ns":5'
        ),
    ),
    case(
        "missing-invocation",
        "host",
        '{"type":"delegate/request","id":1,"sessionId":"s1","request":{"type":"tool/invoke"}}',
    ),
    case(
        "missing-tool-name",
        "host",
        _invoke(INVOCATION.replace('"tool_name":{"name":"echo","namespace":null},', "")),
    ),
    case(
        "missing-notification-text",
        "host",
        '{"type":"delegate/request","id":7,'
        '"sessionId":"s1","request":{"type":"notification/send","callId":"c","cellId":"5"}}',
    ),
    case("missing-selected-version", "host", '{"type":"connection/ready","capabilities":[]}'),
    case("missing-reject-reason", "host", '{"type":"connection/rejected"}'),
    case(
        "missing-optional-capabilities",
        "client",
        '{"type":"connection/hello","supportedVersions":[1],"requiredCapabilities":[]}',
    ),
    case(
        "missing-wait-yield",
        "client",
        _request('{"method":"session/wait","sessionId":"s1","request":{"cell_id":"1"}}'),
    ),
    case(
        "null-wait-yield",
        "client",
        _request(
            '{"method":"session/wait","sessionId":"s1","request":'
            '{"cell_id":"1","yield_time_ms":null}}'
        ),
    ),
    case("missing-session-id", "client", _request('{"method":"session/shutdown"}')),
    case(
        "missing-source",
        "client",
        _request(
            '{"method":"session/execute","sessionId":"s1","request":{"tool_call_id":"c",'
            '"enabled_tools":[]}}'
        ),
    ),
    case(
        "missing-tool-result",
        "client",
        '{"type":"delegate/response","id":1,"result":'
        '{"status":"ok","value":{"type":"tool/result"}}}',
    ),
    # Missing fields the 0.171 schema requires but older hosts omit: fatal only when strict.
    case(
        "missing-host-duration",
        "host",
        _result(RESULT_BODY.replace(',"code_mode_host_duration_ns":5', "")),
        STRICT,
    ),
    case(
        "missing-result-buffered",
        "host",
        _result(RESULT_BODY.replace(',"result_buffered_for_ns":0', "")),
        STRICT,
    ),
    case(
        "missing-error-text", "host", _result(RESULT_BODY.replace('"error_text":null,', "")), STRICT
    ),
    case("missing-namespace", "host", _invoke(INVOCATION.replace(',"namespace":null', "")), STRICT),
    case("missing-tool-input", "host", _invoke(INVOCATION.replace(',"input":{"a":1}', "")), STRICT),
    # Values the host's own types reject while decoding (spec §4.1, §6.1, §15).
    case("hello-without-versions", "client", _hello("[]", "[]", "[]"), STRICT),
    case("hello-duplicate-version", "client", _hello("[1,1]", "[]", "[]"), STRICT),
    case("hello-blank-capability", "client", _hello("[1]", "[]", '[" "]'), STRICT),
    case("hello-duplicate-capability", "client", _hello("[1]", '["a","a"]', "[]"), STRICT),
    case("hello-required-and-optional", "client", _hello("[1]", '["a"]', '["a"]'), STRICT),
    case(
        "empty-session-id", "client", _request('{"method":"session/open","sessionId":""}'), STRICT
    ),
    case(
        "blank-session-id", "client", _request('{"method":"session/open","sessionId":" "}'), STRICT
    ),
    # Nesting far beyond any parser's limit.
    case("deep-array-tool-input", "host", _invoke(INVOCATION.replace('{"a":1}', DEEP_ARRAY))),
    case("deep-object-tool-input", "host", _invoke(INVOCATION.replace('{"a":1}', DEEP_OBJECT))),
    case("deep-array-tool-result", "client", _tool_result(DEEP_ARRAY)),
    case("deep-object-tool-result", "client", _tool_result(DEEP_OBJECT)),
    *both_sides("deep-top-level", DEEP_ARRAY),
    # Duplicate keys (serde: ``duplicate field``).
    case("duplicate-id", "host", '{"type":"delegate/cancel","id":1,"id":2}', STRICT),
    case(
        "duplicate-type",
        "client",
        '{"type":"operation/cancel","type":"operation/yield","id":1}',
        STRICT,
    ),
    case("duplicate-nested-key", "host", _result(RESULT_BODY + ',"cell_id":"3"'), STRICT),
    case("duplicate-key-in-tool-result", "client", _tool_result('{"a":1,"a":2}'), STRICT),
]


@pytest.mark.parametrize(("side", "payload", "modes"), CATALOGUE)
def test_malformed_payload_raises_the_peers_protocol_violation(
    side: str, payload: bytes, modes: tuple[str, ...]
) -> None:
    decode, violation = DECODERS[side]
    for mode in modes:
        with pytest.raises(violation) as info:
            decode(payload, strict=mode == "strict")
        assert type(info.value) is violation, mode
        assert str(info.value), mode


def test_catalogue_entries_are_valid_once_the_defect_is_removed() -> None:
    # Guard against a catalogue entry failing for an unintended reason (a typo in the base).
    assert decode_host_message(HOST_OK.encode(), strict=True)
    assert decode_client_message(CLIENT_OK.encode(), strict=True)
    assert decode_host_message(_result().encode(), strict=True)
    assert decode_host_message(_invoke(INVOCATION).encode(), strict=True)
    assert decode_client_message(_tool_result('{"a":1}').encode(), strict=True)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(
            b'{"type":"cell/closed","sessionId":"\\ud800","cellId":"1"}', id="lone-surrogate"
        ),
        pytest.param(_invoke(INVOCATION.replace('{"a":1}', "1e400")).encode(), id="overflow-float"),
    ],
)
def test_payload_that_decodes_can_be_re_encoded(payload: bytes) -> None:
    # Either the decoder refuses the value (serde_json rejects lone surrogate escapes) or the
    # decoded message must survive encoding; accepting what cannot be sent back breaks replay.
    try:
        message = decode_host_message(payload)
    except HostProtocolViolation:
        return
    encode_host_message(message)


def _deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _circular() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="infinity"),
        pytest.param({1, 2}, id="set"),
        pytest.param(object(), id="object"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param({(1, 2): 3}, id="tuple-key"),
        pytest.param(_circular(), id="circular"),
        pytest.param(10**5000, id="int-over-4300-digits"),
        pytest.param("\ud800", id="lone-surrogate"),
        pytest.param(_deep_list(100_000), id="deep-nesting"),
    ],
)
def test_unencodable_tool_result_raises_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError):
        encode_client_message(DelegateResponse(1, WireOk(ToolResult(value))))


# --------------------------------------------------------------------------- fuzzing

SPEC_EXAMPLES = json.loads(
    (Path(__file__).parent / "data" / "spec_examples.json").read_text(encoding="utf-8")
)
HOST_SEEDS = [json.loads(e["json"]) for e in SPEC_EXAMPLES if e["direction"] == "<<"]
CLIENT_SEEDS = [json.loads(e["json"]) for e in SPEC_EXAMPLES if e["direction"] == ">>"]

PROTOCOL_WORDS = sorted(
    {
        "type",
        "id",
        "method",
        "status",
        "value",
        "message",
        "result",
        "request",
        "reason",
        "sessionId",
        "cellId",
        "callId",
        "text",
        "outcome",
        "invocation",
        "input",
        "cell_id",
        "content_items",
        "error_text",
        "code_mode_host_duration_ns",
        "result_buffered_for_ns",
        "tool_name",
        "name",
        "namespace",
        "tool_kind",
        "runtime_tool_call_id",
        "Yielded",
        "Result",
        "Terminated",
        "LiveCell",
        "MissingCell",
        "ok",
        "error",
        "supportedVersions",
        "requiredCapabilities",
        "optionalCapabilities",
        "selectedVersion",
        "capabilities",
        "enabled_tools",
        "source",
        "tool_call_id",
        "yield_time_ms",
        "max_output_tokens",
        "catalog_revision",
        "cellExecutionLimits",
        "outputTruncation",
        "maxOutputTokens",
        "connection/ready",
        "connection/rejected",
        "operation/response",
        "execute/initialResponse",
        "delegate/request",
        "delegate/cancel",
        "cell/closed",
        "connection/hello",
        "operation/request",
        "operation/cancel",
        "operation/yield",
        "delegate/response",
        "session/open",
        "session/execute",
        "session/wait",
        "session/terminate",
        "session/shutdown",
        "session/ready",
        "execution/started",
        "wait/completed",
        "session/closed",
        "tool/invoke",
        "notification/send",
        "tool/result",
        "notification/delivered",
        "input_text",
        "input_image",
        "input_audio",
        "image_url",
        "detail",
        "audio_url",
        "noCompatibleVersion",
        "missingRequiredCapability",
        "invalidHello",
        "kind",
        "description",
        "input_schema",
        "output_schema",
        "function",
    }
)
words = st.sampled_from(PROTOCOL_WORDS) | st.text(max_size=6)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.floats()  # NaN and infinities are written as non-standard literals
    | words
)
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(words, children, max_size=5),
    max_leaves=20,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*prefix, index)))
    return found


@st.composite
def mutated_messages(draw: st.DrawFn, seeds: list[Any]) -> Any:
    """A valid spec example with one value replaced, one key dropped or one key added."""
    message = json.loads(json.dumps(draw(st.sampled_from(seeds))))
    path = draw(st.sampled_from(_paths(message)))
    if not path:
        return draw(json_values)
    parent = message
    for step in path[:-1]:
        parent = parent[step]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[path[-1]] = draw(json_values)
    elif action == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(words)] = draw(json_values)
    return message


def _decode_only_violates(side: str, payload: bytes) -> None:
    decode, violation = DECODERS[side]
    encode = encode_host_message if side == "host" else encode_client_message
    for strict in (False, True):
        try:
            message = decode(payload, strict=strict)
        except violation:
            continue
        # Whatever is accepted can be written back.
        encode(message)


FUZZ = settings(max_examples=300, deadline=None)


@FUZZ
@given(payload=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_protocol_violations(payload: bytes) -> None:
    _decode_only_violates("host", payload)
    _decode_only_violates("client", payload)


@FUZZ
@given(value=json_values)
def test_arbitrary_json_values_raise_only_protocol_violations(value: Any) -> None:
    payload = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    _decode_only_violates("host", payload)
    _decode_only_violates("client", payload)


@FUZZ
@given(message=mutated_messages(HOST_SEEDS))
def test_mutated_host_examples_raise_only_host_violations(message: Any) -> None:
    _decode_only_violates("host", json.dumps(message).encode())


@FUZZ
@given(message=mutated_messages(CLIENT_SEEDS))
def test_mutated_client_examples_raise_only_client_violations(message: Any) -> None:
    _decode_only_violates("client", json.dumps(message).encode())


@FUZZ
@given(data=st.data())
def test_byte_level_corruption_of_a_frame_raises_only_protocol_violations(
    data: st.DataObject,
) -> None:
    example = data.draw(st.sampled_from(SPEC_EXAMPLES))
    payload = bytearray(example["json"].encode())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(payload) - 1))
        action = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            payload[position] = data.draw(st.integers(0, 255))
        elif action == "delete":
            del payload[position]
        else:
            payload.insert(position, data.draw(st.integers(0, 255)))
    side = "host" if example["direction"] == "<<" else "client"
    _decode_only_violates(side, bytes(payload))
