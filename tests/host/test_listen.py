"""``codemode-trio serve``: where it listens, and serving loopback TCP with the V8 runtime."""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

import codemode_trio as cm
from codemode_trio.faults import FAULTS, parse_faults
from codemode_trio.host.listen import (
    BYTE_STREAM_FAULTS,
    ListenAddress,
    ListenError,
    check_faults,
    parse_listen,
)
from codemode_trio.protocol import ConnectionHello, encode_client_frame

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "codemode_trio", "serve"]


@pytest.mark.parametrize("url", ["stdio", "stdio://"])
def test_stdio_spellings_of_the_rust_host_are_accepted(url: str) -> None:
    assert parse_listen(url).is_stdio


def test_tcp_urls_parse_and_loopback_is_the_default() -> None:
    assert parse_listen("tcp://127.0.0.1:0") == ListenAddress("127.0.0.1", 0)
    assert parse_listen("tcp://[::1]:8080") == ListenAddress("::1", 8080)
    with pytest.raises(ListenError, match="--allow-remote"):
        parse_listen("tcp://0.0.0.0:80")
    assert parse_listen("tcp://0.0.0.0:80", allow_remote=True) == ListenAddress("0.0.0.0", 80)


@pytest.mark.parametrize("url", ["bogus", "tcp://127.0.0.1", "tcp://host:1", "tcp://1.2.3.4:99999"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ListenError):
        parse_listen(url, allow_remote=True)


def test_serve_refuses_a_bad_url_in_one_line_with_status_2() -> None:
    done = subprocess.run(
        [*SERVE, "--listen", "bogus"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        "codemode-trio: error: unsupported --listen URL `bogus`; "
        "expected `stdio`, `stdio://`, `tcp://IP:PORT`, `ws://IP:PORT` or `wss://IP:PORT`\n"
    )


async def test_serve_over_tcp_prints_its_url_first_and_serves_each_socket() -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    [*SERVE, "--listen", "tcp://127.0.0.1:0"],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
            )
            assert process.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(1)
            url = line.decode().strip()
            assert url.startswith("tcp://127.0.0.1:")
            port = int(url.rsplit(":", 1)[1])
            for n in range(2):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with cm.open_connection(stream) as conn, conn.open_session() as session:
                    result = await session.run(f"text('hello {n}')")
                assert result.text == f"hello {n}"
            process.terminate()


def test_the_host_executable_dies_by_sigint_on_stdio_like_the_rust_host() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "codemode_trio.host"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        hello = encode_client_frame(ConnectionHello((1,), (), ()))
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(hello)
        process.stdin.flush()
        (length,) = struct.unpack("<I", process.stdout.read(4))
        process.stdout.read(length)  # connection/ready: the host is serving
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGINT
    assert stderr == b""


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown fault 'nope'; known faults: drop-after, stall-after"),
        ("drop-after=x", "fault drop-after: expected a count, got 'x'"),
        ("slow,slow", "fault slow given twice"),
    ],
)
def test_serve_refuses_a_bad_fault_in_one_line_with_status_2(spec: str, message: str) -> None:
    done = subprocess.run(
        [*SERVE, "--fault", spec],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"codemode-trio: error: {message}")


def test_faults_that_cut_a_frame_are_refused_for_websockets_only() -> None:
    websocket = parse_listen("ws://127.0.0.1:0")
    for name in BYTE_STREAM_FAULTS:
        with pytest.raises(cm.UsageError, match=f"^fault {name} cannot be injected on ws://"):
            check_faults(websocket, parse_faults(f"drop-after,{name}=2"))
        check_faults(parse_listen("tcp://127.0.0.1:0"), parse_faults(name))
        check_faults(parse_listen("stdio"), parse_faults(name))
    check_faults(websocket, parse_faults(",".join(set(FAULTS) - set(BYTE_STREAM_FAULTS))))


