"""A real MCP server for the tests, written with the SDK's MCPServer; run as a stdio subprocess.

The ``slow`` tool prints ``mark: slow-started`` on stderr when it starts and
``mark: slow-cancelled`` when the client cancels it, so a test can see the server side of a
cancellation. ``--http PORT`` serves streamable HTTP on ``127.0.0.1:PORT`` instead of stdio.
"""

from __future__ import annotations

import base64
import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent
from pydantic import BaseModel

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)

app = MCPServer("weather")


def mark(what: str) -> None:
    print(f"mark: {what}", file=sys.stderr, flush=True)


class Forecast(BaseModel):
    city: str
    celsius: float


@app.tool(description="The forecast for a city")
def forecast(city: str) -> Forecast:
    return Forecast(city=city, celsius=21.5)


@app.tool(name="get-map")
def get_map(city: str) -> CallToolResult:
    """A caption and a map of the city."""
    data = base64.b64encode(PIXEL).decode()
    picture = ImageContent(type="image", data=data, mime_type="image/png")
    return CallToolResult(content=[TextContent(type="text", text=f"map of {city}"), picture])


@app.tool()
def refuse(reason: str) -> CallToolResult:
    """Report an error the MCP way: a result with isError."""
    message = TextContent(type="text", text=f"refused: {reason}")
    return CallToolResult(content=[message], is_error=True)


@app.tool()
async def slow(seconds: float) -> str:
    """Sleep, marking its start and its cancellation."""
    mark("slow-started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        mark("slow-cancelled")
        raise
    return "slept"


@app.tool()
def die() -> str:
    """Exit the server process at once."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        # Streamable HTTP on loopback; uvicorn says on stderr when it listens.
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
