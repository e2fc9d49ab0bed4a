"""A host under test may be hostile: what it announces never sizes what the kit holds.

A frame header announcing more than the 64 MiB frame limit is recorded as an oversize frame,
and the host's further output is read and dropped, never buffered waiting for the frame to
complete.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import trio

from codemode_trio.conformance.observe import observe
from codemode_trio.conformance.scenarios import scenario_named
from codemode_trio.conformance.targets import HostTarget
from codemode_trio.protocol.framing import MAX_FRAME_BYTES

STREAMED = 96 * 1024 * 1024  # more than the limit, after the header

HOST = f"""
import sys
out = sys.stdout.buffer
out.write(({MAX_FRAME_BYTES} + 1).to_bytes(4, "little"))
chunk = bytes(1 << 20)
for _ in range({STREAMED} >> 20):
    out.write(chunk)
out.flush()
"""


async def test_an_oversize_frame_is_recorded_and_not_buffered(tmp_path: Path) -> None:
    script = tmp_path / "hostile_host.py"
    script.write_text(HOST, encoding="utf-8")
    target = HostTarget.parse(shlex.join([sys.executable, str(script)]))
    with trio.fail_after(60):
        observed = await observe(target, scenario_named("hello-no-capabilities"), frame_timeout=5)
    frames = [frame for group in observed.groups for frame in group] + list(observed.trailing)
    assert {"<oversize frame>": MAX_FRAME_BYTES + 1} in frames
    assert not any("<cut-off frame>" in frame for frame in frames if isinstance(frame, dict))
