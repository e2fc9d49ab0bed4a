"""The fault plan: which bytes a client gets from a host with each fault, whatever the chunking."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.conformance.steps import frame
from codemode_trio.faults import Action, Fault, FaultPlan, FaultyStream, parse_faults

READY = frame({"type": "connection/ready", "selectedVersion": 1, "capabilities": []})
RESPONSE = frame({"type": "operation/response", "id": 1, "result": {"status": "ok"}})
DELEGATE = frame({"type": "delegate/request", "id": 7, "sessionId": "s", "request": {}})
DELEGATE_2 = frame({"type": "delegate/request", "id": 8, "sessionId": "s", "request": {}})
STREAM = READY + RESPONSE + DELEGATE + DELEGATE_2


def _run(spec: str, data: bytes, *, chunk: int | None = None) -> list[Action]:
    plan = FaultPlan(parse_faults(spec))
    actions = plan.start()
    size = chunk or len(data)
    for start in range(0, len(data), size):
        actions += plan.host_bytes(data[start : start + size])
    return actions


def _sent(actions: list[Action]) -> bytes:
    return b"".join(action.data for action in actions if action.kind == "send")


def test_parse_faults_defaults_counts_and_errors() -> None:
    assert parse_faults("drop-after,slow=5") == (Fault("drop-after", 3), Fault("slow", 5))
    with pytest.raises(cm.UsageError, match="unknown fault 'nope'; known faults: drop-after"):
        parse_faults("nope")
    with pytest.raises(cm.UsageError, match="expected a count, got 'x'"):
        parse_faults("slow=x")
    with pytest.raises(cm.UsageError, match="given twice"):
        parse_faults("slow,slow=2")


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_drop_after_passes_n_frames_then_closes(chunk: int | None) -> None:
    actions = _run("drop-after=2", STREAM, chunk=chunk)
    assert _sent(actions) == READY + RESPONSE
    assert actions[-1] == Action("close", fault=Fault("drop-after", 2))


def test_a_count_of_zero_fires_before_any_frame() -> None:
    assert _run("silent-exit-after=0", STREAM) == [
        Action("exit", fault=Fault("silent-exit-after", 0))
    ]


def test_truncate_sends_half_of_the_next_frame() -> None:
    actions = _run("truncate-after=1", STREAM)
    assert _sent(actions) == READY + RESPONSE[: 4 + (len(RESPONSE) - 4) // 2]
    assert actions[-1].kind == "close"


def test_garbage_and_oversize_follow_n_frames_then_stall() -> None:
    garbage = _run("garbage-after=1", STREAM)
    assert _sent(garbage).startswith(READY)
    assert b"not JSON" in _sent(garbage)[len(READY) :]
    assert garbage[-1].kind == "stall"
    oversize = _run("oversize-after=1", STREAM)
    assert _sent(oversize) == READY + (64 * 1024 * 1024 + 1).to_bytes(4, "little")


def test_wrong_response_id_and_reused_delegate_id_rewrite_one_frame() -> None:
    def ids(data: bytes) -> list[int]:
        out = []
        while data:
            length = int.from_bytes(data[:4], "little")
            message = json.loads(data[4 : 4 + length])
            out.append(message.get("id"))
            data = data[4 + length :]
        return out

    assert ids(_sent(_run("wrong-response-id=1", STREAM))) == [None, 1_000_001, 7, 8]
    assert ids(_sent(_run("reuse-delegate-id=2", STREAM))) == [None, 1, 7, 7]


def test_slow_pauses_before_every_frame() -> None:
    actions = _run("slow=30", READY + RESPONSE)
    assert [action.kind for action in actions] == ["pause", "send", "pause", "send"]
    assert actions[0].seconds == pytest.approx(0.03)


async def test_faulty_stream_drops_the_connection_for_the_client(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client_end, host_end = trio.testing.memory_stream_pair()
    faulty = FaultyStream(client_end, parse_faults("drop-after=1,slow=100"))
    await host_end.send_all(READY + RESPONSE)
    start = trio.current_time()
    received = b""
    while data := await faulty.receive_some():
        received += data
    assert received == READY
    assert trio.current_time() - start == pytest.approx(0.1)
    assert faulty.injected == [Fault("drop-after", 1)]
    with pytest.raises(trio.BrokenResourceError):
        await faulty.send_all(b"x")


async def test_faulty_stream_stalls_reads_and_swallows_writes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client_end, host_end = trio.testing.memory_stream_pair()
    faulty = FaultyStream(client_end, parse_faults("stall-after=1"))
    await host_end.send_all(READY + RESPONSE)
    assert await faulty.receive_some() == READY
    with trio.move_on_after(60) as scope:
        await faulty.receive_some()
    assert scope.cancelled_caught
    await faulty.send_all(b"ignored")
    with trio.move_on_after(1) as quiet:
        await host_end.receive_some()
    assert quiet.cancelled_caught
