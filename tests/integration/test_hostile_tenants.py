"""``codemode-trio serve`` shared by tenants who do not trust each other.

One listener, two clients. The attacker runs every hostile input the reference host must
contain — bridge probes, prototype pollution, non-finite timers, values nested past the host's
limit, timer floods, huge strings, runaway recursion, a megabyte of ``import(``, busy loops,
a connection killed mid-cell — while the victim keeps running cells that hold a secret. The
victim must see every result correct and nothing foreign; the attacker must never see the
victim's secret; the listener must outlive it all.

The load scenarios (many sessions, execute-then-terminate, busy loops terminated
concurrently) run on stdio and on a listener alike.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

import codemode_trio as cm

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "codemode_trio", "serve"]

Opener = Callable[[], Any]


@asynccontextmanager
async def listener(scheme: str) -> AsyncIterator[tuple[str, trio.Process]]:
    """``serve --listen SCHEME://127.0.0.1:0``: its printed URL and its process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                [*SERVE, "--listen", f"{scheme}://127.0.0.1:0"],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                check=False,
            )
        )
        assert process.stdout is not None
        line = b""
        with trio.fail_after(60):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "serve exited before printing its URL"
                line += chunk
        try:
            yield line.decode().strip(), process
        finally:
            process.terminate()


def opener_for(url: str) -> Opener:
    """How a client connects to the URL ``serve`` printed."""
    if url.startswith("tcp://"):
        host, _, port = url.removeprefix("tcp://").rpartition(":")

        @asynccontextmanager
        async def over_tcp() -> AsyncIterator[cm.Connection]:
            stream = await trio.open_tcp_stream(host, int(port))
            async with cm.open_connection(stream) as conn:
                yield conn

        return over_tcp
    return partial(cm.open_websocket_connection, url)


def secret_tools(secret: str) -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function
    async def reveal() -> str:
        """The tenant's secret."""
        return secret

    @tools.function
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tools.function
    async def echo(value: Any = None) -> Any:
        """Return the value."""
        return value

    return tools


# Each attack: the cell, and whether it ends the attacker's connection (True) or only its cell.
# What each one answers exactly is checked against 0.171.0 by the host's own tests; here the
# point is where the damage stops.
DEEP = "let v = 0; for (let i = 0; i < 3000; i++) v = [v];"
ATTACKS: dict[str, str] = {
    "bridge-by-name": (
        "const names = ['__codemode', '__codemode_push', '__codemode_sync'];"
        "const found = names.filter(n => { try { return eval(`typeof ${n}`) !== 'undefined'; }"
        " catch { return false; } });"
        "text(JSON.stringify(found));"
        "for (const n of Object.getOwnPropertyNames(globalThis)) {"
        "  const v = globalThis[n];"
        "  if (v && typeof v === 'object' && 'channel' in v) v.channel.transfer(8);"
        "}"
    ),
    "detach-every-buffer": (
        "for (const n of Reflect.ownKeys(globalThis)) { let v; try { v = globalThis[n]; }"
        " catch { continue; } if (v instanceof ArrayBuffer) v.transfer(8); }"
        "text('detached');"
    ),
    "prototype-pollution": (
        "String.prototype.toLowerCase = () => 'data:';"
        "String.prototype.startsWith = () => true;"
        "Array.prototype.push = function () { throw new Error('push hijacked'); };"
        "Function.prototype.apply = function () { throw new Error('apply hijacked'); };"
        "JSON.stringify = () => '\"hijacked\"';"
        "image('https://attacker.example/?leak=1');"
    ),
    "infinite-timer": "setTimeout(() => text('never'), Infinity); text('set');",
    "nan-timer": "setTimeout(() => text('fired'), NaN); await new Promise(r => setTimeout(r, 5));",
    "deep-store": DEEP + "store('deep', v);",
    "deep-tool-argument": DEEP + "await tools.echo({value: v});",
    "deep-text": DEEP + "text(v);",
    "timer-flood": "for (let i = 0; i < 300000; i++) setTimeout(() => {}, 1e9); text('armed');",
    "huge-string": "const s = 'x'.repeat(2 ** 28); text(s + s + s + s);",
    "runaway-recursion": "function f() { return f() + 1; } f();",
    "recursion-in-a-callback": (
        "function f() { return f() + 1; }"
        "await new Promise((_, reject) => setTimeout(() => { try { f(); } catch (e) {"
        " reject(e); } }, 1));"
    ),
    "megabyte-of-import": "/* " + "import(" * 150_000 + " */ text('lexed');",
    "array-buffers-past-the-heap": (
        "const keep = []; for (let i = 0; i < 64; i++) keep.push(new ArrayBuffer(32 * 2 ** 20));"
        "text(String(keep.length));"
    ),
}


