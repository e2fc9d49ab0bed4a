from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import codemode_trio
from codemode_trio import cli, hostbin

FAKE_BINARY = b"#!/bin/sh\nexit 0\n"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("CODEX_CODE_MODE_HOST_PATH", raising=False)
    monkeypatch.setenv("CODEMODE_TRIO_CACHE", str(tmp_path / "cache"))
    return tmp_path


def make_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(FAKE_BINARY)
    path.chmod(0o755)
    return path


def test_host_path_prints_the_located_host(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    host = make_executable(env / "somewhere" / "host")
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", str(host))
    assert cli.main(["host", "path"]) == 0
    assert capsys.readouterr() == (f"{host}\n", "")


def test_host_path_accepts_an_explicit_path(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = make_executable(env / "explicit")
    assert cli.main(["host", "path", str(host)]) == 0
    assert capsys.readouterr().out == f"{host}\n"


def test_host_path_not_found_explains_on_stderr(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["host", "path"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "codex-code-mode-host was not found" in err
    assert "$CODEX_CODE_MODE_HOST_PATH (not set)" in err
    assert str(hostbin.host_path_for()) in err
    assert "codemode-trio host fetch" in err


def test_host_fetch_prints_installed_path(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    version = "9.9.9"
    pins = dict(hostbin.HOST_SHA256)
    pins[(version, hostbin.platform_tag())] = hashlib.sha256(FAKE_BINARY).hexdigest()
    monkeypatch.setattr(hostbin, "HOST_SHA256", pins)

    def fake_download(spec: str, workdir: Path, say: hostbin.Progress) -> Path:
        triple = {"linux-x64": "x86_64", "linux-arm64": "aarch64"}[hostbin.platform_tag()]
        tarball = workdir / "pkg.tgz"
        with tarfile.open(tarball, "w:gz") as archive:
            info = tarfile.TarInfo(
                f"package/vendor/{triple}-unknown-linux-musl/bin/codex-code-mode-host"
            )
            info.size = len(FAKE_BINARY)
            archive.addfile(info, io.BytesIO(FAKE_BINARY))
        return tarball

    monkeypatch.setattr(hostbin, "_download_package", fake_download)
    assert cli.main(["host", "fetch", "--version", version]) == 0
    out, err = capsys.readouterr()
    installed = hostbin.host_path_for(version)
    assert out == f"{installed}\n"
    assert "installed" in err
    assert installed.read_bytes() == FAKE_BINARY

    # Cached and verified: a second fetch downloads nothing and prints the same path.
    monkeypatch.setattr(hostbin, "_download_package", pytest.fail)
    assert cli.main(["host", "fetch", "--version", version]) == 0
    assert capsys.readouterr() == (f"{installed}\n", "")


def test_host_fetch_refuses_unpinned_version(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["host", "fetch", "--version", "0.0.1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("codemode-trio: error: no SHA-256 pin for codex-code-mode-host 0.0.1")
    # In the command line's words: the option, not the Python parameter.
    assert err.endswith("give --allow-unpinned to install it anyway\n")
    assert "allow_unpinned" not in err


def test_host_fetch_passes_force_and_allow_unpinned(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, bool, bool]] = []

    def fake_fetch(
        version: str, *, force: bool, allow_unpinned: bool, progress: hostbin.Progress
    ) -> Path:
        calls.append((version, force, allow_unpinned))
        return Path("/x/host")

    monkeypatch.setattr(hostbin, "fetch_host", fake_fetch)
    assert cli.main(["host", "fetch", "--force", "--allow-unpinned", "--version", "1.2.3"]) == 0
    assert calls == [("1.2.3", True, True)]
    assert cli.main(["host", "fetch"]) == 0
    assert calls[-1] == (hostbin.PINNED_VERSION, False, False)
    assert capsys.readouterr().out == "/x/host\n/x/host\n"


@pytest.mark.parametrize("argv", [[], ["host"], ["nope"]])
def test_missing_or_unknown_command_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert "usage: codemode-trio" in capsys.readouterr().err


def test_python_dash_m_runs_the_cli(env: Path) -> None:
    host = make_executable(env / "host")
    repo = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "codemode_trio", "host", "path", str(host)],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{host}\n", "")


def test_host_path_prints_the_absolute_path_that_would_run(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    host = make_executable(env / "tools" / "host")
    monkeypatch.chdir(env)
    assert cli.main(["host", "path", "tools/host"]) == 0
    assert capsys.readouterr().out == f"{host}\n"


def test_host_path_explains_a_cached_host_that_changed(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cached = make_executable(hostbin.host_path_for())
    pin = hostbin.expected_sha256(hostbin.PINNED_VERSION)
    record = {"sha256": pin, "size": 1, "mtime_ns": 1}
    hostbin.verified_record_path(cached).write_text(json.dumps(record))
    assert cli.main(["host", "path"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        f"codemode-trio: error: cached host {cached} changed since it was verified"
    )
    assert err.count("\n") == 1
    assert "codemode-trio host fetch" in err


@pytest.mark.parametrize("version", ["../../x", "1.2"])
def test_host_fetch_refuses_a_malformed_version_as_a_usage_error(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    monkeypatch.setattr(hostbin, "_download_package", pytest.fail)
    assert cli.main(["host", "fetch", "--version", version, "--allow-unpinned"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"codemode-trio: error: invalid host version {version!r}")
    assert err.count("\n") == 1
    assert sorted(p.name for p in env.iterdir()) == ["bin"]


# --------------------------------------------------------------------------- run: usage errors


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"codemode-trio {codemode_trio.__version__}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "-e", "text(1)", "cell.js"], "give a JavaScript FILE or -e SOURCE, not both"),
        (["run"], "give a JavaScript FILE or -e SOURCE"),
        (["run", "--yield-time-ms", "-5", "-e", "1"], "--yield-time-ms: must be 0 or more, got -5"),
        (["run", "--yield-time-ms", "soon", "-e", "1"], "not a whole number of milliseconds"),
    ],
)
def test_run_usage_errors_exit_2_before_anything_runs(
    argv: list[str], message: str, env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: codemode-trio run")
    assert err.splitlines()[-1].startswith("codemode-trio: error: ")
    assert message in err.splitlines()[-1]


def test_a_tools_file_that_raises_on_import_is_one_line_naming_file_and_error(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = env / "broken_tools.py"
    broken.write_text("import codemode_trio as cm\ntools = cm.ToolRegistry()\n1 / 0\n")
    assert cli.main(["run", "-e", "1", "--tools", str(broken)]) == 2
    assert capsys.readouterr() == (
        "",
        f"codemode-trio: error: tools file {broken} failed to import: "
        "ZeroDivisionError: division by zero\n",
    )
    assert "broken_tools" not in sys.modules


def test_a_tools_file_with_a_syntax_error_is_one_line(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = env / "typo_tools.py"
    broken.write_text("def (:\n")
    assert cli.main(["run", "-e", "1", "--tools", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        f"codemode-trio: error: tools file {broken} failed to import: SyntaxError"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_tools_module", "cannot import tools module 'no_such_tools_module'"),
        ("missing.py", "tools file not found: missing.py"),
    ],
)
def test_a_missing_tools_module_is_a_usage_error(
    spec: str, message: str, env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "-e", "1", "--tools", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"codemode-trio: error: {message}")
    assert err.count("\n") == 1


def test_an_unreadable_cell_file_is_a_usage_error(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", str(env / "nope.js")]) == 2
    assert capsys.readouterr().err.startswith(f"codemode-trio: error: cannot read {env}/nope.js")


def test_a_missing_host_is_one_line_and_status_1(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "-e", "1"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("codemode-trio: error: codex-code-mode-host was not found")


@pytest.mark.parametrize("how", ["flag", "flag after run", "environment"])
def test_debug_adds_the_traceback_and_keeps_the_status(
    how: str, env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = env / "broken_tools.py"
    broken.write_text("raise RuntimeError('no tools today')\n")
    argv = ["run", "-e", "1", "--tools", str(broken)]
    if how == "flag":
        argv.insert(0, "--debug")
    elif how == "flag after run":
        argv.insert(1, "--debug")
    else:
        monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    # The cause, the user's module's own error, is part of the traceback.
    assert "RuntimeError: no tools today" in err
    assert err.splitlines()[-1] == (
        f"codemode-trio: error: tools file {broken} failed to import: RuntimeError: no tools today"
    )
