"""Tools returning content items, and the declarations ALL_TOOLS shows, on every endpoint.

A ``TextItem``/``ImageItem``/``AudioItem`` result reaches the script as an MCP content block,
which ``content()``, ``image()`` and ``audio()`` take as it is; an image's detail travels in
the block's ``_meta`` and comes back out of the host unchanged.
"""

from __future__ import annotations

import json

import trio

import codemode_trio as cm

from .conftest import Connect

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHgg"
    "J/PchI7wAAAABJRU5ErkJggg=="
)
MP3 = "data:audio/mpeg;base64,SUQzBAAAAAAAI1RTU0UAAAAPAAADTGF2ZjU4LjI5LjEwMAAAAAAAAAAAAAAA"


def content_tools() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function
    async def picture(detail: str | None = None) -> cm.ImageItem:
        """A one-pixel PNG."""
        return cm.ImageItem(PNG, detail)

    @tools.function
    async def album() -> list[cm.ContentItem]:
        """A caption, a picture and a sound."""
        return [cm.TextItem("caption"), cm.ImageItem(PNG, "low"), cm.AudioItem(MP3)]

    @tools.function
    async def report() -> dict[str, object]:
        """Content inside an object."""
        return {"title": "daily", "chart": cm.ImageItem(PNG, "original")}

    return tools


async def test_content_results_are_blocks_the_output_helpers_take(connect: Connect) -> None:
    tools = content_tools()
    with trio.fail_after(30):
        async with connect() as conn, conn.open_session(tools) as session:
            result = await session.run(
                "image(await tools.picture({}));"
                "image(await tools.picture({detail: 'auto'}));"
                "image(await tools.picture({detail: 'auto'}), 'low');"
                "content(await tools.picture({detail: 'original'}));"
                "const items = await tools.album();"
                "content(items);"
                "text(items[0].text);"
                "image(items[1]);"
                "audio(items[2]);"
                "const r = await tools.report();"
                "text(r.title); content(r.chart);"
            )
    assert result.error_text is None
    assert result.content_items == (
        cm.ImageItem(PNG, "high"),  # no detail asked for: the host's default
        cm.ImageItem(PNG, "auto"),
        cm.ImageItem(PNG, "low"),  # image()'s own argument wins
        cm.ImageItem(PNG, "original"),
        cm.TextItem("caption"),
        cm.ImageItem(PNG, "low"),
        cm.AudioItem(MP3),
        cm.TextItem("caption"),
        cm.ImageItem(PNG, "low"),
        cm.AudioItem(MP3),
        cm.TextItem("daily"),
        cm.ImageItem(PNG, "original"),
    )


async def test_all_tools_shows_each_tool_s_declaration(connect: Connect) -> None:
    tools = content_tools()
    with trio.fail_after(30):
        async with connect() as conn, conn.open_session(tools) as session:
            result = await session.run("text(JSON.stringify(ALL_TOOLS))")
    shown = json.loads(result.text)
    assert shown == [{"name": d.name, "description": d.description} for d in tools.definitions()]
    assert shown[0]["description"].startswith(
        "A one-pixel PNG.\n\nexec tool declaration:\n```ts\n"
        "declare const tools: { picture(args: { detail?: string | null; }): Promise<{ _meta?: "
    )
