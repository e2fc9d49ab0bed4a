"""MCP servers as tools (the ``codemode-trio[mcp]`` extra).

:func:`open_mcp_tools` connects to a server and gives its tools as a
:class:`~codemode_trio.ToolRegistry`. Importing this package does not import the ``mcp`` SDK:
that happens when a server is opened.
"""

from .tools import open_mcp_tools

__all__ = ["open_mcp_tools"]
