"""The protocol over WebSocket: our client against ``codemode-trio serve --listen ws://``.

Sessions over a WebSocket, on one lane and on two, run the shared scenarios of
tests/integration/test_session_api.py; here is what belongs to the WebSocket itself.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
import trio_websocket
import trustme

import codemode_trio as cm
from codemode_trio.protocol import (
    ConnectionReady,
    decode_host_message,
    encode_client_frame,
    encode_host_frame,
)
from codemode_trio.protocol.handshake import build_hello
from codemode_trio.protocol.lanes import DUAL_WEBSOCKET
from codemode_trio.transport.websocket import (
    WebSocketFrameStream,
    WebSocketRejected,
    accept_websocket,
    bulk_websocket_url,
    connect_websocket,
)
from codemode_trio.transport.wsframes import OP_BINARY, FrameReader, accept_key

REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def served_websocket(*options: str, listen: str = "ws://127.0.0.1:0") -> AsyncIterator[str]:
    """``codemode-trio serve --listen ws://127.0.0.1:0``; yield the URL it prints first."""
    argv = [sys.executable, "-m", "codemode_trio", "serve", "--listen", listen, *options]
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                argv,
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
        try:
            yield line.decode().strip()
        finally:
            process.terminate()


async def test_the_bulk_lane_carries_tool_calls_and_their_cancels_against_serve() -> None:
    tools = cm.ToolRegistry()
    notes: list[str] = []
    started = trio.Event()
    cancelled = trio.Event()

    @tools.function(description="Add two integers")
    async def add(a: int, b: int) -> int:
        return a + b

    @tools.function(description="Never returns")
    async def hang() -> None:
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    @tools.on_notification
    async def note(n: cm.Notification) -> None:
        notes.append(n.text)

    with trio.fail_after(60):
        async with (
            served_websocket() as url,
            cm.open_websocket_connection(url) as conn,
            conn.open_session(tools) as session,
        ):
            assert DUAL_WEBSOCKET in conn.capabilities  # two sockets from here on
            result = await session.run(
                "notify('on control'); const calls = [...Array(50).keys()]"
                ".map(i => tools.add({a: i, b: 1}));"
                "text(String((await Promise.all(calls)).reduce((x, y) => x + y)))"
            )
            assert result.text == str(sum(range(1, 51)))
            cell = await session.execute("await tools.hang({})", yield_time_ms=200)
            await started.wait()
            assert (await cell.initial_response()).kind == "yielded"
            assert (await session.terminate(cell.cell_id)).response.kind == "terminated"
            await cancelled.wait()  # the host's delegate/cancel, on the bulk lane
            assert conn.alive
            stats = conn.statistics()
            assert stats.outgoing_queued == stats.bulk_outgoing_queued == 0
    assert notes == ["on control"]


async def test_serve_refuses_a_bulk_lane_it_never_offered_with_404() -> None:
    with trio.fail_after(60):
        async with served_websocket() as url:
            with pytest.raises(WebSocketRejected) as caught:
                await connect_websocket(bulk_websocket_url(url, "guessed"))
            assert caught.value.status == 404
            # An independent client speaks to serve on one socket like ours does.
            async with trio_websocket.open_websocket_url(url) as websocket:
                hello = encode_client_frame(build_hello(optional=[DUAL_WEBSOCKET]))
                await websocket.send_message(hello)
                ready = decode_host_message((await websocket.get_message())[4:])
            assert isinstance(ready, ConnectionReady)
            assert ready.capabilities == (DUAL_WEBSOCKET,)
            assert ready.bulk_connection_token is not None


@asynccontextmanager
async def fake_websocket_host(*answers: str | bytes) -> AsyncIterator[str]:
    """A WebSocket server that answers the hello with ``answers`` (text or binary messages)."""

    async def handle(request: trio_websocket.WebSocketRequest) -> None:
        websocket = await request.accept()
        await websocket.get_message()  # the hello
        for answer in answers:
            await websocket.send_message(answer)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(trio_websocket.serve_websocket, handle, "127.0.0.1", 0, None)
        )
        yield f"ws://127.0.0.1:{server.port}"
        nursery.cancel_scope.cancel()


async def test_a_text_message_fails_the_connection_with_the_reference_text() -> None:
    reason = "code-mode host websocket messages must be binary framed messages"
    ready = encode_host_frame(ConnectionReady(1, ()))
    with trio.fail_after(30):
        async with (
            fake_websocket_host(ready, "a text message") as url,
            cm.open_websocket_connection(url) as conn,
        ):
            assert await conn.wait_failed() == reason
    with trio.fail_after(30):
        async with fake_websocket_host("not even a hello") as url:
            with pytest.raises(cm.ConnectionFailed, match=f"hello: {reason}$"):
                async with cm.open_websocket_connection(url):
                    pass


