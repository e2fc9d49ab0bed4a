"""The schema machinery itself: what each presence means, and declarations that cannot work.

The protocol's own messages are covered by the golden, skew, bad-input and agreement tests; a
toy declaration here pins the rules every message relies on, one at a time.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from codemode_trio.protocol import HostProtocolViolation, ToolCall
from codemode_trio.protocol._wire import DecodeContext, OffHappyPath
from codemode_trio.protocol.schema import (
    STR,
    U64,
    Field,
    Presence,
    Struct,
    Union,
    WireValue,
)


@attrs.frozen
class Toy(WireValue):
    """Every presence once; ``wire_nulls`` records explicit nulls."""

    required: str
    keyed: str | None
    strict: int | None
    optional: int | None
    quiet: int | None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False)


TOY = Struct(
    Toy,
    [
        Field("required", "required", STR),
        Field("keyed", "keyed", STR, Presence.KEYED, write_null=True),
        Field("strict", "strict", U64, Presence.STRICT),
        Field("optional", "optional", U64, Presence.OPTIONAL, write_null=True),
        Field("quiet", "quiet", U64, Presence.OPTIONAL),
    ],
    tag=("type", "toy"),
)

COMPLETE: dict[str, Any] = {
    "type": "toy",
    "required": "r",
    "keyed": "k",
    "strict": 1,
    "optional": 2,
    "quiet": 3,
}


def _decode(data: dict[str, Any], *, strict: bool) -> Any:
    ctx = DecodeContext(strict=strict, error=HostProtocolViolation)
    return TOY.decode(data, "toy", ctx)


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in COMPLETE.items() if k != key}


def _with(key: str, value: Any) -> dict[str, Any]:
    return {**COMPLETE, key: value}


def test_the_complete_object_takes_the_fast_path_and_writes_back_as_it_came() -> None:
    toy = TOY.fast(COMPLETE)
    assert toy == Toy("r", "k", 1, 2, 3)
    assert toy == _decode(COMPLETE, strict=True) == _decode(COMPLETE, strict=False)
    assert toy.to_wire() == COMPLETE


@pytest.mark.parametrize(
    ("data", "strict_error", "tolerant"),
    [
        pytest.param(_without("required"), "missing field `required` in toy", None, id="required"),
        pytest.param(
            _with("required", None),
            "invalid type: null, expected a string in toy.required",
            None,
            id="required-null",
        ),
        pytest.param(
            _without("keyed"), "missing field `keyed` in toy", Toy("r", None, 1, 2, 3), id="keyed"
        ),
        pytest.param(
            _without("strict"),
            "missing field `strict` in toy",
            Toy("r", "k", None, 2, 3),
            id="strict",
        ),
        pytest.param(
            _with("strict", None),
            "invalid type: null, expected u64 in toy.strict",
            Toy("r", "k", None, 2, 3),
            id="strict-null",
        ),
    ],
)
def test_a_key_that_is_absent_or_null_is_refused_or_read_as_none_by_mode(
    data: dict[str, Any], strict_error: str, tolerant: Toy | None
) -> None:
    with pytest.raises(OffHappyPath):
        TOY.fast(data)
    with pytest.raises(HostProtocolViolation) as info:
        _decode(data, strict=True)
    assert str(info.value) == f"failed to decode code-mode IPC frame: {strict_error}"
    if tolerant is None:
        with pytest.raises(HostProtocolViolation):
            _decode(data, strict=False)
    else:
        assert _decode(data, strict=False) == tolerant


@pytest.mark.parametrize("strict", [False, True], ids=["tolerant", "strict"])
def test_explicit_nulls_are_recorded_and_written_back_absent_keys_stay_absent(
    strict: bool,
) -> None:
    data = {**_without("quiet"), "keyed": None, "optional": None}
    toy = _decode(data, strict=strict)
    assert toy == TOY.fast(data) == Toy("r", None, 1, None, None)
    assert toy.wire_nulls == TOY.fast(data).wire_nulls == {"keyed", "optional"}
    assert toy.to_wire() == data


def test_a_value_built_in_code_writes_none_by_each_fields_convention() -> None:
    assert Toy("r", None, None, None, None).to_wire() == {
        "type": "toy",
        "required": "r",
        "keyed": None,
        "optional": None,
    }


def test_from_wire_is_the_precise_decoder_of_the_class() -> None:
    ctx = DecodeContext(strict=True, error=HostProtocolViolation)
    invocation = {
        "cell_id": "2",
        "runtime_tool_call_id": "tool-1",
        "tool_name": {"name": "echo", "namespace": None},
        "tool_kind": "function",
        "input": None,
    }
    assert ToolCall.from_wire(invocation, "call", ctx) == ToolCall("2", "tool-1", "echo")
    with pytest.raises(HostProtocolViolation, match="missing field `namespace` in call.tool_name"):
        ToolCall.from_wire({**invocation, "tool_name": {"name": "echo"}}, "call", ctx)


def test_a_class_without_a_declaration_has_no_wire_form() -> None:
    @attrs.frozen
    class Undeclared(WireValue):
        value: int

    with pytest.raises(TypeError, match="no wire schema is declared for Undeclared"):
        Undeclared(1).to_wire()
    with pytest.raises(TypeError, match="no wire schema is declared for Undeclared"):
        Undeclared.from_wire({}, "x", DecodeContext(strict=True, error=HostProtocolViolation))


def test_declarations_that_cannot_work_fail_when_declared() -> None:
    @attrs.frozen
    class Pair(WireValue):
        first: str
        second: str

    with pytest.raises(TypeError, match="Pair.second has no value and no plain default"):
        Struct(Pair, [Field("first", "first", STR)])
    untagged = Struct(Pair, [Field("a", "first", STR), Field("b", "second", STR)])
    with pytest.raises(TypeError, match="Pair is not tagged by 'type'"):
        Union("type", [untagged])
