"""The client hello and the judgement of the host's answer (spec §4)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from codemode_trio.protocol import (
    ALL_CAPABILITIES,
    CellClosed,
    ConnectionHello,
    ConnectionReady,
    ConnectionRejected,
    HandshakeError,
    HandshakeRejected,
    HandshakeResult,
    InvalidHello,
    MissingRequiredCapability,
    NoCompatibleVersion,
    OperationResponse,
    WireError,
    build_hello,
    decode_client_message,
    encode_client_message,
    evaluate_handshake,
)


def _exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


def test_default_hello_offers_every_capability_as_optional_and_requires_none() -> None:
    hello = build_hello()
    assert hello == ConnectionHello((1,), (), ALL_CAPABILITIES)
    assert set(ALL_CAPABILITIES) == {
        "session-cell-execution-resource-limits",
        "yield-observation",
        "bounded-output-v1",
        "delegate-capacity-4096",
        "tool-catalog-revision-v1",
    }
    assert encode_client_message(hello) == (
        b'{"type":"connection/hello","supportedVersions":[1],"requiredCapabilities":[],'
        b'"optionalCapabilities":["session-cell-execution-resource-limits","yield-observation",'
        b'"bounded-output-v1","delegate-capacity-4096","tool-catalog-revision-v1"]}'
    )
    assert decode_client_message(encode_client_message(hello), strict=True) == hello


def test_hello_keeps_the_callers_order_and_values() -> None:
    hello = build_hello(versions=[3, 1], required=["b", "a"], optional=[" x ", "X"])
    assert hello == ConnectionHello((3, 1), ("b", "a"), (" x ", "X"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"versions": []}, "at least one protocol version is required", id="no-version"
        ),
        pytest.param(
            {"versions": [0]}, "invalid value: integer `0`, expected a nonzero u32", id="zero"
        ),
        pytest.param(
            {"versions": [-1]}, "invalid value: integer `-1`, expected a nonzero u32", id="negative"
        ),
        pytest.param(
            {"versions": [2**32]},
            "invalid value: integer `4294967296`, expected a nonzero u32",
            id="above-u32",
        ),
        pytest.param({"versions": [1, 1]}, "duplicate protocol version 1", id="duplicate-version"),
        pytest.param({"required": [""]}, "identifier must not be empty", id="empty-required"),
        pytest.param({"optional": ["  \t"]}, "identifier must not be empty", id="blank-optional"),
        pytest.param(
            {"optional": ["x-a", "x-b", "x-a"]}, "duplicate capability `x-a`", id="dup-optional"
        ),
        pytest.param({"required": ["r", "r"]}, "duplicate capability `r`", id="dup-required"),
        pytest.param(
            {"required": ["yield-observation"], "optional": ["yield-observation"]},
            "capability `yield-observation` cannot be both required and optional",
            id="required-and-optional",
        ),
    ],
)
def test_build_hello_rejects_what_the_host_would_treat_as_fatal(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=_exactly(message)):
        build_hello(**kwargs)


@pytest.mark.parametrize("version", [True, 1.0, "1"], ids=["bool", "float", "string"])
def test_build_hello_rejects_versions_that_are_not_integers(version: object) -> None:
    with pytest.raises(ValueError, match="expected a nonzero u32"):
        build_hello(versions=[version])


def test_padded_capability_is_not_blank_and_is_kept_verbatim() -> None:
    # The host does not trim for matching (spec §4.1): " yield-observation" is another name.
    hello = build_hello(optional=[" yield-observation", "yield-observation"])
    assert hello.optional_capabilities == (" yield-observation", "yield-observation")


def test_ready_grants_the_negotiated_capabilities() -> None:
    hello = build_hello(optional=["yield-observation", "bounded-output-v1", "x-foo"])
    ready = ConnectionReady(1, ("bounded-output-v1", "yield-observation"))
    result = evaluate_handshake(hello, ready)
    assert result == HandshakeResult(1, frozenset({"bounded-output-v1", "yield-observation"}))
    assert result.has("yield-observation")
    assert not result.has("x-foo")


def test_ready_with_no_capabilities_is_accepted() -> None:
    assert evaluate_handshake(build_hello(), ConnectionReady(1, ())) == HandshakeResult(
        1, frozenset()
    )


@pytest.mark.parametrize(
    "reason",
    [
        NoCompatibleVersion((1,)),
        MissingRequiredCapability("a-unknown"),
        InvalidHello("first message must be connection/hello"),
    ],
    ids=lambda reason: reason.TYPE,
)
def test_rejection_raises_handshake_rejected_carrying_the_reason(reason: Any) -> None:
    with pytest.raises(HandshakeRejected) as info:
        evaluate_handshake(build_hello(), ConnectionRejected(reason))
    assert info.value.reason == reason
    assert isinstance(info.value, HandshakeError)
    assert str(info.value).startswith("code-mode host rejected the handshake: ")


@pytest.mark.parametrize("version", [2, 7])
def test_ready_with_a_version_we_did_not_offer_is_an_invalid_response(version: int) -> None:
    with pytest.raises(HandshakeError, match="invalid handshake response") as info:
        evaluate_handshake(build_hello(), ConnectionReady(version, ()))
    assert not isinstance(info.value, HandshakeRejected)


def test_ready_with_a_version_we_offered_is_accepted() -> None:
    result = evaluate_handshake(build_hello(versions=[1, 2]), ConnectionReady(2, ()))
    assert result.version == 2


@pytest.mark.parametrize(
    "answer",
    [CellClosed("s1", "1"), OperationResponse(1, WireError("code-mode request cancelled"))],
    ids=["cell-closed", "operation-response"],
)
def test_any_other_first_message_is_an_invalid_response(answer: Any) -> None:
    with pytest.raises(
        HandshakeError, match="^code-mode host returned an invalid handshake response: "
    ) as info:
        evaluate_handshake(build_hello(), answer)
    assert not isinstance(info.value, HandshakeRejected)


def test_capability_granted_but_never_offered_is_an_invalid_response() -> None:
    hello = build_hello(optional=["yield-observation"])
    with pytest.raises(HandshakeError, match="`bounded-output-v1`"):
        evaluate_handshake(hello, ConnectionReady(1, ("bounded-output-v1", "yield-observation")))


def test_required_capability_missing_from_ready_is_an_invalid_response() -> None:
    hello = build_hello(required=["yield-observation"], optional=[])
    with pytest.raises(HandshakeError, match="`yield-observation`"):
        evaluate_handshake(hello, ConnectionReady(1, ()))
