"""Every lesson of the course in ``examples/`` still teaches the truth on the real host.

Each numbered example runs as a learner runs it (``python examples/NN_name.py``, a real
subprocess against host 0.171.0), checks its own properties and exits non-zero when one does
not hold. Here we assert that exit status and the output lines the lesson tells the learner
to watch for.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codemode_trio import hostbin

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

# What each lesson prints when it holds (a line must contain each string).
KEY_LINES: dict[str, list[str]] = {
    "01_hello.py": ["result 'hello from V8, 42'", "tasks still alive: []"],
    "02_tools.py": [
        "squares: [1,4,9]",
        "caught string: unknown item 'kiwi'",
        "code-mode delegate task failed: KeyError: 'kiwi'",
    ],
    "03_notifications.py": ["notify from cell 1: first", "run() returns 'script finished'"],
    "04_cancel_scopes.py": [
        "first wait abandoned: True",
        "C→H OperationCancel",
        "code-mode request cancelled",
        "live cells after cell/closed: 0",
    ],
    "05_delegate_cancellation.py": [
        "terminate returned 'terminated'; active delegates 0",
        "finally done",
        "H→C DelegateCancel",
    ],
    "06_deadlines.py": [
        "-> yielded 'working'",
        "-> TooSlowError",
        "ConnectionFailed: code-mode host timed out waiting for wait response",
    ],
    "07_many_sessions.py": [
        "visits: {'home': 12}",
        "alpha: cancelled",
        "beta: cancelled",
        "our nursery raised: (CellError('gamma: Error: no access'),)",
    ],
    "08_failure.py": [
        "raised ConnectionFailed: code-mode host closed its stdout",
        "40 delegate calls in flight",
        "still alive: []",
    ],
    "09_backpressure.py": ["2 jobs buffered, 1 taken, 7 tools in send()", "tools still waiting"],
    "10_shielded_cleanup.py": [
        "careless('b'): rolling back",
        "careful('a'): rolled back",
        "careful('c'): rolled back",
    ],
}
SECTIONS = ("Concept:", "Rust/tokio:", "Trio:", "Watch:", "Try this:")


@pytest.fixture(scope="module")
def reference_host() -> Path:
    path = hostbin.host_path_for(hostbin.PINNED_VERSION)
    if not path.is_file():
        pytest.fail(f"host {hostbin.PINNED_VERSION} is required: `codemode-trio host fetch`")
    return path


def run_example(name: str, host: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        hostbin.HOST_PATH_ENV: str(host),
    }
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_the_course_is_the_ten_numbered_lessons() -> None:
    numbered = sorted(path.name for path in EXAMPLES.glob("[0-9][0-9]_*.py"))
    assert numbered == sorted(KEY_LINES)


@pytest.mark.parametrize("name", sorted(KEY_LINES))
def test_lesson_docstring_has_every_section(name: str) -> None:
    docstring = ast.get_docstring(ast.parse((EXAMPLES / name).read_text()))
    assert docstring is not None
    assert docstring.startswith(name[:2] + " ")
    missing = [section for section in SECTIONS if section not in docstring]
    assert missing == []
    positions = [docstring.index(section) for section in SECTIONS]
    assert positions == sorted(positions), "sections out of order"


@pytest.mark.parametrize("name", sorted(KEY_LINES))
def test_lesson_holds_on_the_real_host(name: str, reference_host: Path) -> None:
    done = run_example(name, reference_host)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("FAIL")]
    assert lines[-1] == "all properties held"
    for key in KEY_LINES[name]:
        assert any(key in line for line in lines), f"{key!r} not in:\n{done.stdout}"


def test_lesson_ten_shows_the_careless_rollback_never_finishing(reference_host: Path) -> None:
    done = run_example("10_shielded_cleanup.py", reference_host)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "careless('b'): rolled back" not in done.stdout
