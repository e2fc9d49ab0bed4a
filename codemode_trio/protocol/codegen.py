"""Generated decoders and encoders: Python source built line by line, then compiled.

:mod:`~codemode_trio.protocol.schema` writes each node's fast decoder and encoder as source when
the node is declared (as attrs generates ``__init__``); :class:`Source` holds that source and the
objects it refers to, and compiles it so tracebacks show the generated lines.
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable
from typing import Any

from ._wire import OffHappyPath

__all__ = ["Source"]


class Source:
    """Python source under construction, with the objects it refers to."""

    def __init__(self) -> None:
        """Empty source; generated code raises ``Off`` and builds with ``new``."""
        self.lines: list[str] = []
        self.namespace: dict[str, Any] = {"Off": OffHappyPath, "new": object.__new__}
        self._names = itertools.count()

    def ref(self, value: object) -> str:
        """A name under which the generated code sees ``value``."""
        name = f"_r{next(self._names)}"
        self.namespace[name] = value
        return name

    def var(self) -> str:
        """A fresh local variable name."""
        return f"v{next(self._names)}"

    def emit(self, indent: int, line: str) -> None:
        """Append one line at ``indent`` levels."""
        self.lines.append("    " * indent + line)

    def function(self, name: str, qualname: str) -> Callable[..., Any]:
        """Compile the source and return the function ``name`` it defines."""
        text = "\n".join(self.lines) + "\n"
        # Registered with linecache, as attrs does, so that tracebacks and debuggers show the
        # generated lines.
        filename = f"<codemode_trio.protocol.schema {qualname}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(text, filename, "exec"), self.namespace)
        function: Callable[..., Any] = self.namespace[name]
        function.__qualname__ = qualname
        return function
