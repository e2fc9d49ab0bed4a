"""Frames recorded from real hosts decode and re-encode to the bytes the host wrote.

The fixtures are ``tests/data/frames-<version>.jsonl``: one JSON object per line with the
``scenario``, the ``direction`` (``client->host`` or ``host->client``) and the exact
``payload`` text. Every file present is tested; the absence of any file is a failure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from codemode_trio.protocol import (
    HostMessageType,
    HostProtocolViolation,
    RuntimeResponse,
    WaitCompleted,
    WireOk,
    decode_client_message,
    decode_host_message,
    encode_client_message,
    encode_host_message,
)

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
FRAME_FILES = sorted(DATA_DIR.glob("frames-*.jsonl"))
REFERENCE_VERSION = (0, 171, 0)
CLIENT_TO_HOST = "client->host"
HOST_TO_CLIENT = "host->client"


def _version(path: Path) -> tuple[int, ...]:
    match = re.fullmatch(r"frames-(\d+)\.(\d+)\.(\d+)\.jsonl", path.name)
    assert match, f"unexpected fixture name {path.name}"
    return tuple(int(part) for part in match.groups())


def _load(path: Path) -> list[dict[str, Any]]:
    frames = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            frames.append(json.loads(line))
    return frames


FRAMES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    (_version(path), frame) for path in FRAME_FILES for frame in _load(path)
]


def _frame_id(entry: tuple[tuple[int, ...], dict[str, Any]]) -> str:
    version, frame = entry
    kind = json.loads(frame["payload"]).get("type")
    arrow = ">>" if frame["direction"] == CLIENT_TO_HOST else "<<"
    return f"{'.'.join(map(str, version))}-{frame['scenario']}-{arrow}{kind}"


FRAME_IDS = [_frame_id(entry) for entry in FRAMES]


def _round_trip(frame: dict[str, Any], *, strict: bool) -> bytes:
    payload = frame["payload"].encode("utf-8")
    if frame["direction"] == HOST_TO_CLIENT:
        return encode_host_message(decode_host_message(payload, strict=strict))
    assert frame["direction"] == CLIENT_TO_HOST, frame["direction"]
    return encode_client_message(decode_client_message(payload, strict=strict))


def _assert_same_frame(frame: dict[str, Any], encoded: bytes) -> None:
    payload = frame["payload"].encode("utf-8")
    if frame["direction"] == HOST_TO_CLIENT:
        # We re-encode exactly what the host wrote, key order and explicit nulls included.
        assert encoded == payload
    else:
        # Client frames were written by the recorder, whose key order is its own choice; the
        # JSON value (every key, value and null) must be identical.
        assert json.loads(encoded) == json.loads(payload)


def _missing_timing_field(payload: str) -> str | None:
    """The timing field a strict (0.171) decoder must miss in a host frame, if any."""
    data = json.loads(payload)
    runtime: dict[str, Any] | None = None
    result = data.get("result")
    if data["type"] == HostMessageType.INITIAL_RESPONSE and result["status"] == "ok":
        runtime = result["value"]
    elif (
        data["type"] == HostMessageType.OPERATION_RESPONSE
        and result["status"] == "ok"
        and result["value"]["type"] == "wait/completed"
    ):
        (runtime,) = result["value"]["outcome"].values()
    if runtime is None:
        return None
    ((tag, body),) = runtime.items()
    if "code_mode_host_duration_ns" not in body:
        return "code_mode_host_duration_ns"
    if tag == "Result" and "result_buffered_for_ns" not in body:
        return "result_buffered_for_ns"
    return None


def test_golden_frame_files_are_present() -> None:
    assert FRAME_FILES, f"no frames-*.jsonl fixture in {DATA_DIR}"
    assert REFERENCE_VERSION in {_version(path) for path in FRAME_FILES}
    assert FRAMES


@pytest.mark.parametrize("entry", FRAMES, ids=FRAME_IDS)
def test_recorded_frame_round_trips_tolerantly(
    entry: tuple[tuple[int, ...], dict[str, Any]],
) -> None:
    _, frame = entry
    _assert_same_frame(frame, _round_trip(frame, strict=False))


@pytest.mark.parametrize("entry", FRAMES, ids=FRAME_IDS)
def test_recorded_frame_decodes_strictly_exactly_when_it_matches_the_0_171_schema(
    entry: tuple[tuple[int, ...], dict[str, Any]],
) -> None:
    version, frame = entry
    missing = None
    if frame["direction"] == HOST_TO_CLIENT and version < REFERENCE_VERSION:
        missing = _missing_timing_field(frame["payload"])
    if missing is None:
        _assert_same_frame(frame, _round_trip(frame, strict=True))
    else:
        with pytest.raises(HostProtocolViolation, match=f"missing field `{missing}`"):
            _round_trip(frame, strict=True)


MISSING_DURATION = "missing field `code_mode_host_duration_ns`"


def test_0_150_runtime_responses_lack_the_host_duration_and_fail_strict_decoding() -> None:
    old = [frame for version, frame in FRAMES if version == (0, 150, 0)]
    assert old, "frames-0.150.0.jsonl is missing"
    runtime = [
        frame
        for frame in old
        if frame["direction"] == HOST_TO_CLIENT
        and _missing_timing_field(frame["payload"]) is not None
    ]
    # The 0.150 recording must exercise the skew: initial responses and wait outcomes.
    kinds = {json.loads(frame["payload"])["type"] for frame in runtime}
    assert kinds == {"execute/initialResponse", "operation/response"}
    for frame in runtime:
        payload = frame["payload"].encode("utf-8")
        with pytest.raises(HostProtocolViolation, match=MISSING_DURATION):
            decode_host_message(payload, strict=True)
        message = decode_host_message(payload)
        assert isinstance(message.result, WireOk)
        value = message.result.value
        response = value.outcome.response if isinstance(value, WaitCompleted) else value
        assert isinstance(response, RuntimeResponse)
        assert response.code_mode_host_duration_ns is None
        assert response.result_buffered_for_ns is None


def test_0_171_recording_covers_every_message_type() -> None:
    reference = [frame for version, frame in FRAMES if version == REFERENCE_VERSION]
    seen = {(frame["direction"], json.loads(frame["payload"])["type"]) for frame in reference}
    host_types = {kind for direction, kind in seen if direction == HOST_TO_CLIENT}
    client_types = {kind for direction, kind in seen if direction == CLIENT_TO_HOST}
    assert host_types >= {
        "connection/ready",
        "connection/rejected",
        "operation/response",
        "execute/initialResponse",
        "delegate/request",
        "delegate/cancel",
        "cell/closed",
    }
    assert host_types == {str(member) for member in HostMessageType}
    assert client_types == {
        "connection/hello",
        "operation/request",
        "operation/cancel",
        "operation/yield",
        "delegate/response",
    }
