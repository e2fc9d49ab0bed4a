"""Run one ``codex-code-mode-host`` as a child process and talk to it over its stdio.

:func:`spawn_host` starts the host in its own process group, hands back a :class:`HostProcess`
whose :attr:`~HostProcess.stream` carries the protocol bytes, drains the host's stderr in the
background (keeping the last lines for error messages), and on the way out closes stdin, gives
the host a short grace period to exit on its own, then kills the whole group and reaps it.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import logging
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import trio

from .._groups import unwrapping_nursery
from .._oserror import os_error_text
from ..errors import CodeModeError, ConnectionFailed, HostNotFound, UsageError
from .environment import host_environment
from .pipes import PipeStream

__all__ = ["EXIT_GRACE_S", "HostProcess", "spawn_host"]

logger = logging.getLogger(__name__)

EXIT_GRACE_S: Final = 2.0
"""How long teardown waits for the host to exit by itself after its stdin is closed.

A healthy host exits within milliseconds of EOF on stdin (SPEC §1); the grace period only
matters for a wedged one, which is then killed.
"""

# After SIGKILL the kernel tears the process down promptly; this bound only stops teardown from
# hanging forever on a process stuck in uninterruptible sleep (house rule: every shielded
# await has a deadline).
_REAP_DEADLINE_S: Final = 5.0
# Once the host is gone, its stderr reaches EOF as soon as the drain task has read what is left
# in the pipe. Waiting briefly makes stderr_tail() complete; the bound covers a stray process
# outside the group that inherited the pipe and keeps it open.
_STDERR_SETTLE_S: Final = 0.5
# exit_details() waits at most this long; the connection bounds its EOF description at 2 s.
_EXIT_DETAILS_WAIT_S: Final = 1.0
# A "line" longer than this is split, so a host that writes megabytes without a newline cannot
# grow our memory without bound.
_MAX_STDERR_LINE: Final = 8192
_STDERR_CHUNK: Final = 65536
# The reference client truncates the path it displays in spawn errors to this many bytes.
_MAX_DISPLAY_PATH_BYTES: Final = 512

# The host prints an unsymbolised Rust backtrace after fatal errors ("Stack backtrace:" then
# "   0: <unknown>" ...). It says nothing useful and would push the real error out of the tail.
_BACKTRACE_HEADER: Final = "Stack backtrace:"
_BACKTRACE_FRAME: Final = re.compile(r"^\s*(\d+: |at )")


class HostProcess:
    """A running host process, as given out by :func:`spawn_host`.

    Attributes:
      process: the :class:`trio.Process`.
      path: the program that was started.
      stream: the host's stdin and stdout as one :class:`.PipeStream`; the protocol
        connection reads and writes frames on it.

    """

    def __init__(self, process: trio.Process, path: str, *, stderr_lines: int) -> None:
        stdin, stdout = process.stdin, process.stdout
        if not isinstance(stdin, trio.lowlevel.FdStream):
            raise CodeModeError("spawned code-mode host has no stdin pipe")
        if not isinstance(stdout, trio.lowlevel.FdStream):
            raise CodeModeError("spawned code-mode host has no stdout pipe")
        self.process = process
        self.path = path
        self.stream = PipeStream(stdin, stdout)
        self._stderr_lines: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._stderr_partial = ""
        self._stderr_bytes = 0
        self._stderr_done = trio.Event()

    def __repr__(self) -> str:
        state = self.describe_exit() or "running"
        return f"<HostProcess {self.path!r} pid={self.pid} {state}>"

    @property
    def pid(self) -> int:
        """The host's process id (also its process group id)."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or ``None`` while it runs."""
        return self.process.returncode

    def stderr_tail(self) -> list[str]:
        """Return the last lines the host wrote to stderr (decoded, newline-free), oldest first.

        An unfinished last line (no newline yet) is included.
        """
        lines = list(self._stderr_lines)
        if self._stderr_partial:
            lines.append(self._stderr_partial)
        return lines[-self._stderr_lines.maxlen :] if self._stderr_lines.maxlen else []

    def describe_exit(self) -> str | None:
        """Describe how the host ended; ``None`` while it is still running.

        For example ``"exited with status 1"`` or ``"killed by signal SIGKILL"``.
        """
        code = self.returncode
        if code is None:
            return None
        if code >= 0:
            return f"exited with status {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"killed by signal {name}"

    def failure_details(self) -> str:
        """Return one sentence on the host's state and its last stderr lines.

        Meant to be appended to connection errors, e.g. ``"host exited with status 0 and wrote
        nothing to stderr"`` or ``"host exited with status 1; last stderr lines: ..."``. For a
        complete tail, call it after :meth:`wait_exited`.
        """
        status = self.describe_exit()
        head = f"host {status}" if status is not None else "host is still running"
        lines = _strip_backtrace(self.stderr_tail())
        if lines:
            shown = "\n".join(f"    {line}" for line in lines)
            return f"{head}; last stderr lines:\n{shown}"
        if self._stderr_bytes == 0:
            return f"{head} and wrote nothing to stderr"
        return f"{head} and wrote nothing useful to stderr"

    async def exit_details(self) -> str:
        """Wait briefly for the host to exit, then return :meth:`failure_details`.

        Fits ``open_connection(eof_details=...)``: when the host's stdout ends, the exit status
        and the complete stderr tail are usually known a few milliseconds later. A host that
        keeps running is described as still running after about a second.
        """
        with trio.move_on_after(_EXIT_DETAILS_WAIT_S):
            await self.wait_exited()
        return self.failure_details()

    async def wait_exited(self) -> int:
        """Wait for the host to exit and for its stderr to be read to the end.

        Returns the exit status (see :attr:`returncode`). Cancel it from outside
        (``trio.move_on_after``) to bound the wait.
        """
        code = await self.process.wait()
        with trio.move_on_after(_STDERR_SETTLE_S):
            await self._stderr_done.wait()
        return code

    async def _drain_stderr(self) -> None:
        """Read stderr until EOF so the pipe never fills and blocks the host."""
        stderr = self.process.stderr
        assert stderr is not None  # opened with PIPE by spawn_host
        # Incremental so a UTF-8 character split across reads decodes correctly.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while True:
                try:
                    chunk = await stderr.receive_some(_STDERR_CHUNK)
                except trio.ClosedResourceError:
                    # Teardown closed the pipe: nothing more will be read.
                    break
                except (trio.BrokenResourceError, OSError) as exc:
                    logger.warning("failed to read code-mode host stderr: %s", exc)
                    break
                if not chunk:
                    self._take_text(decoder.decode(b"", final=True))
                    break
                self._stderr_bytes += len(chunk)
                self._take_text(decoder.decode(chunk))
        finally:
            if self._stderr_partial:
                self._add_line(self._stderr_partial)
                self._stderr_partial = ""
            self._stderr_done.set()

    def _take_text(self, text: str) -> None:
        *complete, rest = (self._stderr_partial + text).split("\n")
        for line in complete:
            self._add_line(line.removesuffix("\r"))
        # Cap the unfinished line as well, so memory stays bounded while no newline comes.
        while len(rest) > _MAX_STDERR_LINE:
            self._add_line(rest[:_MAX_STDERR_LINE])
            rest = rest[_MAX_STDERR_LINE:]
        self._stderr_partial = rest

    def _add_line(self, line: str) -> None:
        # An empty line is kept too: one piece, empty.
        for start in range(0, max(len(line), 1), _MAX_STDERR_LINE):
            piece = line[start : start + _MAX_STDERR_LINE]
            logger.debug("code-mode host stderr: %s", piece)
            self._stderr_lines.append(piece)

    async def _teardown(self) -> None:
        """Close stdin, allow a voluntary exit, kill the process group, reap, close pipes.

        Must run inside a shielded cancel scope that has a deadline.
        """
        process = self.process
        # Already closed or the host already gone: either way it has its EOF.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self.stream.send_stream.aclose()

        with trio.move_on_after(EXIT_GRACE_S):
            await process.wait()

        # Kill the group even when the host exited by itself: a child it started could
        # still be running and would otherwise be orphaned. The group id stays reserved while
        # any member lives, so this can only reach our own leftovers; with none left it fails
        # with ESRCH.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError as exc:  # pragma: no cover - a member changed its credentials
            logger.warning("could not kill code-mode host process group %d: %s", process.pid, exc)

        with trio.move_on_after(_REAP_DEADLINE_S) as reap_scope:
            await process.wait()
        if reap_scope.cancelled_caught:
            logger.warning("code-mode host pid %d did not exit after SIGKILL", process.pid)

        with trio.move_on_after(_STDERR_SETTLE_S):
            await self._stderr_done.wait()
        for stream in (self.stream.receive_stream, process.stderr):
            if stream is not None:
                await stream.aclose()


