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

__all__ = ["ClientReport", "check_client", "run_with_host"]

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


async def run_with_host(
    client: Sequence[str], directory: Path, module: str, settings: dict[str, str]
) -> int:
    """Run ``client`` with its host replaced by a script in ``directory`` that runs ``module``.

    The settings go into the script itself: a client may pass its host only an allow-list of
    our environment (ours does), which would drop them. Returns the client's exit status.
    """
    script = directory / "codex-code-mode-host"
    lines = [
        "#!/bin/sh",
        *(f"export {name}={shlex.quote(value)}" for name, value in settings.items()),
        f"export PYTHONPATH={shlex.quote(str(_PACKAGE_ROOT))}",
        f"exec {shlex.quote(sys.executable)} -m {module}",
    ]
    script.write_text("\n".join(lines) + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, CODEX_CODE_MODE_HOST_PATH=str(script))
    completed = await trio.run_process(list(client), env=env, check=False, stdin=subprocess.DEVNULL)
    return completed.returncode


async def check_client(client: Sequence[str], host: Sequence[str]) -> ClientReport:
    """Run ``client`` with ``CODEX_CODE_MODE_HOST_PATH`` set to ``host`` in checking mode.

    The client's stdout and stderr pass through. Every connection it opens is checked.
    """
    with tempfile.TemporaryDirectory(prefix="codemode-conform-") as scratch:
        report = Path(scratch) / "report.jsonl"
        report.touch()
        settings = {HOST_ENV: shlex.join(host), REPORT_ENV: str(report)}
        module = "codemode_trio.conformance.checking_host"
        status = await run_with_host(client, Path(scratch), module, settings)
        lines = report.read_text("utf-8").splitlines()
    violations = tuple(
        Violation(item["rule"], item["detail"])
        for line in lines
        for item in json.loads(line)["violations"]
    )
    return ClientReport(len(lines), violations, status)
