"""Python tools for the code-mode host: a tiny inventory a cell can query.

Used by the README's first command::

    codemode-trio run examples/inventory.js --tools examples/tools.py

The tools live in the package (``codemode_trio/demo/tools.py``) so that ``codemode-trio demo``
runs the same cell and tools from an installed wheel (``examples/inventory.js`` is a link to
the packaged cell). Read that module for how a tool is written.
"""

from __future__ import annotations

from codemode_trio.demo.tools import add, photo, stock, tools

__all__ = ["add", "photo", "stock", "tools"]
