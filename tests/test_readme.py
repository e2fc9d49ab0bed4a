"""The README is a front door: short, with the two commands that CI runs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
CI = (REPO / ".ci" / "run").read_text(encoding="utf-8")


def shell_blocks() -> list[str]:
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", README, re.DOTALL)]


def test_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_the_two_commands_run_the_demo_and_the_test_command_of_ci() -> None:
    first, second = shell_blocks()[:2]
    assert first.endswith("codemode-trio run examples/inventory.js --tools examples/tools.py")
    assert second.endswith("&& python -m pytest")
    # .ci/run's last command is the README's test command, character for character.
    last = [line for line in CI.splitlines() if line.strip() and not line.startswith("#")][-1]
    assert last == "python -m pytest"


def test_the_commands_name_files_that_exist() -> None:
    first = shell_blocks()[0]
    for path in re.findall(r"examples/[\w.]+", first):
        assert (REPO / path).is_file(), path
