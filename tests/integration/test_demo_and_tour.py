"""The packaged demo and the README's short tour, run as a user would, on each real host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO_STDOUT = ["apple: 12", "pear: 3", "plum: 0", "total: 15"]


def run(args: list[str], host_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CODEX_CODE_MODE_HOST_PATH": str(host_path)}
    return subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_demo_command_runs_the_packaged_cell(host_path: Path) -> None:
    done = run([sys.executable, "-m", "codemode_trio", "demo"], host_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == DEMO_STDOUT
    assert done.stderr.splitlines() == ["[notify] checked 3 items"]


def test_demo_module_takes_the_same_arguments(host_path: Path) -> None:
    done = run([sys.executable, "-m", "codemode_trio.demo", "--host", str(host_path)], host_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == DEMO_STDOUT


def test_demo_with_a_missing_host_is_one_line() -> None:
    done = run([sys.executable, "-m", "codemode_trio", "demo", "--host", "/nonexistent/host"], REPO)
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.startswith("codemode-trio: error: ")
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_examples_inventory_is_the_packaged_cell() -> None:
    # The README's first command reads examples/; an installed wheel has only the package.
    packaged = REPO / "codemode_trio" / "demo" / "inventory.js"
    assert (REPO / "examples" / "inventory.js").read_bytes() == packaged.read_bytes()


def readme_tour() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    tour = text.split("## A short tour", 1)[1]
    match = re.search(r"```python\n(.*?)```", tour, re.DOTALL)
    assert match, "the README's tour has no python block"
    return match.group(1)


def test_readme_tour_prints_what_the_readme_says(host_path: Path, tmp_path: Path) -> None:
    script = tmp_path / "tour.py"
    script.write_text(readme_tour(), encoding="utf-8")
    done = run([sys.executable, str(script)], host_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["notified: adding", "result 3", "Error: no such item"]


def test_readme_tour_checks_error_text_and_handles_notifications() -> None:
    tour = readme_tour()
    assert "@tools.on_notification" in tour
    assert "error_text" in tour
