"""The command line and the examples, run as a user would: real subprocesses, real host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "codemode_trio"]


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=REPO, capture_output=True, text=True, timeout=60, check=False, **kwargs
    )


def test_readme_main_command_runs_a_cell_with_python_tools(host_path: Path) -> None:
    done = run([*CLI, "run", "examples/inventory.js", "--tools", "examples/tools.py"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["apple: 12", "pear: 3", "plum: 0", "total: 15"]
    assert "[notify] checked 3 items" in done.stderr


def test_run_exits_non_zero_with_the_javascript_error(host_path: Path) -> None:
    done = run([*CLI, "run", "-e", "text('partial'); throw new TypeError('bad thing')"])
    assert done.returncode == 1
    assert done.stdout == "partial\n"
    assert done.stderr.startswith("TypeError: bad thing")


def test_run_renders_images_as_a_placeholder(host_path: Path) -> None:
    png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="
    done = run([*CLI, "run", "-e", f"image('{png}'); text('after')"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[image image/png, 16 bytes, detail high]", "after"]


def test_run_reports_a_tool_error_from_the_registry(host_path: Path) -> None:
    done = run(
        [*CLI, "run", "-e", "await tools.stock({item: 'kiwi'})", "--tools", "examples/tools.py"]
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "unknown item 'kiwi'"


def test_transcript_env_records_frames_that_show_decodes(tmp_path: Path, host_path: Path) -> None:
    transcript = tmp_path / "frames.cbor"
    env = {**os.environ, "CODEMODE_TRIO_TRANSCRIPT": str(transcript)}
    done = run([*CLI, "run", "-e", "text('recorded')"], env=env)
    assert done.returncode == 0, done.stderr
    shown = run([*CLI, "transcript", "show", str(transcript)])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    kinds = [line.split()[2] for line in lines]
    assert kinds[:2] == ["ConnectionHello", "ConnectionReady"]
    assert "InitialResponse" in kinds
    assert "CellClosed" in kinds
    assert any("recorded" in line for line in lines)


def _children(pid: int) -> list[int]:
    # Trio spawns from a worker thread, so look at every thread's children.
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def test_ctrl_c_terminates_the_cell_and_reaps_the_host(host_path: Path) -> None:
    with subprocess.Popen(
        [*CLI, "run", "-e", "text('started'); await new Promise(() => {})"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as cli:
        try:
            assert cli.stdout is not None
            assert cli.stdout.readline() == "started\n"  # the cell is running on the host
            hosts = _children(cli.pid)
            assert len(hosts) == 1
            cli.send_signal(signal.SIGINT)
            code = cli.wait(timeout=20)
            assert cli.stderr is not None
            stderr = cli.stderr.read()
        finally:
            if cli.poll() is None:
                cli.kill()
    assert stderr.strip() == "interrupted: cell terminated"
    assert code == 130
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        state = Path(f"/proc/{hosts[0]}/stat")
        if not state.exists():
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"host process {hosts[0]} survived the CLI")
