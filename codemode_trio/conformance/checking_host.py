"""A host in checking mode: the reference host behind a watcher of the client's rules.

``python -m codemode_trio.conformance.checking_host`` is what ``conform --client`` points
``CODEX_CODE_MODE_HOST_PATH`` at (through a small script). It spawns the host named by
``$CODEMODE_TRIO_CHECK_HOST`` (a shell-quoted command), passes every byte both ways, and
appends one JSON line per connection to ``$CODEMODE_TRIO_CHECK_REPORT``:
``{"violations": [{"rule", "detail"}...]}``. The client sees the real host's
behaviour unchanged, so a broken rule still has the consequences it would have.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from typing import Final

import attrs
import trio

from .client_rules import ClientRuleChecker

__all__ = ["HOST_ENV", "REPORT_ENV", "main", "run_checking_host"]

HOST_ENV: Final = "CODEMODE_TRIO_CHECK_HOST"
"""The command of the host to check against."""

REPORT_ENV: Final = "CODEMODE_TRIO_CHECK_REPORT"
"""The file each connection's report line is appended to."""

_CHUNK = 1 << 16


async def run_checking_host(host: list[str], report: str) -> int:
    """Serve our stdio through a checker to ``host``; return the host's exit status."""
    checker = ClientRuleChecker()
    process = await trio.lowlevel.open_process(
        host, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdin is not None
    assert process.stdout is not None
    host_in, host_out = process.stdin, process.stdout
    our_in = trio.lowlevel.FdStream(os.dup(0))
    our_out = trio.lowlevel.FdStream(os.dup(1))

    async def client_to_host() -> None:
        while data := await our_in.receive_some(_CHUNK):
            checker.client_bytes(data)
            # The host may be gone; keep reading so that the whole client side is checked.
            with contextlib.suppress(trio.BrokenResourceError):
                await host_in.send_all(data)
        checker.client_eof()
        await host_in.aclose()

    async def host_to_client() -> None:
        while data := await host_out.receive_some(_CHUNK):
            checker.host_bytes(data)
            try:
                await our_out.send_all(data)
            except trio.BrokenResourceError:
                return
        await our_out.aclose()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client_to_host)
            await host_to_client()
            # The host is done: the client may still be writing; give it a moment to finish.
            with trio.move_on_after(2):
                await process.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.move_on_after(5, shield=True):
            await process.wait()
        line = {"violations": [attrs.asdict(violation) for violation in checker.violations]}
        with trio.move_on_after(5, shield=True):
            async with await trio.open_file(report, "a", encoding="utf-8") as file:
                await file.write(json.dumps(line) + "\n")
    return process.returncode if process.returncode is not None else 1


def main() -> int:
    """Entry point: the host command and report path come from the environment."""
    host = shlex.split(os.environ.get(HOST_ENV, ""))
    report = os.environ.get(REPORT_ENV, "")
    if not host or not report:
        print(f"Error: {HOST_ENV} and {REPORT_ENV} must be set", file=sys.stderr)
        return 1
    return trio.run(run_checking_host, host, report)


if __name__ == "__main__":
    sys.exit(main())
