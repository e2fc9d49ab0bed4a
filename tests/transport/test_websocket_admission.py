"""Who ``codemode-trio serve --listen ws://`` lets in, over real sockets to a real serve.

The token it prints, web pages (``Origin``), other names for it (``Host``), ``/readyz`` next to
host 0.150's, ``--no-token``, and a client flooding its connection while another one works.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import h11
import pytest
import trio
import trio_websocket

import codemode_trio as cm
from codemode_trio.protocol import ConnectionReady, decode_host_message, encode_client_frame
from codemode_trio.protocol.handshake import build_hello
from codemode_trio.protocol.lanes import DUAL_WEBSOCKET
from codemode_trio.transport.websocket import (
    WebSocketRejected,
    bulk_websocket_url,
    connect_websocket,
)
from codemode_trio.transport.wsframes import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    FrameReader,
    encode_frame,
)

REPO = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "codemode_trio", "serve"]
KEY = "dGhlIHNhbXBsZSBub25jZQ=="


@attrs.frozen
class Served:
    """A running listener: the URL it printed first, and its stderr so far."""

    url: str
    stderr: bytearray

    @property
    def port(self) -> int:
        port = urllib.parse.urlsplit(self.url).port
        assert port is not None
        return port

    @property
    def bare(self) -> str:
        """The URL without its query (and so without the token)."""
        return self.url.partition("?")[0]

    @property
    def log(self) -> str:
        return self.stderr.decode()


async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    while chunk := await stream.receive_some():
        into += chunk


@asynccontextmanager
async def listening(argv: list[str]) -> AsyncIterator[Served]:
    """Run ``argv`` (a listener printing its URL first); yield its URL and its stderr."""
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                argv,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                check=False,
            )
        )
        assert process.stdout is not None
        assert process.stderr is not None
        stderr = bytearray()
        nursery.start_soon(drain, process.stderr, stderr)
        line = b""
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, f"{argv[0]} exited before printing its URL"
            line += chunk
        try:
            yield Served(line.decode().strip(), stderr)
        finally:
            process.terminate()


def serve(*options: str, listen: str = "ws://127.0.0.1:0") -> AbstractAsyncContextManager[Served]:
    return listening([*SERVE, "--listen", listen, *options])


@attrs.frozen
class Answer:
    status: int
    reason: bytes
    headers: dict[str, str]
    body: bytes


async def exchange(
    port: int, target: str, headers: list[tuple[str, str]], method: str = "GET"
) -> Answer:
    """Send one request over a fresh socket; read one response (the socket may stay open)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        http11 = h11.Connection(h11.CLIENT)
        request = h11.Request(method=method, target=target, headers=headers)
        await stream.send_all(http11.send(request) + (http11.send(h11.EndOfMessage()) or b""))
        response: h11.Response | h11.InformationalResponse | None = None
        body = b""
        while True:
            event = http11.next_event()
            if event is h11.NEED_DATA:
                http11.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.InformationalResponse):
                response = event
                break  # a 101: the rest is WebSocket
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    assert response is not None
    fields = {name.decode().lower(): value.decode() for name, value in response.headers}
    return Answer(response.status_code, response.reason, fields, body)


