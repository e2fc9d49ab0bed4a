"""Run a client command against a host that replays a transcript; collect the verdict."""

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

from .replay_host import REPORT_ENV, TRANSCRIPT_ENV

__all__ = ["ClientReplay", "replay_against_client"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@attrs.frozen
class ClientReplay:
    """How a client replayed against a recording.

    ``connected`` is False if the client never started the host; ``divergence`` is the first
    difference from the recording (``None`` when it replayed clean).
    """

    connected: bool
    divergence: str | None
    client_frames: int
    exit_status: int

    @property
    def clean(self) -> bool:
        """The client connected, matched every recorded frame and exited 0."""
        return self.connected and self.divergence is None and self.exit_status == 0


def _host_script(directory: Path, transcript: str, report: Path) -> Path:
    # The settings go into the script: a client may pass its host only an allow-list of our
    # environment (ours does).
    host = directory / "codex-code-mode-host"
    lines = [
        "#!/bin/sh",
        f"export {TRANSCRIPT_ENV}={shlex.quote(os.path.abspath(transcript))}",
        f"export {REPORT_ENV}={shlex.quote(str(report))}",
        f"export PYTHONPATH={shlex.quote(str(_PACKAGE_ROOT))}",
        f"exec {shlex.quote(sys.executable)} -m codemode_trio.conformance.replay_host",
    ]
    host.write_text("\n".join(lines) + "\n")
    host.chmod(host.stat().st_mode | stat.S_IXUSR)
    return host


def _verdict(report: Path) -> dict[str, object] | None:
    if not report.exists():
        return None
    verdict: dict[str, object] = json.loads(report.read_text("utf-8"))
    return verdict


async def replay_against_client(transcript: str, client: Sequence[str]) -> ClientReplay:
    """Run ``client`` with its host replaced by the recording's host side."""
    with tempfile.TemporaryDirectory(prefix="codemode-replay-") as scratch:
        directory = Path(scratch)
        report = directory / "verdict.json"
        host = _host_script(directory, transcript, report)
        env = dict(os.environ, CODEX_CODE_MODE_HOST_PATH=str(host))
        completed = await trio.run_process(
            list(client), env=env, check=False, stdin=subprocess.DEVNULL
        )
        verdict = _verdict(report)
    if verdict is None:
        return ClientReplay(False, None, 0, completed.returncode)
    divergence = verdict["divergence"]
    frames = verdict["client_frames"]
    assert divergence is None or isinstance(divergence, str)
    assert isinstance(frames, int)
    return ClientReplay(True, divergence, frames, completed.returncode)