@asynccontextmanager
async def spawn_host(
    host_path: str | os.PathLike[str],
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    stderr_lines: int = 50,
) -> AsyncIterator[HostProcess]:
    """Start the host program and yield it as a :class:`HostProcess`.

    The host runs in a new session (its own process group) with stdin, stdout and stderr
    piped. Its environment is an allow-list of ours (see
    :func:`~codemode_trio.transport.environment.host_environment`: ``PATH``, ``HOME``,
    ``LANG``/``LC_*``, ``TMPDIR``, ``TZ``, ``NO_COLOR``, ``RUST_*``, ``CODEX_*``, ``OTEL_*``,
    minus names that look like secrets) with ``env`` added on top (its values win);
    ``inherit_env=True`` passes our whole environment instead of the allow-list. A task owned
    by this context manager reads stderr continuously and keeps the last ``stderr_lines``
    lines. A malformed ``env`` raises :class:`~codemode_trio.errors.UsageError` before
    anything is spawned.

    On exit, whether the body returned, raised or was cancelled: stdin is closed, the host gets
    :data:`EXIT_GRACE_S` seconds to exit, then its whole process group is sent SIGKILL and the
    host is reaped. No process from the group outlives the block.

    A spawn failure raises :class:`~codemode_trio.errors.HostNotFound` when the program does
    not exist and :class:`~codemode_trio.errors.ConnectionFailed` otherwise, both with the
    reference text ``failed to spawn code-mode host {path}: {error}``.
    """
    if stderr_lines < 0:
        raise UsageError(f"stderr_lines must be >= 0, not {stderr_lines}")
    path = os.fspath(host_path)
    environment = host_environment(_checked_env(env), inherit_env=inherit_env)
    try:
        process = await trio.lowlevel.open_process(
            [path, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Own process group, so teardown can kill everything the host started.
            start_new_session=True,
            env=environment,
        )
    except OSError as exc:
        message = f"failed to spawn code-mode host {_display_path(path)}: {os_error_text(exc)}"
        if isinstance(exc, FileNotFoundError | NotADirectoryError):
            raise HostNotFound(message, searched=[path]) from exc
        raise ConnectionFailed(message) from exc

    host = HostProcess(process, path, stderr_lines=stderr_lines)
    # The nursery only holds the stderr drain, which never raises; unwrapping hands whatever
    # the body raised back as itself rather than inside an ExceptionGroup.
    async with unwrapping_nursery() as nursery:
        nursery.start_soon(host._drain_stderr)
        try:
            yield host
        finally:
            deadline = trio.current_time() + _teardown_budget()
            with trio.CancelScope(shield=True, deadline=deadline) as scope:
                await host._teardown()
            if scope.cancelled_caught:  # pragma: no cover - needs an unkillable process
                logger.warning("teardown of code-mode host pid %d timed out", host.pid)
            nursery.cancel_scope.cancel()


def _checked_env(env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """Refuse, before spawning, what the OS would reject or misread as an environment."""
    if env is None:
        return None
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise UsageError(f"env: {name!r} is not a valid environment variable name")
        if not isinstance(value, str) or "\0" in value:
            raise UsageError(f"env[{name!r}] must be a string without NUL characters")
    return env


def _teardown_budget() -> float:
    # One second of slack for closing pipes and scheduling on a loaded machine.
    return EXIT_GRACE_S + _REAP_DEADLINE_S + _STDERR_SETTLE_S + 1.0


def _strip_backtrace(lines: list[str]) -> list[str]:
    kept: list[str] = []
    in_backtrace = False
    for line in lines:
        if line.strip() == _BACKTRACE_HEADER:
            in_backtrace = True
            continue
        if in_backtrace and _BACKTRACE_FRAME.match(line):
            continue
        in_backtrace = False
        if line.strip():
            kept.append(line)
    return kept


def _display_path(path: str) -> str:
    """Shorten a long path the way the reference client does: ``...`` plus the last bytes."""
    raw = path.encode("utf-8", "surrogateescape")
    if len(raw) <= _MAX_DISPLAY_PATH_BYTES:
        return path
    tail = raw[-(_MAX_DISPLAY_PATH_BYTES - 3) :]
    # Do not start in the middle of a multi-byte character.
    while tail and tail[0] & 0xC0 == 0x80:
        tail = tail[1:]
    return "..." + tail.decode("utf-8", "surrogateescape")
