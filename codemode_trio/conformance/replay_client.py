"""Run a client command against a host that replays a transcript; collect the verdict."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import attrs

from .client_check import run_with_host
from .replay_host import REPORT_ENV, TRANSCRIPT_ENV

__all__ = ["ClientReplay", "replay_against_client"]


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


async def replay_against_client(transcript: str, client: Sequence[str]) -> ClientReplay:
    """Run ``client`` with its host replaced by the recording's host side."""
    with tempfile.TemporaryDirectory(prefix="codemode-replay-") as scratch:
        report = Path(scratch) / "verdict.json"
        # Absolute, for a client that starts its host in another directory; getcwd does not block.
        absolute = os.path.abspath(transcript)  # noqa: ASYNC240
        settings = {TRANSCRIPT_ENV: absolute, REPORT_ENV: str(report)}
        module = "codemode_trio.conformance.replay_host"
        status = await run_with_host(client, Path(scratch), module, settings)
        verdict = json.loads(report.read_text("utf-8")) if report.exists() else None
    if verdict is None:
        return ClientReplay(False, None, 0, status)
    divergence = verdict["divergence"]
    frames = verdict["client_frames"]
    assert divergence is None or isinstance(divergence, str)
    assert isinstance(frames, int)
    return ClientReplay(True, divergence, frames, status)