async def test_connecting_to_nothing_is_a_clear_connection_failure() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    with (
        trio.fail_after(30),
        pytest.raises(
            cm.ConnectionFailed, match="^failed to connect to the code-mode host websocket: "
        ),
    ):
        async with cm.open_websocket_connection(f"ws://127.0.0.1:{port}"):
            pass


async def test_frames_are_cut_into_one_message_each_whatever_the_writes() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    stream = WebSocketFrameStream(ours, client=True)
    one = encode_host_frame(ConnectionReady(1, ()))
    two = encode_host_frame(ConnectionReady(1, ("x",)))
    data = one + two
    await stream.send_all(data[:3])
    await stream.send_all(data[3 : len(one) + 5])
    await stream.send_all(data[len(one) + 5 :])
    reader = FrameReader(masked=True, max_message=1 << 20)
    assert reader.feed(await theirs.receive_some()) == [(OP_BINARY, one), (OP_BINARY, two)]


async def test_a_server_asked_for_another_websocket_version_names_13() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    await theirs.send_all(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n"
    )
    with trio.fail_after(10):
        assert await accept_websocket(ours) is None
        answer = b""
        while chunk := await theirs.receive_some():
            answer += chunk
    head = answer.decode().lower()
    assert head.startswith("http/1.1 426 ") and "sec-websocket-version: 13\r\n" in head


async def test_a_101_that_is_not_a_websocket_upgrade_is_refused() -> None:
    async def handle(stream: trio.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            request += await stream.receive_some()
        key = next(
            line.split(b":", 1)[1].strip()
            for line in request.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        # The right accept key, but neither Upgrade nor Connection says websocket.
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: "
            + accept_key(key.decode()).encode()
            + b"\r\n\r\n"
        )
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        with trio.fail_after(10), pytest.raises(ValueError, match="not a WebSocket upgrade"):
            await connect_websocket(f"ws://127.0.0.1:{port}/")
        nursery.cancel_scope.cancel()


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[trustme.CA, list[str]]:
    """A throwaway CA and ``serve``'s options for a certificate it issued to 127.0.0.1."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return ca, ["--tls-cert", str(cert), "--tls-key", str(key)]


async def test_a_session_over_wss_with_both_lanes_on_tls(
    certificate: tuple[trustme.CA, list[str]],
) -> None:
    ca, options = certificate
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    tools = cm.ToolRegistry()

    @tools.function(description="Add two integers")
    async def add(a: int, b: int) -> int:
        return a + b

    with trio.fail_after(60):
        async with served_websocket(*options, listen="wss://127.0.0.1:0") as url:
            assert url.startswith("wss://127.0.0.1:")
            async with (
                cm.open_websocket_connection(url, ssl_context=trusting) as conn,
                conn.open_session(tools) as session,
            ):
                assert DUAL_WEBSOCKET in conn.capabilities  # the bulk socket is TLS too
                result = await session.run(
                    "const rs = await Promise.all([1, 2].map(i => tools.add({a: i, b: 10})));"
                    "text(rs.join(','))"
                )
                assert result.text == "11,12"
            # A client that does not trust the certificate fails clearly; serve goes on.
            with pytest.raises(cm.ConnectionFailed, match="CERTIFICATE_VERIFY_FAILED"):
                async with cm.open_websocket_connection(url):
                    pass
            async with cm.open_websocket_connection(url, ssl_context=trusting) as conn:
                assert conn.alive
            # Over TLS too, the token is required and a web page is refused.
            assert "?token=" in url
            with pytest.raises(WebSocketRejected) as caught:
                await connect_websocket(url.partition("?")[0], ssl_context=trusting)
            assert caught.value.status == 401
            port = urllib.parse.urlsplit(url).port
            assert port is not None
            request = (
                f"GET {url[url.index('/?') :]} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\nOrigin: https://evil.example\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            )
            stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=trusting)
            async with stream:
                await stream.send_all(request.encode())
                assert (await stream.receive_some()).startswith(b"HTTP/1.1 403 Forbidden\r\n")


@pytest.mark.parametrize(
    ("listen", "options", "problem"),
    [
        ("wss://127.0.0.1:0", [], "a wss:// listener needs --tls-cert FILE and --tls-key FILE"),
        ("ws://127.0.0.1:0", ["--tls-cert", "c.pem"], "--tls-cert and --tls-key belong to"),
        (
            "wss://127.0.0.1:0",
            ["--tls-cert", "missing.pem", "--tls-key", "missing.pem"],
            "cannot load the TLS certificate missing.pem",
        ),
    ],
)
def test_serve_refuses_tls_options_that_do_not_add_up(
    listen: str, options: list[str], problem: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "codemode_trio", "serve", "--listen", listen, *options],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert problem in done.stderr and len(done.stderr.strip().splitlines()) == 1
