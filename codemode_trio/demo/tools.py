"""Python tools for the demo cell: a tiny inventory a cell can query.

``examples/tools.py`` re-exports this registry, so the README's first command and the installed
package run the same tools::

    codemode-trio run examples/inventory.js --tools examples/tools.py
    codemode-trio demo
"""

from __future__ import annotations

import trio

import codemode_trio as cm

tools = cm.ToolRegistry()

_STOCK = {"apple": 12, "pear": 3, "plum": 0}


@tools.function(description="How many of an item are in stock")
async def stock(item: str) -> int:
    """Return how many of ``item`` are in stock; an unknown item rejects the call."""
    await trio.sleep(0.01)  # pretend to ask a database
    if item not in _STOCK:
        raise cm.ToolError(f"unknown item {item!r}")
    return _STOCK[item]


@tools.function(description="Add two integers")
async def add(a: int, b: int) -> int:
    """Return ``a + b``."""
    return a + b


# A one-pixel PNG stands in for each item's photo.
_PHOTO = "data:image/png;base64,iVBORw0KGgo="


@tools.function
async def photo(item: str, detail: str | None = None) -> cm.ImageItem:
    """A photo of an item in stock (the script receives an MCP image block)."""
    if item not in _STOCK:
        raise cm.ToolError(f"unknown item {item!r}")
    return cm.ImageItem(_PHOTO, detail)
