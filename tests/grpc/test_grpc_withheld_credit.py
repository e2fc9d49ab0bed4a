"""A gRPC host that withholds what it owes us fails the connection at a deadline, naming it.

Stream slots (``SETTINGS_MAX_CONCURRENT_STREAMS``), send window, the server's SETTINGS and
the TCP handshake are owed by the host: each hostile server here (python-hyper's ``h2``
server side on a real TCP socket) withholds one, and the client must give up at its
configured deadline with a :class:`~codemode_trio.ConnectionFailed` that says what was
withheld, on Trio's virtual clock.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trio

import codemode_trio as cm
from codemode_trio.grpc import codemode_pb2 as pb
from codemode_trio.grpc.framing import encode_message

OK_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
SESSION = "00000000-0000-4000-8000-000000000001"
MAX_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
INITIAL_WINDOW = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE
CONFIG = cm.ConnectionConfig()


@asynccontextmanager
async def hostile_server(
    settings: dict[int, int] | None = None,
    *,
    silent: bool = False,
    limit_after_subscribe: int | None = None,
) -> AsyncIterator[str]:
    """Serve one kind of hostility on 127.0.0.1; yield the ``grpc://`` target.

    ``settings`` go in the server's first SETTINGS frame; ``silent`` sends no preface at all;
    ``limit_after_subscribe`` opens sessions properly, then lowers the stream limit to that.
    """

    async def serve(stream: trio.SocketStream) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        conn = h2.connection.H2Connection(config=config)
        conn.local_settings = h2.settings.Settings(client=False, initial_values=settings or {})
        if not silent:
            conn.initiate_connection()
        while True:
            if not silent and (data := conn.data_to_send()):
                await stream.send_all(data)
            received = await stream.receive_some(65536)
            if not received:
                return
            if silent:
                continue  # reads everything, answers nothing
            for event in conn.receive_data(received):
                if isinstance(event, h2.events.RequestReceived) and limit_after_subscribe:
                    method = dict(event.headers or [])[b":path"].rsplit(b"/", 1)[1]
                    stream_id = event.stream_id or 0
                    if method == b"OpenSession":
                        opened = pb.SessionEvent(opened=pb.SessionOpened(session_id=SESSION))
                        conn.send_headers(stream_id, OK_HEADERS)
                        conn.send_data(stream_id, encode_message(opened.SerializeToString()))
                    elif method == b"SubscribeToToolCalls":
                        conn.send_headers(stream_id, OK_HEADERS)
                        conn.update_settings({MAX_STREAMS: limit_after_subscribe})
                    # Anything else is never answered: the slot limit keeps it from coming.

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"grpc://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def open_a_session(target: str) -> None:
    # A client without the deadline would wait for ever: fail instead (on the virtual clock).
    with trio.fail_after(CONFIG.transport_timeout * 2):
        async with cm.open_grpc_connection(target, config=CONFIG) as conn, conn.open_session():
            pytest.fail("the session opened")


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (
            {MAX_STREAMS: 0},
            "code-mode host granted no HTTP/2 stream slot within 60 s"
            " (it allows 0 concurrent streams)",
        ),
        (
            {INITIAL_WINDOW: 0},
            "code-mode host granted no HTTP/2 flow-control window within 60 s"
            " (5 request bytes waiting)",
        ),
    ],
    ids=["no-stream-slot", "no-window"],
)
async def test_opening_a_session_fails_at_the_deadline_when_the_host_withholds_credit(
    autojump_clock: trio.abc.Clock, settings: dict[int, int], reason: str
) -> None:
    async with hostile_server(settings) as target:
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed) as info:
            await open_a_session(target)
        elapsed = trio.current_time() - start
    assert str(info.value) == reason
    # The deadline, and no later than the teardown's own bounds after it.
    assert CONFIG.transport_timeout <= elapsed < CONFIG.transport_timeout + 3


async def test_a_host_that_never_sends_its_settings_fails_the_handshake_at_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with hostile_server(silent=True) as target:
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed, match="^timed out negotiating with"):
            await open_a_session(target)
        elapsed = trio.current_time() - start
    assert CONFIG.handshake_timeout <= elapsed < CONFIG.handshake_timeout + 3


async def test_a_host_that_never_accepts_the_tcp_connection_fails_at_the_handshake_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A full accept queue: the kernel drops the next SYNs (and the client retries them).
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    target = f"grpc://127.0.0.1:{port}"
    with listener:
        queued = await trio.open_tcp_stream("127.0.0.1", port)  # fills the queue
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed) as info, trio.fail_after(120):
            await open_a_session(target)
        elapsed = trio.current_time() - start
        await queued.aclose()
    assert str(info.value) == f"timed out connecting to the code-mode host at {target}"
    assert elapsed == pytest.approx(CONFIG.handshake_timeout)


async def test_a_cell_that_gets_no_stream_slot_fails_the_connection_naming_the_slot(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with (
        hostile_server(limit_after_subscribe=2) as target,
        cm.open_grpc_connection(target, config=CONFIG) as conn,
        conn.open_session() as session,
    ):
        # The limit lowered after the subscription: the session's two streams fill it.
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed) as info, trio.fail_after(120):
            await session.execute("text('never')")
        elapsed = trio.current_time() - start
        assert str(info.value) == (
            "code-mode host granted no HTTP/2 stream slot within 60 s"
            " (it allows 2 concurrent streams)"
        )
        assert conn.failure == str(info.value)
        assert elapsed == pytest.approx(CONFIG.transport_timeout)


@pytest.mark.parametrize(
    "hostility",
    [{"settings": {MAX_STREAMS: 0}}, {"settings": {INITIAL_WINDOW: 0}}, {"silent": True}],
    ids=["no-stream-slot", "no-window", "no-settings"],
)
async def test_a_hung_open_session_yields_to_the_callers_own_cancellation(
    autojump_clock: trio.abc.Clock, hostility: dict[str, object]
) -> None:
    escaped: list[BaseException] = []
    async with hostile_server(**hostility) as target:  # type: ignore[arg-type]
        with trio.move_on_after(1) as scope:
            try:
                await open_a_session(target)
            except BaseException as exc:
                escaped.append(exc)
                raise
    assert scope.cancelled_caught
    # What left the opener is the scope's plain Cancelled, not a group of them.
    assert [type(exc) for exc in escaped] == [trio.Cancelled]
