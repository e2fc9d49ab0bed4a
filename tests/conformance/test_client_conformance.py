"""``conform --client``: our client breaks no rule; a deliberately broken one is caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from codemode_trio.conformance.client_rules import ClientRuleChecker
from codemode_trio.conformance.steps import frame, hello, raw_frame

from ..conftest import REPO

BROKEN = Path(__file__).with_name("broken_client.py")


def _conform_client(client: str, host: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "codemode_trio",
            "conform",
            "--client",
            client,
            "--reference-host",
            str(host),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def test_our_client_breaks_no_rule(rust_host_path: Path) -> None:
    result = _conform_client(f"{sys.executable} examples/02_tools.py", rust_host_path)
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["violations"] == []
    assert report["passed"], result.stderr
    assert report["connections"] >= 1
    assert result.returncode == 0


def test_a_broken_client_is_caught_rule_by_rule(rust_host_path: Path) -> None:
    result = _conform_client(f"{sys.executable} {BROKEN}", rust_host_path)
    assert result.returncode == 1
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["exit_status"] == 0  # it believes all went well
    assert [(v["rule"], v["detail"]) for v in report["violations"]] == [
        ("closed-session", "session/execute on session 's0', which was never opened"),
        ("wait-before-initial-response", "wait on cell 1 of 's1' before its initial response"),
        ("unknown-delegate", "delegate 99 was never requested"),
        ("capability", "operation/yield sent without yield-observation"),
        ("answered-cancelled-delegate", "delegate 1 was cancelled"),
        ("closed-session", "session/shutdown on session 's1', which was shut down"),
        ("request-id-reused", "request id 2 (session/open) used before"),
    ]


def test_a_client_that_never_connects_does_not_pass(rust_host_path: Path) -> None:
    result = _conform_client(f"{sys.executable} -c pass", rust_host_path)
    assert result.returncode == 1
    assert json.loads(result.stdout)["connections"] == 0


def test_checker_reports_framing_and_decoding_faults() -> None:
    checker = ClientRuleChecker()
    checker.client_bytes(frame({"type": "operation/cancel", "id": 1}))
    checker.client_bytes(hello(optional=[]).payload())
    checker.client_bytes(hello(optional=[]).payload())
    checker.client_bytes(raw_frame(b'{"type":"operation/zzz"}'))
    checker.client_bytes(b"\x05\x00\x00\x00{")
    checker.client_eof()
    assert [v.rule for v in checker.violations] == [
        "hello-first",
        "second-hello",
        "malformed-message",
        "cut-off-frame",
    ]
    oversize = ClientRuleChecker()
    oversize.client_bytes((64 * 1024 * 1024 + 1).to_bytes(4, "little"))
    oversize.client_bytes(b"more")
    assert [str(v) for v in oversize.violations] == [
        "frame-too-large: a frame of 67108865 bytes exceeds 67108864 bytes"
    ]


def test_checker_knows_what_the_host_granted() -> None:
    checker = ClientRuleChecker()
    checker.client_bytes(hello().payload())
    checker.host_bytes(
        frame(
            {
                "type": "connection/ready",
                "selectedVersion": 1,
                "capabilities": ["yield-observation"],
            }
        )
    )
    checker.client_bytes(frame({"type": "operation/yield", "id": 1}))
    checker.client_bytes(
        frame(
            {
                "type": "operation/request",
                "id": 1,
                "request": {
                    "method": "session/open",
                    "sessionId": "s",
                    "outputTruncation": "server",
                },
            }
        )
    )
    assert [str(v) for v in checker.violations] == [
        "capability: outputTruncation sent without bounded-output-v1"
    ]
