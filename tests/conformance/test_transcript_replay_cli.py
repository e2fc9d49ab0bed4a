"""``transcript replay``: the shipped 0.171.0 recording replays clean both ways."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from codemode_trio.conformance.replay import HostReplayer, connections
from codemode_trio.transcript import CLIENT_TO_HOST

from ..conftest import REPO

FIXTURE = REPO / "tests" / "data" / "transcript-0.171.0.cbor"
CLIENT = Path(__file__).with_name("transcript_client.py")


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codemode_trio", "transcript", "replay", str(FIXTURE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_recording_replays_clean_against_the_host_it_came_from(rust_host_path: Path) -> None:
    result = _replay("--host", str(rust_host_path))
    assert (result.returncode, result.stdout) == (0, "connection 1: replays clean\n"), result.stderr


def test_recording_replays_clean_against_our_host(serve_host_path: Path) -> None:
    result = _replay("--host", str(serve_host_path))
    assert (result.returncode, result.stdout) == (0, "connection 1: replays clean\n"), result.stderr


def test_recording_replays_clean_against_our_client() -> None:
    result = _replay("--client", f"{sys.executable} {CLIENT}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "replays clean: 10 client frames matched"


def test_a_client_that_differs_is_named_at_its_first_divergence(tmp_path: Path) -> None:
    other = tmp_path / "other_client.py"
    other.write_text(
        "import trio, codemode_trio as cm\n"
        "async def main():\n"
        "    async with cm.open_host_process() as conn:\n"
        "        async with conn.open_session() as session:\n"
        "            await session.run('text(1)')\n"
        "trio.run(main)\n"
    )
    result = _replay("--client", f"{sys.executable} {other}")
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        "first divergence: client frame 3 .request.request.enabled_tools: 0 items, expected 2"
    )


def test_a_host_that_answers_differently_is_named(older_host_path: Path) -> None:
    result = _replay("--host", str(older_host_path))
    assert result.returncode == 1
    assert result.stdout.startswith("connection 1: first divergence: ")


def test_replayer_plays_the_host_side_and_stops_at_a_difference() -> None:
    frames = connections(FIXTURE)[0]
    client = [frame.payload for frame in frames if frame.direction == CLIENT_TO_HOST]
    replayer = HostReplayer(frames)
    assert replayer.start() == []
    answers = replayer.client_frame(client[0])
    assert answers == [frames[1].payload]  # connection/ready follows the hello
    assert replayer.client_frame(b'{"type":"operation/cancel","id":1}') == []
    assert replayer.divergence is not None
    assert replayer.divergence.startswith("client frame 2 ")


def test_a_client_announcing_an_oversize_frame_is_refused_at_its_header(tmp_path: Path) -> None:
    # Without the 64 MiB check the replayer would wait for 4 GiB that never come (and buffer
    # whatever does): the run would end only at the timeout. The frame before it, in the same
    # write, is still matched first.
    first = next(
        frame.payload for frame in connections(FIXTURE)[0] if frame.direction == CLIENT_TO_HOST
    )
    hostile = tmp_path / "hostile_client.py"
    hostile.write_text(
        "import os, subprocess\n"
        "host = subprocess.Popen([os.environ['CODEX_CODE_MODE_HOST_PATH']],\n"
        "                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        f"hello = {first!r}\n"
        "host.stdin.write(len(hello).to_bytes(4, 'little') + hello\n"
        "                 + (0xFFFFFFF0).to_bytes(4, 'little') + b'x' * 100_000)\n"
        "host.stdin.flush()\n"
        "host.stdout.read()\n"
        "host.wait()\n"
    )
    result = _replay("--client", f"{sys.executable} {hostile}")
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        "first divergence: client frame 2: code-mode IPC frame length 4294967280 exceeds "
        "67108864 bytes"
    )
