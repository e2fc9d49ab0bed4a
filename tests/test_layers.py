"""The package's layers (docs/architecture.md): no import runs back up, TYPE_CHECKING included.

Every import statement of every module is read with :mod:`ast` (at module level, under
``if TYPE_CHECKING:`` and inside functions alike) and must name a module of its own part or of
a lower layer. Two parts on one layer know nothing of each other.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import codemode_trio

PACKAGE = Path(codemode_trio.__file__).parent

#: Bottom to top. A part is a sub-package or a module at the package's root.
LAYERS: list[tuple[str, set[str]]] = [
    ("package-private helpers", {"_groups", "_oserror", "_terminal"}),
    ("the sans-IO core", {"protocol"}),
    ("the error types", {"errors"}),
    ("byte streams and files", {"transport", "faults", "transcript", "hostbin", "agent"}),
    ("the roles", {"client", "host"}),
    ("the gRPC client", {"grpc"}),
    ("the openers", {"connect"}),
    ("above a connection", {"reconnect", "pool", "runner", "mcp", "surface"}),
    ("the public face", {"__init__"}),
    ("tools", {"conformance", "testing", "demo", "transcript_view", "transcript_html"}),
    ("the command", {"cli"}),
]
RANK = {part: rank for rank, (_, parts) in enumerate(LAYERS) for part in parts}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("codemode_trio", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _part(module: str) -> str:
    """The part a module is on: every ``__main__`` is an entry point, part of the command."""
    names = module.split(".")
    if names[-1] == "__main__":
        return "cli"
    if len(names) == 1:
        return "__init__"
    return "client" if names[1] == "tracing" else names[1]  # the client's tracing delegate


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                # `from . import tracing` imports a module; `from .x import name` imports x.
                child = f"{base}.{alias.name}"
                found.add(child if child in MODULES else base)
    return {name for name in found if name.split(".")[0] == "codemode_trio"}


def test_every_part_is_on_a_layer() -> None:
    unplaced = {_part(module) for module in MODULES} - RANK.keys()
    assert not unplaced, f"place these in LAYERS and docs/architecture.md: {sorted(unplaced)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module: str) -> None:
    part = _part(module)
    if part == "__init__":
        return  # the face names everything, lazily; importing the face is checked as any part
    upward = sorted(
        f"{target} ({LAYERS[RANK[_part(target)]][0]})"
        for target in _imports(module)
        if _part(target) != part and RANK[_part(target)] >= RANK[part]
    )
    assert not upward, f"{module} ({LAYERS[RANK[part]][0]}) imports upward: {upward}"


def test_the_check_sees_a_type_checking_import(tmp_path: Path) -> None:
    # The reader must not be blind to the imports that the layering most often breaks.
    MODULES["codemode_trio.transport._probe"] = probe = tmp_path / "_probe.py"
    try:
        probe.write_text(
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from ..client.connection import Connection\n"
            "def f() -> None:\n"
            "    from .. import tracing\n"
        )
        assert _imports("codemode_trio.transport._probe") == {
            "codemode_trio.client.connection",
            "codemode_trio.tracing",
        }
    finally:
        del MODULES["codemode_trio.transport._probe"]


def test_the_reference_host_loads_nothing_of_the_client() -> None:
    # A fresh interpreter: loading every module of the reference host (listener, worker,
    # server, V8 runtime) loads no module of its own layer or above but the host's own.
    host = sorted(m for m in MODULES if _part(m) == "host" and not m.endswith("__main__"))
    script = (
        "import importlib, json, sys\n"
        f"for name in {host!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = {m for m in json.loads(run.stdout) if m.split(".")[0] == "codemode_trio"}
    assert "codemode_trio.host.listen" in loaded
    assert "codemode_trio.transport.websocket" in loaded  # the worker's WebSocket stream
    above = sorted(
        m
        for m in loaded - {"codemode_trio"}
        if _part(m) != "host" and RANK[_part(m)] >= RANK["host"]
    )
    assert not above, above
