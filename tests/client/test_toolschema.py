"""Tool input schemas: derived from annotations, then checked on every call."""

from __future__ import annotations

from typing import Any, Literal, Optional

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import codemode_trio as cm
from codemode_trio.client.toolschema import (
    anything,
    compile_check,
    schema_for_annotation,
    schema_for_function,
)


def problem(annotation: Any, value: Any) -> str | None:
    return compile_check(schema_for_annotation(annotation))(value)


@pytest.mark.parametrize(
    ("annotation", "good", "bad", "message"),
    [
        (int, [0, -3, 2**70, 1.5e21, 3.0], [True, 1.5, "1", None], "must be an integer, got "),
        (float, [0, 1.5, -2], [False, "1.5", None], "must be a number, got "),
        (str, ["", "x"], [1, None, ["x"]], "must be a string, got "),
        (bool, [True, False], [0, 1, "true"], "must be a boolean, got "),
        (type(None), [None], [0, "", False], "must be null, got "),
        (list, [[], [1, "x"], (1, 2)], ["[]", {}, None], "must be an array, got "),
        (dict, [{}, {"a": 1}], [[], "x"], "must be an object, got "),
    ],
)
def test_scalar_and_container_types(
    annotation: Any, good: list[Any], bad: list[Any], message: str
) -> None:
    for value in good:
        assert problem(annotation, value) is None, value
    for value in bad:
        text = problem(annotation, value)
        assert text is not None, value
        assert text == message + repr(value)


def test_optional_and_union_name_every_choice() -> None:
    assert problem(Optional[int], None) is None  # noqa: UP045 - the Optional spelling is tested
    assert problem(int | None, 3) is None
    assert problem(int | str, "x") is None
    assert problem(int | None, "x") == "must be an integer or null, got 'x'"


def test_a_failing_union_names_the_problem_of_the_choice_of_the_same_type() -> None:
    assert problem(list[int] | None, [1, "x"]) == "item 1 must be an integer, got 'x'"
    assert problem(list[int] | None, "x") == "must be an array or null, got 'x'"
    assert problem(int | str, None) == "must be an integer or a string, got None"


def test_a_none_default_makes_the_argument_nullable() -> None:
    async def search(
        query: str,
        limit: int = None,  # type: ignore[assignment]  # noqa: RUF013 - the style under test
        tags: list[str] | None = None,
    ) -> None:
        pass

    properties = schema_for_function(search)["properties"]
    assert properties["limit"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert properties["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    }
    assert properties["query"] == {"type": "string"}


def test_literals_compare_type_and_value() -> None:
    assert problem(Literal["a", "b"], "a") is None
    assert problem(Literal["a", "b"], "c") == "must be one of 'a', 'b'; got 'c'"
    assert problem(Literal[1], 1) is None
    assert problem(Literal[1], True) == "must be one of 1; got True"  # 1 == True in Python


def test_arrays_check_their_items_and_lengths() -> None:
    assert problem(list[int], [1, 2]) is None
    assert problem(list[int], [1, "x"]) == "item 1 must be an integer, got 'x'"
    assert problem(list[list[int]], [[1], [2, None]]) == (
        "item 1 item 1 must be an integer, got None"
    )
    assert problem(tuple[int, ...], [1, 2, 3]) is None
    assert problem(tuple[int, str], [1, "x"]) is None
    assert problem(tuple[int, str], ["x", 1]) == "item 0 must be an integer, got 'x'"
    assert problem(tuple[int, str], [1]) == "must have 2 items, got 1"


def test_what_cannot_be_expressed_accepts_anything() -> None:
    class Point:
        pass

    for annotation in (Any, Point, set[int]):
        assert compile_check(schema_for_annotation(annotation)) is anything
    assert compile_check({}) is anything
    assert compile_check({"anyOf": [{"type": "integer"}, {}]}) is anything
    assert compile_check({"type": "made-up"}) is anything


def test_long_values_are_shortened_in_messages() -> None:
    text = problem(int, "x" * 500)
    assert text is not None
    assert len(text) < 100
    assert text.endswith("...")


@given(st.lists(st.integers()), st.one_of(st.none(), st.text()), st.booleans())
def test_values_of_the_annotated_type_always_pass(
    numbers: list[int], maybe: str | None, flag: bool
) -> None:
    assert problem(list[int], numbers) is None
    assert problem(str | None, maybe) is None
    assert problem(bool, flag) is None
    assert problem(float, float(len(numbers))) is None


async def test_the_registry_refuses_a_badly_typed_call_before_running_the_tool() -> None:
    tools = cm.ToolRegistry()
    ran: list[Any] = []

    @tools.function
    async def add(a: int, b: int = 1) -> int:
        await trio.lowlevel.checkpoint()
        ran.append((a, b))
        return a + b

    def call(arguments: Any) -> cm.ToolCall:
        return cm.ToolCall("1", "tool-1", "add", None, "function", arguments)

    assert await tools.invoke_tool(call({"a": 2})) == 3

    @tools.function
    async def search(query: str, limit: int = None) -> Any:  # type: ignore[assignment]  # noqa: RUF013
        await trio.lowlevel.checkpoint()
        return [query, limit]

    search_call = cm.ToolCall(
        "1", "tool-2", "search", None, "function", {"query": "q", "limit": None}
    )
    assert await tools.invoke_tool(search_call) == ["q", None]
    with pytest.raises(
        cm.ToolError, match=r"^tool 'add': argument 'a' must be an integer, got 'x'$"
    ):
        await tools.invoke_tool(call({"a": "x", "b": 2}))
    with pytest.raises(
        cm.ToolError, match=r"^tool 'add': argument 'b' must be an integer, got 1.5$"
    ):
        await tools.invoke_tool(call({"a": 1, "b": 1.5}))
    assert ran == [(2, 1)]


async def test_a_hand_written_schema_is_not_checked() -> None:
    tools = cm.ToolRegistry()

    @tools.function(input_schema={"type": "object", "properties": {"a": {"type": "string"}}})
    async def anything_goes(a: int) -> Any:
        await trio.lowlevel.checkpoint()
        return a

    call = cm.ToolCall("1", "tool-1", "anything_goes", None, "function", {"a": [1]})
    assert await tools.invoke_tool(call) == [1]
