"""Types users already write, as tool parameters and results: TypedDict, attrs, content items.

Also the output schema each tool's return annotation gives (what its declaration shows).
"""

from __future__ import annotations

import typing
from typing import Any

import attrs
import pydantic
import pytest
import typing_extensions

import codemode_trio as cm

from .test_tool_arguments import call, refusal, schema_of


def output_schema_of(tools: cm.ToolRegistry, name: str) -> Any:
    (definition,) = [d for d in tools.definitions() if d.name == name]
    return definition.output_schema


class PlainAddress(typing.TypedDict, total=False):
    """An address."""

    street: typing.Required[str]
    number: int


class ExtAddress(typing_extensions.TypedDict, total=False):
    """An address."""

    street: typing_extensions.Required[str]
    number: int


class PlainOrder(typing.TypedDict):
    to: PlainAddress
    items: list[PlainAddress]
    note: typing.NotRequired[str]


class ExtOrder(typing_extensions.TypedDict):
    to: ExtAddress
    items: list[ExtAddress]
    note: typing_extensions.NotRequired[str]


def order_tools(order_type: Any, address_type: Any) -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    async def place(order: Any) -> Any:
        return order

    place.__annotations__ = {"order": order_type, "return": address_type}
    tools.function(place)
    return tools


async def test_typing_typeddict_works_exactly_as_typing_extensions_typeddict() -> None:
    plain = order_tools(PlainOrder, PlainAddress)
    ext = order_tools(ExtOrder, ExtAddress)

    def normalised(schema: Any) -> str:
        return str(schema).replace("Plain", "").replace("Ext", "")

    assert normalised(schema_of(plain, "place")) == normalised(schema_of(ext, "place"))
    assert schema_of(plain, "place")["$defs"]["PlainAddress"] == {
        "additionalProperties": False,
        "description": "An address.",
        "properties": {"street": {"type": "string"}, "number": {"type": "integer"}},
        "required": ["street"],
        "title": "PlainAddress",
        "type": "object",
    }
    assert normalised(output_schema_of(plain, "place")) == normalised(
        output_schema_of(ext, "place")
    )
    good = {"order": {"to": {"street": "Main"}, "items": [{"street": "x", "number": 2}]}}
    assert await plain.invoke_tool(call("place", good)) == good["order"]
    assert await ext.invoke_tool(call("place", good)) == good["order"]
    for bad in (
        {"order": {"to": {"number": 1}, "items": []}},
        {"order": {"to": {"street": "Main"}, "items": [{"street": 1}]}},
        {"order": {"to": {"street": "Main"}}},
        {"order": {"to": {"street": "Main"}, "items": [], "note": 5}},
    ):
        assert await refusal(plain, "place", bad) == await refusal(ext, "place", bad)
    assert await refusal(plain, "place", {"order": {"to": {"number": 1}, "items": []}}) == (
        "tool 'place': argument 'order.to.street': field required"
    )


@attrs.frozen
class Item:
    name: str
    price: float = 0.0


@attrs.define
class Basket:
    owner: str
    items: list[Item] = attrs.Factory(list)
    _secret: int = 0
    total: float = attrs.field(init=False, default=0.0)

    def __attrs_post_init__(self) -> None:
        self.total = sum(item.price for item in self.items)


async def test_attrs_classes_are_validated_into_instances_and_returned_as_objects() -> None:
    tools = cm.ToolRegistry()
    received: list[Basket] = []

    @tools.function
    async def checkout(basket: Basket, extra: Item | None = None) -> Basket:
        received.append(basket)
        return basket

    schema = schema_of(tools, "checkout")
    assert schema["$defs"]["Basket"]["properties"] == {
        "owner": {"type": "string"},
        "items": {"items": {"$ref": "#/$defs/Item"}, "type": "array"},
        "_secret": {"default": 0, "type": "integer"},
    }
    assert schema["$defs"]["Basket"]["required"] == ["owner"]
    assert schema["$defs"]["Basket"]["additionalProperties"] is False
    result = await tools.invoke_tool(
        call("checkout", {"basket": {"owner": "ann", "items": [{"name": "pear", "price": 2}]}})
    )
    assert received == [Basket("ann", [Item("pear", 2.0)])]
    assert type(received[0].items[0]) is Item
    # A result is the attrs fields by name, init=False ones included.
    assert result == {
        "owner": "ann",
        "items": [{"name": "pear", "price": 2.0}],
        "_secret": 0,
        "total": 2.0,
    }
    await tools.invoke_tool(call("checkout", {"basket": {"owner": "bob", "_secret": 3}}))
    assert received[-1] == Basket("bob", [], 3)  # the factory made a fresh list
    assert await refusal(tools, "checkout", {"basket": {"owner": "x", "total": 1}}) == (
        "tool 'checkout': argument 'basket.total': extra inputs are not permitted"
    )
    assert await refusal(tools, "checkout", {"basket": {"owner": "x", "items": [{}]}}) == (
        "tool 'checkout': argument 'basket.items[0].name': field required"
    )
    assert output_schema_of(tools, "checkout")["title"] == "Basket"


