"""What a spawned host sees of our environment: an allow-list, never our secrets."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import trio

import codemode_trio as cm
from codemode_trio.transport.environment import host_environment

SECRETS = {
    "OPENAI_API_KEY": "sk-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "GITHUB_TOKEN": "ghp-secret",
    "CODEX_API_KEY": "codex-secret",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
    "RUST_REGISTRY_TOKEN": "cargo-secret",
    "DATABASE_URL": "postgres://user:pw@db/x",
}
ALLOWED = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/someone",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TMPDIR": "/tmp/someone",
    "TZ": "Europe/Paris",
    "NO_COLOR": "1",
    "RUST_BACKTRACE": "1",
    "CODEX_HOME": "/home/someone/.codex",
    "OTEL_SERVICE_NAME": "probe",
}


def test_the_allow_list_keeps_locale_paths_and_tuning_and_drops_secrets() -> None:
    assert host_environment(base={**SECRETS, **ALLOWED}) == ALLOWED


def test_extra_variables_are_added_and_win_even_when_they_look_secret() -> None:
    base = {**SECRETS, **ALLOWED}
    env = host_environment({"TZ": "UTC", "OPENAI_API_KEY": "given"}, base=base)
    assert env == {**ALLOWED, "TZ": "UTC", "OPENAI_API_KEY": "given"}


def test_inherit_env_keeps_everything() -> None:
    base = {**SECRETS, **ALLOWED}
    assert host_environment({"EXTRA": "1"}, inherit_env=True, base=base) == {**base, "EXTRA": "1"}


def spy_host(tmp_path: Path) -> tuple[Path, Path]:
    """A program used as the host: it records its environment as JSON, then exits."""
    record = tmp_path / "env.json"
    spy = tmp_path / "spy-host"
    spy.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'w') as out:\n"
        "    json.dump(dict(os.environ), out)\n"
        "sys.exit(0)\n"
    )
    spy.chmod(spy.stat().st_mode | stat.S_IXUSR)
    return spy, record


@pytest.mark.parametrize("transport", ["stdio", "grpc"])
@pytest.mark.parametrize("inherit_env", [False, True])
async def test_a_spy_host_sees_the_allow_list_and_what_the_caller_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inherit_env: bool, transport: str
) -> None:
    for name, value in {**SECRETS, **ALLOWED}.items():
        monkeypatch.setenv(name, value)
    # Keep the interpreter's own lookups working in the spy (PATH is allowed anyway).
    monkeypatch.setenv("PATH", os.environ["PATH"])
    spy, record = spy_host(tmp_path)
    with trio.fail_after(20), pytest.raises(cm.ConnectionFailed) as caught:
        async with cm.open_host_process(
            spy, env={"SPY_EXTRA": "1"}, inherit_env=inherit_env, transport=transport
        ):
            pass
    # The spy exits without answering the hello: a clean handshake failure, naming the exit.
    if transport == "stdio":
        assert "code-mode host exited during handshake" in str(caught.value)
    assert "exited with status 0" in str(caught.value)
    seen = json.loads(record.read_text())
    assert seen["SPY_EXTRA"] == "1"
    for name in ALLOWED:
        assert seen[name] == os.environ[name]
    leaked = {name for name in SECRETS if name in seen}
    assert leaked == (set(SECRETS) if inherit_env else set())


async def test_the_real_host_runs_with_only_the_allow_listed_environment(
    host_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TZ is one of the few variables host 0.171.0 reads (V8's Date): it must reach the host.
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as session:
            result = await session.run("text(new Date(0).toString())")
    assert "GMT+0900" in result.text