def upgrade(port: int, host: str | None = None) -> list[tuple[str, str]]:
    return [
        ("Host", host or f"127.0.0.1:{port}"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Version", "13"),
    ]


def browser(port: int, origin: str) -> list[tuple[str, str]]:
    """The upgrade request Chrome sends for a page at ``origin``."""
    return [
        ("Host", f"127.0.0.1:{port}"),
        ("Connection", "Upgrade"),
        ("Pragma", "no-cache"),
        ("Cache-Control", "no-cache"),
        ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0"),
        ("Upgrade", "websocket"),
        ("Origin", origin),
        ("Sec-WebSocket-Version", "13"),
        ("Accept-Encoding", "gzip, deflate, br, zstd"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"),
    ]


def adder() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function(description="Add two integers")
    async def add(a: int, b: int) -> int:
        return a + b

    return tools


async def test_only_the_printed_url_gets_in_and_it_runs_cells_over_both_lanes() -> None:
    with trio.fail_after(60):
        async with serve() as served:
            match = re.fullmatch(r"ws://127\.0\.0\.1:\d+/\?token=([A-Za-z0-9_-]{43,})", served.url)
            assert match is not None, served.url
            token = match[1]
            async with (
                cm.open_websocket_connection(served.url) as conn,
                conn.open_session(adder()) as session,
            ):
                assert DUAL_WEBSOCKET in conn.capabilities  # the bulk socket got in too
                result = await session.run(
                    "const rs = await Promise.all([1, 2].map(i => tools.add({a: i, b: 10})));"
                    "text(rs.join(','))"
                )
                assert result.text == "11,12"
            for url in (served.bare, f"{served.bare}/?token=wrong", f"{served.bare}/?token="):
                with pytest.raises(WebSocketRejected) as caught:
                    await connect_websocket(url)
                assert caught.value.status == 401
            with pytest.raises(cm.ConnectionFailed, match=r"HTTP error: 401 Unauthorized$"):
                async with cm.open_websocket_connection(served.bare):
                    pass
            # A bulk lane needs the token before its own is even looked at.
            with pytest.raises(WebSocketRejected) as caught:
                await connect_websocket(bulk_websocket_url(served.bare, "guessed"))
            assert caught.value.status == 401
            with pytest.raises(WebSocketRejected) as caught:
                await connect_websocket(bulk_websocket_url(served.url, "guessed"))
            assert caught.value.status == 404
            # The token in the Authorization header works as well as in the query.
            bearer = await exchange(
                served.port, "/", [*upgrade(served.port), ("Authorization", f"Bearer {token}")]
            )
            assert (bearer.status, bearer.reason) == (101, b"Switching Protocols")
            target = f"/?token={token}"
            # A web page gets 403 even with the token; a rebinding name gets 421.
            page = await exchange(served.port, target, browser(served.port, "https://evil.example"))
            assert page.status == 403
            rebound = f"rebind.evil.example:{served.port}"
            assert (
                await exchange(served.port, target, upgrade(served.port, rebound))
            ).status == 421
            other_port = f"127.0.0.1:{served.port + 1}"
            assert (
                await exchange(served.port, target, upgrade(served.port, other_port))
            ).status == 421
            # And serve goes on.
            async with cm.open_websocket_connection(served.url) as conn:
                assert conn.alive
    log = served.log
    assert "websocket request refused: Origin not allowed (see --allow-origin)" in log
    assert "websocket request refused: missing or wrong token" in log
    assert token not in log


READY_PROBES = [
    ("GET", "/readyz", []),
    ("HEAD", "/readyz", []),
    ("GET", "/readyz?probe=1", []),
    ("POST", "/readyz", [("Content-Length", "0")]),
    ("PUT", "/readyz", [("Content-Length", "0")]),
    ("DELETE", "/readyz", []),
    ("OPTIONS", "/readyz", []),
    ("GET", "/readyz", [("Origin", "https://evil.example")]),
    ("POST", "/readyz", [("Origin", "https://evil.example"), ("Content-Length", "0")]),
    ("GET", "/", [("Origin", "https://evil.example"), *upgrade(0)[1:]]),
]


async def test_readyz_and_origin_refusals_answer_as_host_0150(
    older_host_path: Path,
) -> None:
    with trio.fail_after(60):
        async with (
            listening([str(older_host_path), "--listen", "ws://127.0.0.1:0"]) as old,
            serve() as ours,
        ):
            for method, target, extra in READY_PROBES:
                answers = []
                for served in (old, ours):
                    answer = await exchange(
                        served.port, target, [("Host", f"127.0.0.1:{served.port}"), *extra], method
                    )
                    # The date differs; we close after each answer and say so, 0.150 keeps it open.
                    del answer.headers["date"]
                    answer.headers.pop("connection", None)
                    answers.append((answer.status, answer.reason, answer.headers, answer.body))
                assert answers[0] == answers[1], (method, target, extra)
                assert answers[0][0] in (200, 403, 405)


async def test_allowed_origins_and_hosts_get_in_with_the_token() -> None:
    options = ["--allow-origin", "https://app.example", "--allow-host", "codemode.test"]
    with trio.fail_after(60):
        async with serve(*options) as served:
            async with trio_websocket.open_websocket_url(
                served.url, extra_headers=[(b"Origin", b"https://app.example")]
            ) as websocket:
                await websocket.send_message(encode_client_frame(build_hello()))
                ready = decode_host_message((await websocket.get_message())[4:])
                assert isinstance(ready, ConnectionReady)
            target = served.url[served.url.index("/?") :]
            near = browser(served.port, "https://app.example:443")
            assert (await exchange(served.port, target, near)).status == 403
            named = upgrade(served.port, "codemode.test:8080")
            assert (await exchange(served.port, target, named)).status == 101
            assert (await exchange(served.port, "/", named)).status == 401


async def test_no_token_on_loopback_admits_without_one() -> None:
    with trio.fail_after(60):
        async with serve("--no-token") as served:
            assert re.fullmatch(r"ws://127\.0\.0\.1:\d+", served.url)
            async with (
                cm.open_websocket_connection(served.url) as conn,
                conn.open_session(adder()) as session,
            ):
                assert (
                    await session.run("text(String(await tools.add({a: 2, b: 3})))")
                ).text == "5"
            # Web pages are still refused.
            page = await exchange(served.port, "/", browser(served.port, "https://evil.example"))
            assert page.status == 403


@pytest.mark.parametrize(
    ("command", "options", "problem"),
    [
        (
            SERVE,
            ["ws://0.0.0.0:0", "--allow-remote", "--no-token"],
            "--allow-remote needs the token",
        ),
        (
            SERVE,
            ["ws://127.0.0.1:0", "--allow-remote", "--no-token"],
            "--allow-remote needs the token",
        ),
        (SERVE, ["tcp://127.0.0.1:0", "--no-token"], "--no-token belongs to a ws:// or wss://"),
        (SERVE, ["stdio", "--allow-origin", "https://a"], "--allow-origin belongs to a ws://"),
        (SERVE, ["ws://127.0.0.1:0", "--allow-host", "a:80"], "expected a host name, without"),
        (
            [sys.executable, "-m", "codemode_trio.host"],
            ["ws://0.0.0.0:0", "--allow-remote", "--no-token"],
            "--allow-remote needs the token",
        ),
    ],
)
def test_admission_options_that_do_not_add_up_are_refused_before_listening(
    command: list[str], options: list[str], problem: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [*command, "--listen", *options],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""  # no URL: it never listened
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(("codemode-trio: error: ", "codemode-trio-host: error: "))
    assert problem in last
    assert "Traceback" not in done.stderr


def test_allow_remote_help_points_at_wss() -> None:
    done = subprocess.run(
        [*SERVE, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert "use wss:// off this machine" in " ".join(done.stdout.split())


async def test_a_client_flooding_fragments_is_closed_with_1008_and_another_goes_on() -> None:
    with trio.fail_after(60):
        async with (
            serve() as served,
            cm.open_websocket_connection(served.url) as conn,
            conn.open_session(adder()) as session,
        ):
            stream = await trio.open_tcp_stream("127.0.0.1", served.port)
            async with stream:
                http11 = h11.Connection(h11.CLIENT)
                target = served.url[served.url.index("/?") :]
                request = h11.Request(method="GET", target=target, headers=upgrade(served.port))
                await stream.send_all(
                    http11.send(request) + (http11.send(h11.EndOfMessage()) or b"")
                )
                while not isinstance(event := http11.next_event(), h11.InformationalResponse):
                    assert event is h11.NEED_DATA
                    http11.receive_data(bytes(await stream.receive_some(65536)))
                assert event.status_code == 101
                first = encode_frame(OP_BINARY, b"\x00", mask=True)
                more = encode_frame(OP_CONTINUATION, b"\x00", mask=True)
                # Non-final frames: the FIN bit cleared. 20,000 of them, past the bound.
                flood = (
                    bytes([first[0] & 0x7F])
                    + first[1:]
                    + (bytes([more[0] & 0x7F]) + more[1:]) * 20_000
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send_ignoring_a_close, stream, flood)
                    reader = FrameReader(masked=False, max_message=1 << 20)
                    frames: list[tuple[int, bytes]] = []
                    data = http11.trailing_data[0]
                    while True:
                        frames.extend(reader.feed(data))
                        if not (data := await receive_or_end(stream)):
                            break
                    nursery.cancel_scope.cancel()
            assert frames == [(OP_CLOSE, struct.pack("!H", 1008))]
            # The other connection never noticed.
            assert (await session.run("text(String(await tools.add({a: 2, b: 3})))")).text == "5"


async def send_ignoring_a_close(stream: trio.abc.Stream, data: bytes) -> None:
    # The server hangs up part way: what it is meant to do.
    with contextlib.suppress(trio.BrokenResourceError):
        await stream.send_all(data)


async def receive_or_end(stream: trio.abc.Stream) -> bytes:
    try:
        return bytes(await stream.receive_some(65536))
    except trio.BrokenResourceError:
        return b""  # a reset after the close frame


async def test_a_url_the_client_cannot_use_is_reported_without_its_query() -> None:
    with pytest.raises(
        ValueError, match=r"^`http://127\.0\.0\.1:1/\?\.\.\.` is not a ws://"
    ) as bad:
        await connect_websocket("http://127.0.0.1:1/?token=SECRET")
    with pytest.raises(cm.ConnectionFailed, match="cannot be a base URL") as base:
        bulk_websocket_url("ws:/nowhere?token=SECRET", "t")
    with pytest.raises(cm.ConnectionFailed, match="is not a ws://") as opened:
        async with cm.open_websocket_connection("wsx://127.0.0.1:1/?token=SECRET"):
            pass
    for caught in (bad, base, opened):
        assert "SECRET" not in str(caught.value)
