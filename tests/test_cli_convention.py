"""The command line's one convention, rule by rule, over every subcommand.

Every error is one line ``codemode-trio: error: …`` in the command line's words; a usage error
or a missing input exits 2 everywhere; ``--debug`` adds a traceback and never changes the
status; a bad option shows the usage of the subcommand it was given to. The subcommands are
read from the parser itself, so a new one is held to the same rules.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from codemode_trio import cli
from codemode_trio.conformance import SCENARIOS

REPO = Path(__file__).resolve().parents[1]
ERROR = "codemode-trio: error: "
# Python spellings the command line must not use for its own options and arguments.
API_WORDS = re.compile(r"host_path argument|yield_time_ms|allow_unpinned|tools_spec|json_output")


def leaf_commands() -> list[tuple[str, ...]]:
    """Every runnable command path, e.g. ("host", "fetch"), read from the parser."""

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found += walk(child, (*path, name))
        return found or [path]

    return walk(cli.build_parser(), ())


LEAVES = leaf_commands()


def test_the_parser_has_the_commands_the_rules_are_tested_on() -> None:
    # A guard for the parametrizations below: each rule must see every command.
    assert {leaf[0] for leaf in LEAVES} >= {"run", "host", "transcript", "serve", "conform"}
    assert ("transcript", "show") in LEAVES and ("host", "path") in LEAVES


def run_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(cli.DEBUG_ENV, None)
    return subprocess.run(
        [sys.executable, "-m", "codemode_trio", *argv],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("leaf", LEAVES, ids=" ".join)
def test_a_bad_option_shows_that_commands_usage_in_a_subprocess(leaf: tuple[str, ...]) -> None:
    done = run_cli(*leaf, "--no-such-option")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"usage: codemode-trio {' '.join(leaf)} ")
    assert lines[-1].startswith(ERROR)
    assert sum(line.startswith(ERROR) for line in lines) == 1
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("leaf", LEAVES, ids=" ".join)
def test_an_unrecognized_argument_is_refused_by_the_command_itself(
    leaf: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given what each command needs, so that the one error left is the stray argument.
    needs = {
        ("run",): ["-e", "1"],
        ("transcript", "show"): ["t.cbor"],
        ("transcript", "replay"): ["t.cbor", "--host", "h"],
        ("conform",): ["--list"],
    }
    assert cli.main([*leaf, *needs.get(leaf, []), "--stray"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: codemode-trio {' '.join(leaf)} ")
    assert err.splitlines()[-1] == f"{ERROR}unrecognized arguments: --stray"


# One command per input a user names, each naming a path that is not there.
MISSING = [
    ["run", "./missing.js"],
    ["run", "-e", "1", "--tools", "./missing_tools.py"],
    ["run", "-e", "1", "--host", "./missing-host"],
    ["run", "-e", "1", "--transcript", "./no-dir/t.cbor"],
    ["host", "path", "./missing-host"],
    ["transcript", "show", "./missing.cbor"],
    ["transcript", "show", "--html", "out.html", "./missing.cbor"],
    ["transcript", "replay", "./missing.cbor", "--host", "true"],
    ["transcript", "replay", "./missing.cbor", "--client", "true"],
    ["conform", "--host", "./missing-host"],
    ["demo", "--host", "./missing-host"],
    ["serve", "--listen", "wss://127.0.0.1:0", "--tls-cert", "./c.pem", "--tls-key", "./k.pem"],
]


def test_every_command_that_takes_an_input_is_in_the_missing_input_list() -> None:
    covered = {
        tuple(argv[:2]) if argv[0] in ("host", "transcript") else (argv[0],) for argv in MISSING
    }
    assert covered >= {leaf for leaf in LEAVES if leaf != ("host", "fetch")}


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
@pytest.mark.parametrize("argv", MISSING, ids=" ".join)
def test_a_missing_input_is_status_2_and_one_line_naming_it_as_typed(
    argv: list[str],
    debug: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    typed = next(word for word in argv if word.startswith("./"))
    assert cli.main(["--debug", *argv] if debug else argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    last = err.splitlines()[-1]
    assert last.startswith(ERROR)
    assert typed in last  # the path as the user typed it, ./ and all
    assert not API_WORDS.search(last)
    if debug:
        assert err.startswith("Traceback (most recent call last):")
    else:
        assert err == f"{last}\n"


@pytest.fixture
def failing_host(tmp_path: Path) -> Path:
    """A host that dies at once, writing an escape sequence to its stderr."""
    host = tmp_path / "failing-host"
    host.write_text("#!/bin/sh\nprintf 'boom \\033]0;owned\\007\\n' >&2\nexit 3\n")
    host.chmod(0o755)
    return host


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_a_host_failure_is_status_1_with_and_without_debug(
    debug: bool, failing_host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "-e", "1", "--host", str(failing_host)]
    assert cli.main(["--debug", *argv] if debug else argv) == 1
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    # The host's own reference text follows the prefix, its stderr tail escaped.
    assert last.startswith(f"{ERROR}")
    assert "host exited with status 3" in last
    assert "boom \\x1b]0;owned\\x07" in last
    assert "\x1b" not in err
    assert err.startswith("Traceback") if debug else err == f"{last}\n"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["run", "-e", "1", "--yield-time-ms", "99999999999999999999"], "argument --yield-time-ms"),
        (["run", "-e", "1", "--yield-time-ms", "-5"], "argument --yield-time-ms"),
        (["host", "fetch", "--version", "0.172.0"], "give --allow-unpinned"),
        (["host", "path", "./nowhere"], "./nowhere (HOST_PATH) does not exist"),
        (["run", "-e", "1", "--host", "./nowhere"], "./nowhere (--host) does not exist"),
        (["conform", "--host", "/nonexistent/host"], "/nonexistent/host: it does not exist"),
        (["conform", "--host", "no-such-host-command"], "not found on $PATH"),
    ],
)
def test_errors_speak_the_command_lines_words(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(ERROR)
    assert words in last
    assert not API_WORDS.search(last)


def test_conform_list_prints_every_scenario_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conform", "--list"]) == 0
    assert capsys.readouterr() == ("".join(f"{s.name}\n" for s in SCENARIOS), "")


def test_conform_with_an_unknown_scenario_lists_the_valid_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["conform", "--host", "true", "--scenario", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"{ERROR}no scenario named 'nope'")
    assert all(scenario.name in err for scenario in SCENARIOS)


def test_conform_says_why_a_host_could_not_run(
    failing_host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = SCENARIOS[0].name
    assert cli.main(["conform", "--host", str(failing_host), "--scenario", scenario]) == 1
    out = capsys.readouterr().out
    # Its exit status and its stderr tail, escaped.
    assert "exit 3: boom \\x1b]0;owned\\x07" in out
    assert "\x1b" not in out


def test_conform_without_a_target_or_list_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["conform"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: codemode-trio conform")
    assert (
        err.splitlines()[-1]
        == f"{ERROR}one of the arguments --host --client is required (or --list)"
    )


def test_an_error_text_from_a_tools_module_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = tmp_path / "title_tools.py"
    tools.write_text("raise RuntimeError('\\x1b]0;owned\\x07 \\u202e')\n")
    assert cli.main(["run", "-e", "1", "--tools", str(tools)]) == 2
    err = capsys.readouterr().err
    assert err.endswith("RuntimeError: \\x1b]0;owned\\x07 \\u202e\n")
    assert "\x1b" not in err and "\u202e" not in err
