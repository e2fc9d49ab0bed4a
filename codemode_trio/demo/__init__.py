"""The inventory demo, shipped in the package so that an installed wheel can run it.

``codemode-trio demo`` (or ``python -m codemode_trio.demo``) runs :data:`CELL_PATH`, a cell
that calls the tools of :mod:`codemode_trio.demo.tools` and sends one notification, on the
host that ``codemode-trio host path`` names. It prints ``[notify] checked 3 items`` on stderr,
then one line per item and the total on stdout.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CELL_PATH", "TOOLS_MODULE", "run_demo"]

CELL_PATH = Path(__file__).with_name("inventory.js")
"""The demo cell's JavaScript source file."""

TOOLS_MODULE = "codemode_trio.demo.tools"
"""The module whose ``tools`` registry the demo cell calls."""


def run_demo(host_path: str | None = None) -> int:
    """Run the demo cell on the host at ``host_path`` (default: located); return the exit status."""
    from ..runner import run_from_cli  # imports trio: only when running the cell

    return run_from_cli(
        CELL_PATH.read_text(encoding="utf-8"),
        tools_spec=TOOLS_MODULE,
        registry_name=None,
        host_path=host_path,
        yield_time_ms=None,
        transcript=None,
    )
