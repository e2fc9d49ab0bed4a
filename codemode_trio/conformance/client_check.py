"""Run a client command against the reference host in checking mode and collect the verdict."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from .checking_host import HOST_ENV, REPORT_ENV
from .client_rules import Violation

__all__ = ["ClientReport", "check_client"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@attrs.frozen
class ClientReport:
    """What a client did: connections it opened, rules it broke, how it exited."""

    connections: int
    violations: tuple[Violation, ...]
    exit_status: int

    @property
    def passed(self) -> bool:
        """No rule broken, at least one connection, and the client finished with status 0."""
        return not self.violations and self.connections > 0 and self.exit_status == 0


def _wrapper(directory: Path, host: Sequence[str], report: Path) -> Path:
    # The settings go into the script itself: a client may pass its host only an allow-list
    # of our environment (ours does), which would drop them.
    path = directory / "codex-code-mode-host"
    lines = [
        "#!/bin/sh",
        f"export {HOST_ENV}={shlex.quote(shlex.join(host))}",
        f"export {REPORT_ENV}={shlex.quote(str(report))}",
        f"export PYTHONPATH={shlex.quote(str(_PACKAGE_ROOT))}",
        f"exec {shlex.quote(sys.executable)} -m codemode_trio.conformance.checking_host",
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def check_client(client: Sequence[str], host: Sequence[str]) -> ClientReport:
    """Run ``client`` with ``CODEX_CODE_MODE_HOST_PATH`` set to ``host`` in checking mode.

    The client's stdout and stderr pass through. Every connection it opens is checked.
    """
    with tempfile.TemporaryDirectory(prefix="codemode-conform-") as scratch:
        directory = Path(scratch)
        report = directory / "report.jsonl"
        report.touch()
        env = dict(os.environ)
        env["CODEX_CODE_MODE_HOST_PATH"] = str(_wrapper(directory, host, report))
        completed = await trio.run_process(
            list(client), env=env, check=False, stdin=subprocess.DEVNULL
        )
        violations: list[Violation] = []
        connections = 0
        for line in report.read_text("utf-8").splitlines():
            connections += 1
            for item in json.loads(line)["violations"]:
                violations.append(Violation(item["rule"], item["detail"]))
    return ClientReport(connections, tuple(violations), completed.returncode)
