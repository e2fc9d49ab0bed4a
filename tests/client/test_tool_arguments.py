"""ToolRegistry's arguments: the schema pydantic derives, JSON-strict validation, conversion.

One test per kind of annotation: the schema the host is sent, inputs accepted and refused (with
the one-line message JavaScript sees), and the Python value the tool receives.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import subprocess
import sys
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

import codemode_trio as cm


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(TypedDict):
    street: str
    number: int


class Query(pydantic.BaseModel):
    text: str
    limit: int = 10


class Order(pydantic.BaseModel):
    item: str
    points: list[Point]
    where: Address | None = None


def schema_of(tools: cm.ToolRegistry, name: str) -> dict[str, Any]:
    (definition,) = [d for d in tools.definitions() if d.name == name]
    assert isinstance(definition.input_schema, dict)
    return definition.input_schema


def call(name: str, arguments: Any) -> cm.ToolCall:
    return cm.ToolCall("1", "tool-1", name, None, "function", arguments)


async def refusal(tools: cm.ToolRegistry, name: str, arguments: Any) -> str:
    with pytest.raises(cm.ToolError) as info:
        await tools.invoke_tool(call(name, arguments))
    message = str(info.value)
    assert "\n" not in message
    return message


class Probe:
    """A registry with one tool, ``probe(value: <annotation>)``, recording what it receives."""

    def __init__(self, annotation: Any) -> None:
        self.tools = cm.ToolRegistry()
        self.received: list[Any] = []

        async def probe(value: Any) -> None:
            await trio.lowlevel.checkpoint()
            self.received.append(value)

        probe.__annotations__ = {"value": annotation, "return": None}
        self.tools.function(probe)

    @property
    def schema(self) -> Any:
        return schema_of(self.tools, "probe")["properties"]["value"]

    async def accepts(self, value: Any) -> Any:
        await self.tools.invoke_tool(call("probe", {"value": value}))
        return self.received.pop()

    async def refuses(self, value: Any) -> str:
        message = await refusal(self.tools, "probe", {"value": value})
        assert self.received == []
        return message


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize(
    ("annotation", "schema", "good", "bad", "message"),
    [
        (int, {"type": "integer"}, [0, -3, 2**70], ["1", True, 1.5, None], "a valid integer"),
        (float, {"type": "number"}, [0.5, -2.0], ["1.5", True, None], "a valid number"),
        (str, {"type": "string"}, ["", "x"], [1, None, ["x"]], "a valid string"),
        (bool, {"type": "boolean"}, [True, False], [0, 1, "true"], "a valid boolean"),
    ],
)
async def test_scalars_are_json_strict(
    annotation: Any, schema: Any, good: list[Any], bad: list[Any], message: str
) -> None:
    probe = Probe(annotation)
    assert probe.schema == schema
    for value in good:
        got = await probe.accepts(value)
        assert got == value
        assert type(got) is annotation
    for value in bad:
        assert await probe.refuses(value) == (
            f"tool 'probe': argument 'value': input should be {message}"
        )


async def test_an_integral_float_is_an_integer_and_an_integer_is_a_number() -> None:
    # JavaScript has one number type: 2**70 arrives as the float 1.1805916207174113e+21.
    integers = Probe(int)
    assert await integers.accepts(1.1805916207174113e21) == 1180591620717411303424
    assert await integers.accepts(3.0) == 3
    numbers = Probe(float)
    got = await numbers.accepts(3)
    assert (got, type(got)) == (3.0, float)


async def test_literal() -> None:
    probe = Probe(Literal["a", "b"])
    assert probe.schema == {"enum": ["a", "b"], "type": "string"}
    assert await probe.accepts("a") == "a"
    assert await probe.refuses("c") == "tool 'probe': argument 'value': input should be 'a' or 'b'"


async def test_enum_arrives_as_the_enum_member() -> None:
    probe = Probe(Colour)
    assert probe.schema == {"$ref": "#/$defs/Colour"}
    assert schema_of(probe.tools, "probe")["$defs"]["Colour"] == {
        "enum": ["red", "green"],
        "title": "Colour",
        "type": "string",
    }
    assert await probe.accepts("red") is Colour.RED
    assert await probe.refuses("blue") == (
        "tool 'probe': argument 'value': input should be 'red' or 'green'"
    )


async def test_union_names_every_choice_once() -> None:
    probe = Probe(int | str)
    assert probe.schema == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert await probe.accepts(1) == 1
    assert await probe.accepts("x") == "x"
    assert await probe.refuses(None) == (
        "tool 'probe': argument 'value': input should be a valid integer or a valid string"
    )


async def test_optional() -> None:
    probe = Probe(Optional[int])  # noqa: UP045 - the Optional spelling is what is tested
    assert probe.schema == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert await probe.accepts(None) is None
    assert await probe.accepts(2) == 2
    assert (
        await probe.refuses("2")
        == "tool 'probe': argument 'value': input should be a valid integer"
    )


async def test_list_reports_the_index_of_the_bad_item() -> None:
    probe = Probe(list[str])
    assert probe.schema == {"type": "array", "items": {"type": "string"}}
    assert await probe.accepts(["a", "b"]) == ["a", "b"]
    assert await probe.refuses(["a", "b", "c", 4]) == (
        "tool 'probe': argument 'value[3]': input should be a valid string"
    )


async def test_dict_of_numbers_checks_its_values() -> None:
    probe = Probe(dict[str, float])
    assert probe.schema == {"type": "object", "additionalProperties": {"type": "number"}}
    assert await probe.accepts({"a": 1.5, "b": 2}) == {"a": 1.5, "b": 2.0}
    assert await probe.refuses({"a": True}) == (
        "tool 'probe': argument 'value.a': input should be a valid number"
    )
    assert await probe.refuses({"odd key": "x"}) == (
        "tool 'probe': argument 'value[\"odd key\"]': input should be a valid number"
    )


async def test_tuples_arrive_as_tuples() -> None:
    fixed = Probe(tuple[int, str])
    assert fixed.schema == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert await fixed.accepts([1, "x"]) == (1, "x")
    assert await fixed.refuses(["x", 1]) == (
        "tool 'probe': argument 'value[0]': input should be a valid integer (and 1 more problem)"
    )
    assert await fixed.refuses([1]) == "tool 'probe': argument 'value[1]': field required"
    homogeneous = Probe(tuple[int, ...])
    assert homogeneous.schema == {"type": "array", "items": {"type": "integer"}}
    assert await homogeneous.accepts([1, 2, 3]) == (1, 2, 3)


async def test_typeddict_arrives_as_a_dict_and_checks_its_keys() -> None:
    probe = Probe(Address)
    assert probe.schema == {"$ref": "#/$defs/Address"}
    assert schema_of(probe.tools, "probe")["$defs"]["Address"]["required"] == [
        "street",
        "number",
    ]
    assert await probe.accepts({"street": "Main", "number": 4}) == {"street": "Main", "number": 4}
    assert await probe.refuses({"street": "Main"}) == (
        "tool 'probe': argument 'value.number': field required"
    )
    assert await probe.refuses({"street": "Main", "number": "4"}) == (
        "tool 'probe': argument 'value.number': input should be a valid integer"
    )


async def test_dataclass_arrives_as_the_dataclass() -> None:
    probe = Probe(Point)
    definition = schema_of(probe.tools, "probe")["$defs"]["Point"]
    assert definition["properties"] == {
        "x": {"type": "integer"},
        "y": {"type": "number", "default": 0.0},
    }
    assert await probe.accepts({"x": 1}) == Point(1, 0.0)
    assert await probe.refuses({"x": 1.5}) == (
        "tool 'probe': argument 'value.x': input should be a valid integer"
    )
    assert await probe.refuses(3) == "tool 'probe': argument 'value': input should be an object"


async def test_model_arrives_as_the_model() -> None:
    probe = Probe(Query)
    assert await probe.accepts({"text": "q"}) == Query(text="q", limit=10)
    assert await probe.refuses({"text": 1}) == (
        "tool 'probe': argument 'value.text': input should be a valid string"
    )


async def test_nested_combinations_convert_all_the_way_down() -> None:
    probe = Probe(list[Order])
    order = {"item": "kiwi", "points": [{"x": 1}, {"x": 2, "y": 0.5}], "where": None}
    assert await probe.accepts([order]) == [
        Order(item="kiwi", points=[Point(1), Point(2, 0.5)], where=None)
    ]
    bad = {"item": "kiwi", "points": [{"x": 1}], "where": {"street": "Main", "number": "4"}}
    assert await probe.refuses([order, bad]) == (
        "tool 'probe': argument 'value[1].where.number': input should be a valid integer"
    )
    worse = {"item": "kiwi", "points": [{"x": 1}, {"x": "2"}]}
    assert await probe.refuses([worse]) == (
        "tool 'probe': argument 'value[0].points[1].x': input should be a valid integer"
    )


async def test_several_problems_report_the_first_and_count_the_rest() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def add(a: int, b: int) -> int:
        return a + b

    assert await refusal(tools, "add", {"a": "1", "b": "2"}) == (
        "tool 'add': argument 'a': input should be a valid integer (and 1 more problem)"
    )


# --------------------------------------------------------------------------- the signature


async def test_unknown_and_missing_arguments_are_refused() -> None:
    tools = cm.ToolRegistry()
    ran: list[Any] = []

    @tools.function
    async def add(a: int, b: int = 1) -> int:
        ran.append((a, b))
        return a + b

    assert schema_of(tools, "add")["additionalProperties"] is False
    assert await tools.invoke_tool(call("add", {"a": 2})) == 3
    assert await refusal(tools, "add", {"a": 1, "c": 2}) == "tool 'add': unexpected argument 'c'"
    assert await refusal(tools, "add", {}) == "tool 'add': missing required argument 'a'"
    assert await refusal(tools, "add", None) == "tool 'add': missing required argument 'a'"
    assert await refusal(tools, "add", [1, 2]) == "tool 'add': expects an object input, got [1, 2]"
    assert ran == [(2, 1)]


async def test_a_none_default_makes_the_argument_nullable() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def search(query: str, limit: int = None) -> Any:  # type: ignore[assignment]  # noqa: RUF013
        return [query, limit]

    assert schema_of(tools, "search")["properties"]["limit"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}],
        "default": None,
    }
    assert await tools.invoke_tool(call("search", {"query": "q", "limit": None})) == ["q", None]
    assert await tools.invoke_tool(call("search", {"query": "q", "limit": 3})) == ["q", 3]


async def test_argument_names_that_clash_with_pydantic_work() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def odd(model_config: str, schema: int, _private: bool = False) -> list[Any]:
        return [model_config, schema, _private]

    assert sorted(schema_of(tools, "odd")["properties"]) == ["_private", "model_config", "schema"]
    got = await tools.invoke_tool(call("odd", {"model_config": "c", "schema": 1, "_private": True}))
    assert got == ["c", 1, True]


async def test_descriptions_come_from_annotated_fields_and_docstrings() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def google(a: int, b: Annotated[int, pydantic.Field(description="from Field")]) -> int:
        """Add two integers.

        Longer text that is not the description.

        Args:
            a: the first addend
            b: ignored: the Field wins
        """
        return a + b

    @tools.function
    async def numpy(a: int) -> int:
        """Negate.

        Parameters
        ----------
        a : int
            what to negate
        """
        return -a

    @tools.function
    async def rest(a: int) -> int:
        """Double.

        :param a: what to double
        """
        return 2 * a

    properties = schema_of(tools, "google")["properties"]
    assert properties["a"] == {"type": "integer", "description": "the first addend"}
    assert properties["b"] == {"type": "integer", "description": "from Field"}
    descriptions = {d.name: d.description.split("\n\n")[0] for d in tools.definitions()}
    assert descriptions == {"google": "Add two integers.", "numpy": "Negate.", "rest": "Double."}
    assert schema_of(tools, "numpy")["properties"]["a"]["description"] == "what to negate"
    assert schema_of(tools, "rest")["properties"]["a"]["description"] == "what to double"


async def test_a_single_model_can_be_the_whole_input() -> None:
    tools = cm.ToolRegistry()

    @tools.function(model_input=True)
    async def search(query: Query) -> list[Any]:
        return [query.text, query.limit]

    schema = schema_of(tools, "search")
    assert schema["properties"] == {
        "text": {"type": "string"},
        "limit": {"type": "integer", "default": 10},
    }
    assert schema["required"] == ["text"]
    assert await tools.invoke_tool(call("search", {"text": "q"})) == ["q", 10]
    assert await refusal(tools, "search", {"text": 5}) == (
        "tool 'search': argument 'text': input should be a valid string"
    )

    @tools.function(model_input=True)
    async def keyword(*, query: Query, verbose: bool = False) -> str:
        return query.text

    assert await tools.invoke_tool(call("keyword", {"text": "k"})) == "k"
    with pytest.raises(TypeError, match="model_input=True needs"):

        @tools.function(model_input=True)
        async def wrong(a: int) -> None:
            pass


def test_an_annotation_pydantic_cannot_validate_fails_the_registration() -> None:
    tools = cm.ToolRegistry()

    class Opaque:  # neither a dataclass, a model, a TypedDict nor an attrs class
        pass

    async def move(where: Any) -> None:
        pass

    move.__annotations__ = {"where": Opaque, "return": None}
    with pytest.raises(TypeError, match="^tool 'move': pydantic cannot validate its arguments"):
        tools.function(move)
    assert len(tools) == 0


async def test_a_hand_written_schema_is_not_checked() -> None:
    tools = cm.ToolRegistry()

    @tools.function(input_schema={"type": "object", "properties": {"a": {"type": "string"}}})
    async def anything_goes(a: int) -> Any:
        return a

    assert await tools.invoke_tool(call("anything_goes", {"a": [1]})) == [1]
    assert await refusal(tools, "anything_goes", {"b": 1}) == (
        "tool 'anything_goes': missing a required argument: 'a'"
    )


@given(st.lists(st.integers()), st.one_of(st.none(), st.text()), st.booleans())
async def test_values_of_the_annotated_type_always_pass(
    numbers: list[int], maybe: str | None, flag: bool
) -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def take(numbers: list[int], maybe: str | None, flag: bool) -> list[Any]:
        return [numbers, maybe, flag]

    arguments = {"numbers": numbers, "maybe": maybe, "flag": flag}
    assert await tools.invoke_tool(call("take", arguments)) == [numbers, maybe, flag]


def scalar_tools(annotate: bool) -> cm.ToolRegistry:
    """``t(a: int, /, b: str, c: float = 1.5, *, d: bool = False)``, each type bare or wrapped."""
    wrap: Any = (lambda kind: Annotated[kind, "same type"]) if annotate else (lambda kind: kind)
    tools = cm.ToolRegistry()

    async def t(a: Any, /, b: Any, c: Any = 1.5, *, d: Any = False) -> str:
        return repr((a, b, c, d))

    t.__annotations__ = {"a": wrap(int), "b": wrap(str), "c": wrap(float), "d": wrap(bool)}
    tools.function(t)
    return tools


BARE_SCALARS, ANNOTATED_SCALARS = scalar_tools(False), scalar_tools(True)
TEXT = st.text(max_size=4) | st.text(st.characters(categories=["Cs", "Lu"]), max_size=2)
ANY_SCALAR = st.one_of(
    st.integers(),
    st.booleans(),
    TEXT,
    st.floats(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
INTEGERS = st.integers() | st.integers(min_value=2**63, max_value=2**80)
SCALAR_INPUTS = st.one_of(
    # Arguments of the declared types, with an unknown one ("e") at times...
    st.fixed_dictionaries(
        {"a": INTEGERS, "b": TEXT}, optional={"c": st.floats(), "d": st.booleans(), "e": ANY_SCALAR}
    ),
    # ... and anything at all.
    st.dictionaries(st.sampled_from("abcde"), ANY_SCALAR, max_size=5),
    ANY_SCALAR,
)


async def outcome(tools: cm.ToolRegistry, arguments: Any) -> tuple[bool, Any]:
    try:
        return True, await tools.invoke_tool(call("t", arguments))
    except cm.ToolError as exc:
        return False, str(exc)


@settings(max_examples=500)  # a millisecond each; the rare cases need the numbers
@given(SCALAR_INPUTS)
@example({"a": 1, "b": "\ud800"}).via("a lone surrogate")
@example({"a": 2**64, "b": "x", "e": 0}).via("too big, and unknown")
async def test_bare_scalar_parameters_take_exactly_what_pydantic_takes(arguments: Any) -> None:
    # Bare int/str/float/bool parameters skip pydantic on the common call; Annotated ones
    # always go through it. Both must accept, convert and refuse alike.
    assert await outcome(BARE_SCALARS, arguments) == await outcome(ANNOTATED_SCALARS, arguments)


# --------------------------------------------------------------------------- results


async def test_results_that_are_models_dataclasses_or_enums_become_json() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def build() -> Any:
        return {"order": Order(item="x", points=[Point(1)]), "colour": Colour.RED, "pair": (1, 2)}

    assert await tools.invoke_tool(call("build", {})) == {
        "order": {"item": "x", "points": [{"x": 1, "y": 0.0}], "where": None},
        "colour": "red",
        "pair": [1, 2],
    }


class Name(str):
    pass


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": 1, "b": None, "c": True, "d": "x", "e": 2**70}, None),  # JSON as it is
        ({1: "x", "b": 2}, {"1": "x", "b": 2}),
        ({"a": Colour.RED}, {"a": "red"}),
        ({Name("k"): Name("v")}, {"k": "v"}),
        ({"a": 1.5, "b": (1,)}, {"a": 1.5, "b": [1]}),
        ({"é": 1, "b": "ü"}, None),
    ],
)
async def test_an_object_result_is_sent_as_its_json(value: Any, expected: Any) -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def build() -> Any:
        return value

    result = await tools.invoke_tool(call("build", {}))
    assert result == (value if expected is None else expected)
    assert result is not value  # a copy: changing it leaves the tool's own object alone
    assert all(type(key) is str for key in result)
    assert all(type(item) is not Name for item in result.values())


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (object(), "Unable to serialize unknown type: <class 'object'>"),
        ({"a": [1, math.nan]}, 'result["a"][1] is not a finite number'),
        (math.inf, "result is not a finite number"),
        ({"a": 1, "b": math.nan}, 'result["b"] is not a finite number'),
        ({"\udfff": 1}, "'utf-8' codec can't encode character '\\udfff' in position 0"),
    ],
)
async def test_a_result_that_is_not_json_names_the_tool(value: Any, problem: str) -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def bad() -> Any:
        return value

    message = await refusal(tools, "bad", {})
    assert message.startswith(f"tool 'bad' returned a value that is not JSON: {problem}")


async def test_a_tool_that_raises_is_reported_and_logged_with_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def broken() -> None:
        raise ValueError("boom")

    assert await refusal(tools, "broken", {}) == (
        "tool 'broken': code-mode delegate task failed: ValueError: boom"
    )
    (record,) = [r for r in caplog.records if r.name == "codemode_trio.tools"]
    assert record.getMessage() == "tool 'broken' raised ValueError('boom')"
    assert record.exc_info is not None


def test_pydantic_is_imported_at_the_first_registration_only() -> None:
    script = (
        "import sys, codemode_trio as cm\n"
        "tools = cm.ToolRegistry()\n"
        "print('pydantic' in sys.modules)\n"
        "@tools.function\n"
        "async def f(a: int) -> int:\n"
        "    return a\n"
        "print('pydantic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == ["False", "True"]


async def test_tool_registry_positional_only_parameters_accept_their_schema_input() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def add(a: int, b: int, /) -> int:
        return a + b

    (definition,) = tools.definitions()
    schema = definition.input_schema
    assert isinstance(schema, dict)
    # The schema asks the script for an object {a, b}; that very input must be accepted.
    assert schema["required"] == ["a", "b"]
    call = cm.ToolCall("1", "tool-1", "add", None, "function", {"a": 1, "b": 2})
    assert await tools.invoke_tool(call) == 3
