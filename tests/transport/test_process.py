from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import trio

from codemode_trio.errors import ConnectionFailed, HostNotFound, UsageError
from codemode_trio.transport import process as process_module
from codemode_trio.transport.process import HostProcess, spawn_host

SH = "/bin/sh"


def pid_alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie, waiting for some reaper, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


async def wait_dead(pid: int) -> bool:
    """Poll briefly: SIGKILL is delivered asynchronously, so death may lag teardown by a hair."""
    for _ in range(100):
        if not pid_alive(pid):
            return True
        await trio.sleep(0.01)
    return False


async def read_line(host: HostProcess) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await host.stream.receive_some()
        assert chunk, f"EOF before a full line; got {data!r}"
        data += chunk
    return data


async def test_stream_carries_stdin_and_stdout_and_host_exits_on_eof() -> None:
    with trio.fail_after(5):
        async with spawn_host("/bin/cat") as host:
            assert host.pid == host.process.pid
            assert host.returncode is None
            assert host.describe_exit() is None
            await host.stream.send_all(b"ping\n")
            assert await read_line(host) == b"ping\n"
            await host.stream.send_eof()
            assert await host.wait_exited() == 0
        assert host.describe_exit() == "exited with status 0"
        assert host.failure_details() == "host exited with status 0 and wrote nothing to stderr"


async def test_host_runs_in_its_own_process_group() -> None:
    with trio.fail_after(5):
        async with spawn_host("/bin/cat") as host:
            assert os.getpgid(host.pid) == host.pid
            assert os.getpgid(host.pid) != os.getpgid(0)


async def test_env_is_added_to_the_allow_listed_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", "/home/probe")
    monkeypatch.setenv("CODEMODE_PRIVATE", "hidden")
    script = 'echo "[$CODEMODE_PROBE][$HOME][$CODEMODE_PRIVATE]"'
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script], env={"CODEMODE_PROBE": "yes"}) as host:
            assert await read_line(host) == b"[yes][/home/probe][]\n"


async def test_inherit_env_passes_the_whole_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEMODE_PRIVATE", "shared")
    with trio.fail_after(5):
        async with spawn_host(
            SH, args=["-c", 'echo "[$CODEMODE_PRIVATE]"'], inherit_env=True
        ) as host:
            assert await read_line(host) == b"[shared]\n"


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"A=B": "x"}, "not a valid environment variable name"),
        ({"": "x"}, "not a valid environment variable name"),
        ({"NUL": "a\0b"}, "without NUL"),
        ({"NUMBER": 5}, "must be a string"),
    ],
)
async def test_a_bad_env_is_a_usage_error_before_anything_is_spawned(
    env: dict[str, object], problem: str, tmp_path: Path
) -> None:
    marker = tmp_path / "spawned"
    with pytest.raises(UsageError, match=problem):
        async with spawn_host(SH, args=["-c", f"touch {marker}"], env=env):  # type: ignore[arg-type]
            pass
    assert not marker.exists()


async def test_stderr_tail_keeps_the_last_lines() -> None:
    script = 'i=1; while [ $i -le 100 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 3'
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script], stderr_lines=5) as host:
            assert await host.wait_exited() == 3
            assert host.stderr_tail() == [f"line {i}" for i in range(96, 101)]
            assert host.failure_details() == (
                "host exited with status 3; last stderr lines:\n"
                "    line 96\n    line 97\n    line 98\n    line 99\n    line 100"
            )


async def test_stderr_tail_decodes_split_utf8_and_keeps_unterminated_line() -> None:
    # "é" is written as two separate bytes with a pause between them, so the reads split it.
    script = r"printf 'h\303' >&2; sleep 0.1; printf '\251llo\r\nno newline' >&2"
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script]) as host:
            await host.wait_exited()
            assert host.stderr_tail() == ["héllo", "no newline"]


async def test_stderr_is_drained_so_a_chatty_host_never_blocks() -> None:
    # 1 MiB of stderr is far more than a pipe buffer: without a drain the child would block
    # before it ever writes "done" to stdout.
    script = "head -c 1048576 /dev/zero | tr '\\0' 'x' >&2; echo >&2; echo done"
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script], stderr_lines=2) as host:
            assert await read_line(host) == b"done\n"
            await host.wait_exited()
            tail = host.stderr_tail()
    # An over-long line is kept as 8192-character pieces rather than whole.
    assert tail == ["x" * 8192, "x" * 8192]


async def test_failure_details_drops_the_unsymbolised_backtrace() -> None:
    script = (
        "printf 'Error: failed to read code-mode client hello\\n\\nCaused by:\\n"
        "    early eof\\n\\nStack backtrace:\\n   0: <unknown>\\n   1: <unknown>\\n' >&2; exit 1"
    )
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script]) as host:
            await host.wait_exited()
    assert "   1: <unknown>" in host.stderr_tail()
    assert host.failure_details() == (
        "host exited with status 1; last stderr lines:\n"
        "    Error: failed to read code-mode client hello\n"
        "    Caused by:\n"
        "        early eof"
    )


async def test_describe_exit_names_the_signal() -> None:
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", "kill -TERM $$"]) as host:
            await host.wait_exited()
            assert host.describe_exit() == "killed by signal SIGTERM"
            assert host.failure_details().startswith("host killed by signal SIGTERM")


async def test_failure_details_while_running() -> None:
    with trio.fail_after(5):
        async with spawn_host("/bin/cat") as host:
            assert host.failure_details() == "host is still running and wrote nothing to stderr"