async def run_attack(open_connection: Opener, source: str) -> None:
    """Run one attack on a connection of its own; whatever ends it ends only there."""
    tools = secret_tools("attacker-has-no-secret")
    try:
        async with (
            open_connection() as conn,
            conn.open_session(
                tools, limits=cm.CellLimits(max_heap_size_bytes=64 * 2**20)
            ) as session,
        ):
            with trio.move_on_after(20):
                result = await session.run(source, yield_time_ms=2_000)
                assert "sk-live-" not in (result.text or "") + (result.error_text or "")
    except (cm.ConnectionFailed, cm.SessionClosed, cm.HostError):
        pass  # the attacker's own connection or cell ended: that is containment


async def victim(open_connection: Opener, secret: str, rounds: int, seen: list[str]) -> None:
    """Cells that hold ``secret``: every result must be exactly this tenant's."""
    tools = secret_tools(secret)
    async with open_connection() as conn, conn.open_session(tools) as session:
        for i in range(rounds):
            result = await session.run(
                "const s = await tools.reveal();"
                f"const n = await tools.add({{a: {i}, b: 1}});"
                "text(`${s}:${n}`);"
            )
            assert result.error_text is None, result.error_text
            assert result.text == f"{secret}:{i + 1}"
            seen.append(result.text)


@pytest.mark.parametrize("scheme", ["tcp", "ws"])
async def test_an_attacker_never_reaches_another_tenant_or_the_listener(scheme: str) -> None:
    secret = "sk-live-" + secrets.token_hex(16)
    seen: list[str] = []
    with trio.fail_after(240):
        async with listener(scheme) as (url, process):
            open_connection = opener_for(url)
            async with trio.open_nursery() as nursery:
                victim_done = trio.Event()

                async def keep_victim_busy() -> None:
                    while not victim_done.is_set():
                        await victim(open_connection, secret, 5, seen)

                nursery.start_soon(keep_victim_busy)
                for source in ATTACKS.values():
                    await run_attack(open_connection, source)
                victim_done.set()
            assert process.returncode is None, "the listener died"
            # The listener still takes new clients after everything above.
            await victim(open_connection, secret, 2, seen)
    assert len(seen) >= 7
    assert all(text.startswith(secret) for text in seen)


@pytest.mark.parametrize("scheme", ["tcp", "ws"])
async def test_a_connection_whose_worker_is_killed_ends_alone(scheme: str) -> None:
    secret = "sk-live-" + secrets.token_hex(16)
    seen: list[str] = []
    with trio.fail_after(120):
        async with listener(scheme) as (url, process):
            open_connection = opener_for(url)
            async with open_connection() as doomed, doomed.open_session() as session:
                cell = await session.execute("while (true) {}", yield_time_ms=100)
                await cell.initial_response()
                # Every worker dies, the busy connection's among them (a spare one too, if the
                # listener keeps one ready); the victim connects only afterwards.
                workers = _children(process.pid)
                assert workers, "the connection is not served by a worker process of its own"
                for pid in workers:
                    os.kill(pid, signal.SIGSEGV)
                with pytest.raises((cm.ConnectionFailed, cm.SessionClosed)):
                    with trio.fail_after(30):
                        await session.wait(cell.cell_id, yield_time_ms=5_000)
            await victim(open_connection, secret, 3, seen)
            assert process.returncode is None
    assert seen == [f"{secret}:{i}" for i in range(1, 4)]


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


