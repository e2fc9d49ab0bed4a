"""How V8 is initialised, in real processes: on the main thread while it is the only one, or
with ``--no-memory-protection-keys`` where other threads exist.

On a CPU with memory protection keys, an isolate created on a thread older than V8's
initialisation faults. This machine may have no such keys, so the tests assert the invariant
itself, from the record :func:`~codemode_trio.host.v8_engine.v8_initialization` keeps: the
executables initialise V8 on the main thread while the process has exactly one OS thread; an
embedding process with other threads gets the flag, which V8 accepts (it writes an error line
on stderr for a flag it does not know), and its cells still run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codemode_trio.host.listen import V8_REPORT_ENV
from codemode_trio.host.v8_engine import NO_PKU_FLAG, V8_FLAGS

REPO = Path(__file__).resolve().parents[2]
REPORT_PREFIX = "v8-initialization: "


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), V8_REPORT_ENV: "1"}


def reported(stderr: str) -> dict[str, Any]:
    lines = [line for line in stderr.splitlines() if line.startswith(REPORT_PREFIX)]
    assert len(lines) == 1, stderr
    record: dict[str, Any] = json.loads(lines[0][len(REPORT_PREFIX) :])
    return record


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "codemode_trio", "serve"],
        [sys.executable, "-m", "codemode_trio.host"],
    ],
    ids=["codemode-trio serve", "codemode-trio-host"],
)
def test_the_executables_initialise_v8_on_the_only_thread(command: list[str]) -> None:
    # stdin is empty: the host reports how V8 was initialised, then ends for want of a hello.
    done = subprocess.run(
        command, input=b"", capture_output=True, env=environment(), timeout=60, check=False
    )
    stderr = done.stderr.decode()
    record = reported(stderr)
    assert record["by"] == "codemode-trio"
    assert record["main_thread"] is True
    assert record["thread_name"] == "MainThread"
    assert record["os_threads"] == 1
    assert record["flags"] == ["--single-threaded", *V8_FLAGS]


def test_without_the_variable_the_host_reports_nothing() -> None:
    env = {**environment()}
    del env[V8_REPORT_ENV]
    done = subprocess.run(
        [sys.executable, "-m", "codemode_trio.host"],
        input=b"",
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert REPORT_PREFIX not in done.stderr.decode()


# Runs one cell through V8CellRuntime, as an embedding program would, and prints how V8 was
# initialised and what the cell said. {setup} runs first.
EMBEDDED = """
import json, threading, trio
from codemode_trio.host.runtime import MISSING
from codemode_trio.host.v8 import V8CellRuntime
from codemode_trio.host import v8_engine

{setup}

class Hooks:
    def __init__(self):
        self.texts = []
    def emit(self, item):
        self.texts.append(item.text)
    def yield_control(self): pass
    def notify(self, text): pass
    async def call_tool(self, binding, input):
        return input
    def store(self, key, value): pass
    def load(self, key):
        return MISSING

async def main():
    hooks = Hooks()
    outcome = await V8CellRuntime().run(
        "text(String(await Promise.resolve(6 * 7)))", (), hooks, max_heap_size_bytes=None
    )
    return hooks.texts, outcome.error_text

texts, error = trio.run(main)
record = v8_engine.v8_initialization()
print(json.dumps({{"record": None if record is None else {{
    "by": record.by, "main": record.main_thread, "threads": record.os_threads,
    "thread": record.thread_name, "flags": record.flags}}, "texts": texts, "error": error}}))
"""


def run_embedded(setup: str) -> tuple[dict[str, Any], str]:
    script = EMBEDDED.format(setup=textwrap.dedent(setup))
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        env=environment(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout.decode().splitlines()[-1])
    return result, done.stderr.decode()


def test_a_process_with_threads_gets_no_memory_protection_keys() -> None:
    result, stderr = run_embedded(
        """
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        v8_engine.initialize_v8()  # on the main thread, but no longer the only one
        """
    )
    record = result["record"]
    assert record["main"] is True
    assert record["threads"] >= 2
    assert record["flags"][-1] == NO_PKU_FLAG
    assert result == {"record": record, "texts": ["42"], "error": None}
    # V8 writes "Error: unrecognized flag ..." for a flag it does not know.
    assert stderr == ""


def test_first_use_off_the_main_thread_gets_no_memory_protection_keys() -> None:
    # Nothing initialises V8 up front: the first isolate is opened on a Trio worker thread.
    result, stderr = run_embedded("")
    record = result["record"]
    assert record["by"] == "codemode-trio"
    assert record["main"] is False
    assert record["thread"] != "MainThread"
    assert NO_PKU_FLAG in record["flags"]
    assert result["texts"] == ["42"]
    assert stderr == ""


def test_v8_initialised_by_mini_racer_is_recorded_as_such() -> None:
    result, _ = run_embedded(
        """
        import py_mini_racer
        assert py_mini_racer.MiniRacer().eval("1 + 1") == 2
        """
    )
    record = result["record"]
    assert record["by"] == "mini-racer"
    assert record["flags"] is None  # not ours to know
    assert result["texts"] == ["42"]