@pytest.mark.parametrize(
    ("command", "spec", "prefix"),
    [
        (SERVE, "truncate-after", "codemode-trio"),
        (SERVE, "slow,oversize-after=2", "codemode-trio"),
        ([sys.executable, "-m", "codemode_trio.host"], "truncate-after=1", "codemode-trio-host"),
    ],
)
def test_serve_refuses_a_fault_a_websocket_cannot_carry_before_listening(
    command: list[str], spec: str, prefix: str
) -> None:
    done = subprocess.run(
        [*command, "--listen", "ws://127.0.0.1:0", "--fault", spec],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # no URL: it never listened
    name = spec.split(",")[-1].split("=")[0]
    lines = done.stderr.splitlines()
    # serve says it in one line; codemode-trio-host, an argparse program, adds its usage.
    line = lines[-1]
    if prefix == "codemode-trio":
        assert lines == [line]
    assert line.startswith(f"{prefix}: error: fault {name} cannot be injected on ws://: ")
    assert "a WebSocket carries whole frames" in line
    assert "Traceback" not in done.stderr


def test_serve_help_lists_every_fault() -> None:
    done = subprocess.run(
        [*SERVE, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    text = " ".join(done.stdout.split())
    assert "--fault NAME[=N][,...]" in text
    for name in FAULTS:
        assert f"{name}=N" in text.replace("- ", "-")  # argparse may wrap at a hyphen


async def _serve_with_fault(spec: str) -> tuple[str | None, int, bytes]:
    """One cell on ``serve --fault spec`` over stdio: the failure, exit status and stderr."""
    failure: str | None = None
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    [*SERVE, "--fault", spec],
                    cwd=REPO,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    check=False,
                )
            )
            assert process.stdin is not None
            assert process.stdout is not None
            assert process.stderr is not None
            stream = trio.StapledStream(process.stdin, process.stdout)
            try:
                async with cm.open_connection(stream) as conn, conn.open_session() as session:
                    await session.run("text('hello')")
            except cm.ConnectionFailed as exc:
                failure = str(exc)
            stderr = b""
            while chunk := await process.stderr.receive_some():
                stderr += chunk
            await process.wait()
    return failure, process.returncode, stderr


async def test_a_fault_that_ends_stdio_ends_the_process_saying_which() -> None:
    failure, status, stderr = await _serve_with_fault("drop-after=1")
    assert failure is not None
    assert "code-mode host closed" in failure
    assert status == 1
    assert stderr == b"Error: fault injected: drop-after=1\n"


async def test_silent_exit_ends_the_process_with_status_0_and_no_stderr() -> None:
    failure, status, stderr = await _serve_with_fault("silent-exit-after=2")
    assert failure is not None
    assert "code-mode host closed" in failure
    assert status == 0
    assert stderr == b""


async def test_faults_on_tcp_apply_to_each_connection_afresh() -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    [*SERVE, "--listen", "tcp://127.0.0.1:0", "--fault", "drop-after=2"],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    check=False,
                )
            )
            assert process.stdout is not None
            assert process.stderr is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(1)
            port = int(line.decode().strip().rsplit(":", 1)[1])
            for _ in range(2):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                # The host hangs up while the client may still be writing: a reset is as
                # likely as a clean close.
                with pytest.raises(
                    cm.ConnectionFailed, match="code-mode host closed|Connection reset by peer"
                ):
                    async with cm.open_connection(stream) as conn, conn.open_session() as session:
                        await session.run("text('hello')")
            # Each worker logs its fault as its connection ends, a moment after the client
            # sees it: the listener is stopped only once both lines are in.
            stderr = b""
            while stderr.count(b"fault injected") < 2:
                chunk = await process.stderr.receive_some()
                assert chunk, "serve exited before logging both faults"
                stderr += chunk
            process.terminate()
            while chunk := await process.stderr.receive_some():
                stderr += chunk
    logged = [line for line in stderr.decode().splitlines() if "fault injected" in line]
    assert len(logged) == 2
    assert all(line.endswith(": fault injected: drop-after=2") for line in logged)


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        (["--max-connections", "0"], "--max-connections must be at least 1"),
        (["--hello-timeout", "0"], "--hello-timeout must be more than 0 and at most 3600"),
        (["--hello-timeout", "nan"], "--hello-timeout must be more than 0 and at most 3600"),
    ],
)
def test_serve_refuses_limits_that_bound_nothing_in_one_line(
    option: list[str], problem: str
) -> None:
    done = subprocess.run(
        [*SERVE, "--listen", "tcp://127.0.0.1:0", *option],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # it never listened
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"codemode-trio: error: {problem}")
