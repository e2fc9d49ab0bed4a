"""Run a host behind an injected fault, as a drop-in host executable.

``python -m codemode_trio.faults --fault NAME[=N][,...] [--] [HOST ARGV...]`` spawns the host
(by default ``python -m codemode_trio serve``), passes stdin to it and its frames back on
stdout through the fault plan, and lets its stderr through. Pointing a client's
``CODEX_CODE_MODE_HOST_PATH`` at a script that runs this shows how the client copes.

When a fault ends the connection the wrapper says which on stderr and exits 1, except for
``silent-exit-after``, which exits 0 and says nothing, as host 0.171.0 does when a burst of
tool calls overflows its queues (SPEC §13.3).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

import trio

from ..errors import UsageError
from .plan import FAULTS, Action, Fault, FaultPlan, parse_faults

__all__ = ["main", "run_proxy"]

_CHUNK = 1 << 16


class _Ended(Exception):
    """A fault ended the connection; ``silent`` for an exit with nothing said."""

    def __init__(self, fault: Fault | None, *, silent: bool) -> None:
        super().__init__(str(fault))
        self.fault = fault
        self.silent = silent


async def run_proxy(faults: tuple[Fault, ...], argv: Sequence[str]) -> int:
    """Serve stdio through ``faults`` to the host ``argv``; return the exit status."""
    process = await trio.lowlevel.open_process(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdin is not None
    assert process.stdout is not None
    host_in, host_out = process.stdin, process.stdout
    our_in, our_out = trio.lowlevel.FdStream(os.dup(0)), trio.lowlevel.FdStream(os.dup(1))
    plan = FaultPlan(faults)
    stalled = trio.Event()
    ended: _Ended | None = None

    async def carry(actions: list[Action]) -> None:
        for action in actions:
            if action.kind == "send":
                await our_out.send_all(action.data)
            elif action.kind == "pause":
                await trio.sleep(action.seconds)
            elif action.kind == "stall":
                stalled.set()
                await trio.sleep_forever()
            else:
                raise _Ended(action.fault, silent=action.kind == "exit")

    async def client_to_host() -> None:
        while not stalled.is_set():
            data = await our_in.receive_some(_CHUNK)
            if not data:
                await host_in.aclose()
                return
            if stalled.is_set():
                return  # a stalled host reads nothing more
            try:
                await host_in.send_all(data)
            except trio.BrokenResourceError:
                return

    async def host_to_client() -> None:
        await carry(plan.start())
        while data := await host_out.receive_some(_CHUNK):
            await carry(plan.host_bytes(data))
        await our_out.aclose()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client_to_host)
            await host_to_client()
            nursery.cancel_scope.cancel()
    except* _Ended as group:
        first = group.exceptions[0]
        assert isinstance(first, _Ended)
        ended = first
    finally:
        if ended is not None or process.returncode is None:
            process.kill()
        with trio.move_on_after(5, shield=True):
            await process.wait()
    if ended is not None:
        if ended.silent:
            return 0
        print(f"Error: fault injected: {ended.fault}", file=sys.stderr, flush=True)
        return 1
    return process.returncode if process.returncode is not None else 1


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m codemode_trio.faults`` entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m codemode_trio.faults",
        description="Run a code-mode host with faults injected into what it sends.",
        epilog="faults: " + "; ".join(f"{name} ({text})" for name, (_, text) in FAULTS.items()),
    )
    parser.add_argument("--fault", required=True, metavar="NAME[=N][,...]")
    parser.add_argument("host", nargs="*", help="host command (default: codemode-trio serve)")
    args = parser.parse_args(argv)
    try:
        faults = parse_faults(args.fault)
    except UsageError as exc:
        parser.error(str(exc))
    host = args.host or [sys.executable, "-m", "codemode_trio", "serve"]
    try:
        return trio.run(run_proxy, faults, host)
    except OSError as exc:
        print(f"Error: cannot run host {host[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 1