async def test_stubborn_host_and_its_child_are_killed_after_the_grace_period() -> None:
    # The shell ignores EOF on stdin (it never reads it) and waits on a child in its group.
    script = "trap '' HUP INT TERM; sleep 60 & echo $!; wait"
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script]) as host:
            grandchild = int(await read_line(host))
            assert pid_alive(grandchild)
            started = trio.current_time()
        elapsed = trio.current_time() - started
    assert process_module.EXIT_GRACE_S <= elapsed < process_module.EXIT_GRACE_S + 1.5
    assert host.describe_exit() == "killed by signal SIGKILL"
    assert await wait_dead(host.pid)
    assert await wait_dead(grandchild)


async def test_children_left_behind_by_a_host_that_exited_are_killed() -> None:
    script = "sleep 60 & echo $!; exit 0"
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script]) as host:
            grandchild = int(await read_line(host))
            assert await host.process.wait() == 0
            assert pid_alive(grandchild)
            started = trio.current_time()
        elapsed = trio.current_time() - started
    assert elapsed < 1.0  # no grace period to sit out: the leader was already gone
    assert host.describe_exit() == "exited with status 0"
    assert await wait_dead(grandchild)


async def test_teardown_completes_when_the_body_is_cancelled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_module, "EXIT_GRACE_S", 0.3)
    script = "trap '' HUP INT TERM; sleep 60 & echo $!; wait"
    grandchild = None
    host = None
    with trio.fail_after(5):
        with trio.move_on_after(0.5) as scope:
            async with spawn_host(SH, args=["-c", script]) as host:
                grandchild = int(await read_line(host))
                await trio.sleep_forever()
    assert scope.cancelled_caught
    assert host is not None
    assert grandchild is not None
    assert host.describe_exit() == "killed by signal SIGKILL"
    assert await wait_dead(grandchild)


async def test_cancelled_body_lets_a_well_behaved_host_exit_cleanly() -> None:
    with trio.fail_after(5):
        with trio.CancelScope() as scope:
            async with spawn_host("/bin/cat") as host:
                scope.cancel()
                await trio.sleep_forever()
    assert host.describe_exit() == "exited with status 0"


async def test_body_error_propagates_unwrapped_after_teardown() -> None:
    with trio.fail_after(5), pytest.raises(KeyError, match="boom") as info:
        async with spawn_host("/bin/cat") as host:
            raise KeyError("boom")
    assert not isinstance(info.value, BaseExceptionGroup)
    assert host.returncode == 0


async def test_body_errors_are_never_lost() -> None:
    with trio.fail_after(5), pytest.RaisesGroup(ValueError, KeyError, flatten_subgroups=True):
        async with spawn_host("/bin/cat"):
            raise ExceptionGroup("mine", [ValueError(), KeyError()])


async def test_exit_details_describes_a_host_whose_stdout_ended() -> None:
    script = "echo 'Error: failed to read code-mode client hello' >&2; exec 1>&-; sleep 0.2; exit 1"
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", script]) as host:
            assert await host.stream.receive_some() == b""
            assert await host.exit_details() == (
                "host exited with status 1; last stderr lines:\n"
                "    Error: failed to read code-mode client hello"
            )


async def test_exit_details_gives_up_waiting_on_a_host_that_keeps_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_module, "EXIT_GRACE_S", 0.2)
    with trio.fail_after(5):
        async with spawn_host(SH, args=["-c", "exec 1>&-; exec sleep 60"]) as host:
            assert await host.stream.receive_some() == b""
            started = trio.current_time()
            assert await host.exit_details() == (
                "host is still running and wrote nothing to stderr"
            )
            assert trio.current_time() - started < 2


async def test_spawning_a_missing_program_gives_the_reference_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-host"
    with pytest.raises(HostNotFound) as info:
        async with spawn_host(missing):
            pytest.fail("body must not run")
    assert str(info.value) == (
        f"failed to spawn code-mode host {missing}: No such file or directory (os error 2)"
    )
    assert info.value.searched == (str(missing),)


async def test_spawning_a_non_executable_file_fails_clearly(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    with pytest.raises(ConnectionFailed, match=r"^failed to spawn code-mode host .*plain: "):
        async with spawn_host(plain):
            pytest.fail("body must not run")


async def test_spawn_error_truncates_very_long_paths(tmp_path: Path) -> None:
    long_path = tmp_path.joinpath(*(["é" * 40] * 8), "host")
    with pytest.raises(HostNotFound) as info:
        async with spawn_host(long_path):
            pytest.fail("body must not run")
    message = str(info.value)
    prefix, _, rest = message.partition("failed to spawn code-mode host ")
    shown = rest.rsplit(": No such file", 1)[0]
    assert prefix == ""
    assert shown.startswith("...")
    assert str(long_path).endswith(shown[3:])
    assert len(shown.encode()) <= 512


# ----------------------------------------------------------------------------- the real host


@pytest.mark.host
async def test_real_host_exits_zero_on_stdin_eof(host_path: Path) -> None:
    with trio.fail_after(10):
        async with spawn_host(host_path) as host:
            await host.stream.send_eof()
            assert await host.wait_exited() == 0
            assert host.failure_details() == (
                "host exited with status 0 and wrote nothing to stderr"
            )


@pytest.mark.host
async def test_real_host_fatal_error_is_reported_with_its_stderr(host_path: Path) -> None:
    payload = b"{}"
    with trio.fail_after(10):
        async with spawn_host(host_path) as host:
            await host.stream.send_all(struct.pack("<I", len(payload)) + payload)
            assert await host.wait_exited() == 1
            details = host.failure_details()
    assert details.startswith("host exited with status 1; last stderr lines:\n")
    assert "Error: failed to read code-mode client hello" in details
    assert "<unknown>" not in details
