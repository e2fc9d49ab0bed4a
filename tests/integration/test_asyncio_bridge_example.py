"""examples/asyncio_bridge.py: an asyncio agent calls code mode through trio-asyncio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "asyncio_bridge.py"


def test_an_asyncio_agent_runs_programs_on_a_trio_session(host_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(host_path), "--measure"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, timing = done.stdout.splitlines()
    # Both tool calls of the asyncio gather ran, the second with its pragma split off.
    assert first == "['49', '42']"
    assert timing.startswith("exec round trip, median: ")
    assert " ms through trio-asyncio; one asyncio->Trio crossing: " in timing