@attrs.frozen
class Node:
    children: list[Node]


@attrs.define
class Lazy:
    ready: int = attrs.field(init=False)


async def test_an_attrs_result_with_an_unset_field_says_which() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def lazy() -> Lazy:
        return Lazy()

    with pytest.raises(cm.ToolError) as caught:
        await tools.invoke_tool(call("lazy", {}))
    assert (
        str(caught.value) == "tool 'lazy' returned a value that is not JSON: Lazy.ready is not set"
    )


def test_a_recursive_attrs_class_is_refused_at_registration() -> None:
    tools = cm.ToolRegistry()

    async def walk(node: Any) -> None:
        pass

    walk.__annotations__ = {"node": Node, "return": None}
    with pytest.raises(TypeError, match="^tool 'walk': parameter 'node': .*Node refers to itself"):
        tools.function(walk)


class Point(pydantic.BaseModel):
    x: int


async def test_the_return_annotation_gives_the_output_schema() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def number() -> int:
        return 1

    @tools.function
    async def nothing() -> None:
        pass

    @tools.function
    async def anything() -> Any:
        pass

    @tools.function
    async def unannotated():  # type: ignore[no-untyped-def]
        pass

    @tools.function
    async def points() -> list[Point]:
        return [Point(x=1)]

    @tools.function
    async def opaque() -> pydantic.BaseModel.__class__:  # a type pydantic cannot describe
        return type

    @tools.function(output_schema={"type": "string"})
    async def explicit() -> int:
        return 1

    assert output_schema_of(tools, "number") == {"type": "integer"}
    for name in ("nothing", "anything", "unannotated", "opaque"):
        assert output_schema_of(tools, name) is None, name
    assert output_schema_of(tools, "points") == {
        "$defs": {
            "Point": {
                "properties": {"x": {"type": "integer"}},
                "required": ["x"],
                "title": "Point",
                "type": "object",
            }
        },
        "items": {"$ref": "#/$defs/Point"},
        "type": "array",
    }
    assert output_schema_of(tools, "explicit") == {"type": "string"}
    declarations = tools.typescript_declarations()
    assert "number(args: {}): Promise<number>;" in declarations
    assert "nothing(args: {}): Promise<unknown>;" in declarations
    assert "points(args: {}): Promise<Array<{ x: number; }>>;" in declarations
    assert "explicit(args: {}): Promise<string>;" in declarations


PNG = "data:image/png;base64,iVBORw0KGgo="


async def test_content_items_are_returned_as_mcp_blocks() -> None:
    tools = cm.ToolRegistry()
    results: dict[str, Any] = {}

    @tools.function
    async def give(which: str) -> Any:
        return results[which]

    def set_result(value: Any) -> cm.ToolCall:
        results["x"] = value
        return call("give", {"which": "x"})

    assert await tools.invoke_tool(set_result(cm.TextItem("hi"))) == {"type": "text", "text": "hi"}
    assert await tools.invoke_tool(set_result(cm.ImageItem(PNG))) == {
        "type": "image",
        "data": "iVBORw0KGgo=",
        "mimeType": "image/png",
    }
    assert await tools.invoke_tool(set_result([cm.ImageItem(PNG, "low")])) == [
        {
            "type": "image",
            "data": "iVBORw0KGgo=",
            "mimeType": "image/png",
            "_meta": {"codex/imageDetail": "low"},
        }
    ]
    # A percent-encoded payload is base64-encoded; media-type parameters are kept.
    svg = cm.ImageItem("data:image/svg+xml;charset=utf-8,%3Csvg%2F%3E")
    assert await tools.invoke_tool(set_result({"chart": svg})) == {
        "chart": {"type": "image", "data": "PHN2Zy8+", "mimeType": "image/svg+xml;charset=utf-8"}
    }
    assert await tools.invoke_tool(set_result(cm.AudioItem("data:;base64,AAAA"))) == {
        "type": "audio",
        "data": "AAAA",
        "mimeType": "application/octet-stream",
    }
    with pytest.raises(cm.ToolError) as remote:
        await tools.invoke_tool(set_result(cm.ImageItem("https://example.com/a.png")))
    assert str(remote.value) == (
        "tool 'give' returned a value that is not JSON: ImageItem.image_url must be a data: "
        "URI (the host takes no other), got 'https://example.com/a.png'"
    )
    with pytest.raises(cm.ToolError, match="AudioItem.audio_url is not valid base64"):
        await tools.invoke_tool(set_result(cm.AudioItem("data:audio/wav;base64,@@@")))
    with pytest.raises(cm.ToolError, match="Unable to serialize unknown type"):
        await tools.invoke_tool(set_result(object()))


def test_content_item_results_are_declared_as_mcp_blocks() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def snapshot() -> cm.ImageItem | list[cm.TextItem]:
        return cm.ImageItem(PNG)

    assert (
        'snapshot(args: {}): Promise<{ _meta?: { "codex/imageDetail": "auto" | "low" | "high" | '
        '"original"; }; data: string; mimeType: string; type: "image"; } | '
        'Array<{ text: string; type: "text"; }>>;'
    ) in tools.typescript_declarations()
