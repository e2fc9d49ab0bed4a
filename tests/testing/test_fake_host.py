"""FakeHost judges a client by the reference host's reader, and still sends whatever it is told."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from codemode_trio.protocol import (
    ConnectionHello,
    FrameDecoder,
    OperationRequest,
    RequestId,
    ShutdownRequest,
    encode_client_frame,
)
from codemode_trio.protocol.host_protocol import FatalClientError
from codemode_trio.testing import FakeHost


async def feed(frames: bytes) -> FakeHost:
    client, server = trio.testing.memory_stream_pair()
    host = FakeHost(server)
    await client.send_all(frames)
    await client.send_eof()
    with trio.fail_after(5):
        await host.run_reader()
    return host


async def test_a_reused_request_id_fails_like_on_the_real_host() -> None:
    request = encode_client_frame(OperationRequest(RequestId(3), ShutdownRequest("s")))
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    with pytest.raises(FatalClientError, match=r"duplicate code-mode request ID RequestId\(3\)"):
        await feed(hello + request + request)


async def test_a_second_hello_fails() -> None:
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    with pytest.raises(FatalClientError, match="received a second code-mode client hello"):
        await feed(hello + hello)


async def test_a_frame_cut_by_eof_fails_with_early_eof() -> None:
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    with pytest.raises(FatalClientError, match="early eof"):
        await feed(hello + hello[:6])


async def test_valid_messages_are_logged_and_raw_payloads_still_go_out() -> None:
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    client, server = trio.testing.memory_stream_pair()
    host = FakeHost(server)
    await client.send_all(hello)
    await client.send_eof()
    with trio.fail_after(5):
        await host.run_reader()
        await host.send_payload(b'{"type":"no/such"}')
        data = await client.receive_some()
    assert host.log == [ConnectionHello((1,), (), ())]
    assert FrameDecoder().feed(data) == [b'{"type":"no/such"}']