# ------------------------------------------------------------------ load, on stdio and a listener


@asynccontextmanager
async def endpoint(kind: str, serve_host_path: Path) -> AsyncIterator[Opener]:
    if kind == "stdio":
        yield partial(cm.open_host_process, serve_host_path)
        return
    async with listener(kind) as (url, _):
        yield opener_for(url)


ENDPOINTS = ["stdio", "tcp"]


@pytest.mark.parametrize("kind", ENDPOINTS)
async def test_64_sessions_of_4_cells_of_20_tool_calls(kind: str, serve_host_path: Path) -> None:
    totals: list[int] = []
    tools = secret_tools("unused")
    source = (
        "let t = 0; for (let i = 0; i < 20; i++) t += await tools.add({a: i, b: CELL});"
        "text(String(t));"
    )
    with trio.fail_after(300):
        async with endpoint(kind, serve_host_path) as open_connection, open_connection() as conn:

            async def one_session(n: int) -> None:
                async with conn.open_session(tools) as session, trio.open_nursery() as cells:
                    for c in range(4):

                        async def one_cell(cell: int = n * 4 + c) -> None:
                            result = await session.run(source.replace("CELL", str(cell)))
                            assert result.error_text is None, result.error_text
                            assert result.text == str(190 + 20 * cell)
                            totals.append(cell)

                        cells.start_soon(one_cell)

            async with trio.open_nursery() as nursery:
                for n in range(64):
                    nursery.start_soon(one_session, n)
    assert sorted(totals) == list(range(256))


@pytest.mark.parametrize("kind", ENDPOINTS)
async def test_100_cells_executed_then_terminated(kind: str, serve_host_path: Path) -> None:
    with trio.fail_after(240):
        async with (
            endpoint(kind, serve_host_path) as open_connection,
            open_connection() as conn,
            conn.open_session() as session,
        ):
            for i in range(100):
                cell = await session.execute(
                    f"text('{i}'); await new Promise(() => {{}});", yield_time_ms=10_000
                )
                outcome = await session.terminate(cell.cell_id)
                assert outcome.live
                assert outcome.response.kind in ("terminated", "yielded", "result")
            result = await session.run("text('still serving')")
            assert result.text == "still serving"


@pytest.mark.parametrize("kind", ENDPOINTS)
async def test_20_busy_loops_terminated_16_at_a_time(kind: str, serve_host_path: Path) -> None:
    limiter = trio.CapacityLimiter(16)
    terminated: list[str] = []
    with trio.fail_after(240):
        async with (
            endpoint(kind, serve_host_path) as open_connection,
            open_connection() as conn,
            conn.open_session() as session,
        ):

            async def busy(i: int) -> None:
                async with limiter:
                    cell = await session.execute(
                        f"text('{i}'); while (true) {{}}", yield_time_ms=50
                    )
                    # Terminated only once the loop is known to run: its text is out.
                    seen = await cell.initial_response()
                    shown = seen.text
                    while not shown:
                        assert seen.kind == "yielded"
                        outcome = await session.wait(cell.cell_id, yield_time_ms=200)
                        seen = outcome.response
                        shown += seen.text
                    assert shown == str(i)
                    outcome = await session.terminate(cell.cell_id)
                    assert outcome.response.kind == "terminated"
                    terminated.append(cell.cell_id)

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(busy, i)
            result = await session.run("text('after the loops')")
            assert result.text == "after the loops"
    assert len(set(terminated)) == 20
