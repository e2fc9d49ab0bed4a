"""The conformance suite against real hosts: 0.171.0 and our own pass, 0.150.0 shows its age.

Every host here is a real process (the Rust binaries, ``codemode-trio serve``); a missing
binary fails the test. Each run is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from codemode_trio.conformance import (
    SCENARIOS,
    HostTarget,
    ScenarioResult,
    load_reference,
    run_suite,
)

from ..conftest import REPO


def _failures(results: list[ScenarioResult]) -> dict[str, str]:
    return {result.scenario: result.detail for result in results if not result.passed}


def test_suite_is_large_and_every_scenario_names_its_section() -> None:
    names = [scenario.name for scenario in SCENARIOS]
    assert len(names) >= 40
    assert len(set(names)) == len(names)
    assert all(scenario.section.startswith("§") for scenario in SCENARIOS)
    assert set(load_reference()) == set(names)
    sections = {scenario.section.split(".")[0] for scenario in SCENARIOS}
    for section in ("§1", "§2", "§3", "§4", "§6", "§7", "§8", "§9", "§10", "§11", "§12", "§13"):
        assert section in sections


async def test_reference_host_passes_every_scenario(rust_host_path: Path) -> None:
    with trio.fail_after(60):
        results = await run_suite([HostTarget.parse(str(rust_host_path))])
    assert _failures(results) == {}
    assert len(results) == len(SCENARIOS)


async def test_our_host_passes_every_scenario(serve_host_path: Path) -> None:
    with trio.fail_after(90):
        results = await run_suite([HostTarget.parse(str(serve_host_path))])
    assert _failures(results) == {}
    assert len(results) == len(SCENARIOS)


async def test_older_host_shows_its_known_differences(older_host_path: Path) -> None:
    with trio.fail_after(90):
        results = await run_suite([HostTarget.parse(str(older_host_path))], frame_timeout=5)
    failures = _failures(results)
    # What 0.150.0 lacks, each named in the first difference (SPEC §17).
    assert "missing 'result_buffered_for_ns'" in failures["execute-result"]
    assert "missing 'code_mode_host_duration_ns'" in failures["yield-control-then-wait"]
    assert "client control message" in failures["frame-zero-length"]
    assert "unknown variant `operation/yield`" in failures["operation-yield-on-execute"]
    assert "unknown field `outputTruncation`" in failures["bounded-output"]
    assert "capabilities" in failures["hello-every-capability"]
    # What has not changed since then still passes.
    for same in (
        "hello-no-capabilities",
        "reject-first-message-not-hello",
        "reject-no-compatible-version",
        "reject-missing-required-capability",
        "session-open-duplicate",
        "second-hello",
        "eof-before-hello",
    ):
        assert same not in failures


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codemode_trio", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_cli_table_and_json_for_two_hosts(rust_host_path: Path, older_host_path: Path) -> None:
    picks = ("execute-result", "hello-no-capabilities")
    chosen = [arg for name in picks for arg in ("--scenario", name)]
    hosts = ["--host", str(rust_host_path), "--host", str(older_host_path)]
    table = _cli("conform", *hosts, *chosen)
    assert table.returncode == 1, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"host 1: {rust_host_path}"
    assert lines[1] == f"host 2: {older_host_path}"
    row = next(line for line in lines if line.startswith("execute-result"))
    assert row.split() == ["execute-result", "§6.2", "pass", "FAIL"]
    detail = lines[lines.index(row) + 1]
    assert detail.startswith("    host 2: expect #3 frame 2 (execute/initialResponse)")
    assert "host 1: 2/2 scenarios pass" in lines
    assert "host 2: 1/2 scenarios pass" in lines

    as_json = _cli("conform", *hosts, *chosen, "--json")
    assert as_json.returncode == 1
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(records) == 4
    assert {tuple(sorted(record)) for record in records} == {
        ("detail", "host", "passed", "scenario", "section")
    }
    failed = [record for record in records if not record["passed"]]
    assert [(r["scenario"], r["host"]) for r in failed] == [
        ("execute-result", str(older_host_path))
    ]


def test_cli_exit_zero_when_all_pass(rust_host_path: Path) -> None:
    result = _cli("conform", "--host", str(rust_host_path), "--scenario", "wait-missing-cell")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "host 1: 1/1 scenarios pass"


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--host", "tcp://nowhere"], 2, "expected tcp://HOST:PORT"),
        (["--host", "ws://127.0.0.1:99999/?token=secret"], 2, "expected ws://HOST:PORT/PATH"),
        (["--host", "/no/such/host"], 2, "cannot run host /no/such/host: it does not exist"),
        (["--host", "x", "--scenario", "nope"], 2, "no scenario named 'nope'"),
        (["--host", "'unbalanced"], 2, "No closing quotation"),
    ],
)
def test_cli_bad_arguments_are_one_line(args: list[str], status: int, message: str) -> None:
    result = _cli("conform", *args)
    assert result.returncode == status
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert message in result.stderr


@pytest.mark.parametrize("scheme", ["tcp", "ws"])
async def test_our_host_on_a_listener_passes_every_scenario(scheme: str) -> None:
    # serve on TCP and on a WebSocket (the printed URL carries its token), one connection and
    # so one worker process per scenario; exit status and stderr are not compared.
    command = [
        *(sys.executable, "-m", "codemode_trio", "serve"),
        *("--listen", f"{scheme}://127.0.0.1:0"),
    ]
    with trio.fail_after(300):
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, env={"PYTHONPATH": str(REPO)}
        )
        try:
            assert process.stdout is not None
            announced = b""
            while not announced.endswith(b"\n"):
                announced += await process.stdout.receive_some(1)
            url = announced.decode().strip()
            target = HostTarget.parse(url)
            assert "token=" not in target.label
            results = await run_suite([target])
        finally:
            process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()
    assert _failures(results) == {}
    assert len(results) == len(SCENARIOS)


def test_a_websocket_target_keeps_its_token_out_of_the_label() -> None:
    target = HostTarget.parse("ws://127.0.0.1:7070/?token=secret")
    assert target.url == "ws://127.0.0.1:7070/?token=secret"
    assert target.label == "ws://127.0.0.1:7070/?…"
    assert HostTarget.parse("wss://[::1]:443/").label == "wss://[::1]:443/"
