"""The command line and the examples, run as a user would: real subprocesses, real host."""

from __future__ import annotations

import json
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
            rest = cli.stdout.read()
        finally:
            if cli.poll() is None:
                cli.kill()
    assert stderr.strip() == "interrupted: cell terminated"
    assert code == 130
    assert rest == ""  # nothing was produced after "started"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        state = Path(f"/proc/{hosts[0]}/stat")
        if not state.exists():
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"host process {hosts[0]} survived the CLI")


def test_typed_tools_example_converts_arguments_and_explains_a_bad_call(host_path: Path) -> None:
    done = run([sys.executable, "examples/typed_tools.py"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "python calls: 30 1.0",
        "route: 9 km",
        "plan: 1 leg in miles",
        "refused: tool 'route': argument 'points[1].x': input should be a valid number",
        "final: result",
    ]


KILLER_TOOLS = """
import os, signal
from pathlib import Path

import codemode_trio as cm

tools = cm.ToolRegistry()


@tools.function
async def kill_host() -> None:
    \"\"\"SIGKILL the host: the only child of this process.\"\"\"
    for task in Path("/proc/self/task").iterdir():
        for child in (task / "children").read_text().split():
            os.kill(int(child), signal.SIGKILL)
"""


def test_a_host_killed_mid_cell_is_one_line_and_status_1(tmp_path: Path, host_path: Path) -> None:
    tools = tmp_path / "killer.py"
    tools.write_text(KILLER_TOOLS)
    cell = "text('before'); await tools.kill_host(); text('after')"
    done = run([*CLI, "run", "-e", cell, "--tools", str(tools)])
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(
        "codemode-trio: error: code-mode host closed its stdout (host killed by signal SIGKILL"
    )
    assert done.stderr.count("\n") == 1
    debug = run(
        [*CLI, "run", "-e", cell, "--tools", str(tools)],
        env={**os.environ, "CODEMODE_TRIO_DEBUG": "1"},
    )
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "ConnectionFailed: code-mode host closed its stdout" in debug.stderr


def test_output_piped_into_a_reader_that_quits_is_no_traceback(host_path: Path) -> None:
    cell = "for (let i = 0; i < 200000; i++) text('line ' + i)"
    with subprocess.Popen(
        [*CLI, "run", "-e", cell],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as cli:
        assert cli.stdout is not None and cli.stderr is not None
        assert cli.stdout.readline() == "line 0\n"
        cli.stdout.close()  # as `| head -1` does
        code = cli.wait(timeout=30)
        stderr = cli.stderr.read()
    assert (code, stderr) == (141, "")


def test_ctrl_c_prints_what_the_cell_produced_before_it_was_terminated(host_path: Path) -> None:
    # A long yield time: nothing is observed before Ctrl-C, so "before" only comes from the
    # terminate's response.
    cell = "text('before'); notify('ready'); await new Promise(() => {})"
    with subprocess.Popen(
        [*CLI, "run", "--yield-time-ms", "60000", "-e", cell],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as cli:
        try:
            assert cli.stdout is not None and cli.stderr is not None
            assert cli.stderr.readline() == "[notify] ready\n"
            cli.send_signal(signal.SIGINT)
            code = cli.wait(timeout=20)
            out, err = cli.stdout.read(), cli.stderr.read()
        finally:
            if cli.poll() is None:
                cli.kill()
    assert (code, out, err) == (130, "before\n", "interrupted: cell terminated\n")


def test_json_output_is_one_object_per_item_notification_and_outcome(host_path: Path) -> None:
    png = "data:image/png;base64,iVBORw0KGgo="
    cell = f"text('a'); notify('n'); image('{png}'); throw new Error('bad')"
    done = run([*CLI, "run", "--json", "-e", cell])
    assert done.returncode == 1
    assert done.stderr == ""
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records[:3] == [
        {"type": "notification", "text": "n"},
        {"type": "input_text", "text": "a"},
        {"type": "input_image", "image_url": png, "detail": "high"},
    ]
    assert records[3]["type"] == "outcome"
    assert records[3]["kind"] == "result"
    assert records[3]["error_text"].startswith("Error: bad")
    assert len(records) == 4


def test_a_tool_argument_error_names_the_tool_and_the_argument(host_path: Path) -> None:
    cell = "await tools.add({a: 1, b: 'two'})"
    done = run([*CLI, "run", "-e", cell, "--tools", "examples/tools.py"])
    assert done.returncode == 1
    assert done.stderr.strip() == "tool 'add': argument 'b': input should be a valid integer"
