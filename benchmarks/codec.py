"""Codec throughput: codemode-trio's decode/encode/framing path versus bare ``json`` + ``struct``.

Usage: ``python benchmarks/codec.py [--repeat N] [--min-time SECONDS] [--stages] [--profile]``

The payload mix is every frame of ``tests/data/frames-0.171.0.jsonl`` (frames recorded from a
real host, both directions). If that file is missing, a SPEC-like mix is synthesised instead and
the output says so.

Per message, the two paths do the same work on the same payload bytes:

- ours: ``decode_host_message``/``decode_client_message`` (by direction), then
  ``encode_host_message``/``encode_client_message``, then ``encode_frame`` and
  ``FrameDecoder.feed``;
- bare: ``json.loads``, ``json.dumps(separators=(",", ":"), ensure_ascii=False).encode()``,
  ``struct.pack("<I")`` framing and ``struct.unpack_from`` + slice unframing.

Each path runs over the whole mix several times in one process, the two alternating (and
swapping which goes first) so that both see the same machine load. The headline ratio compares
the best repetition of each; the median of the per-repetition ratios is printed beside it as a
check on a noisy machine. The target is ours/bare <= 1.3.

``--stages`` times decoding, encoding and framing separately for both paths, and splits our
decoding and encoding into their parts (this uses private helpers of the protocol package).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codemode_trio.protocol import (
    ClientMessage,
    ConnectionHello,
    ConnectionReady,
    DelegateRequest,
    DelegateRequestId,
    DelegateResponse,
    ExecuteRequest,
    ExecutionStarted,
    FrameDecoder,
    HostMessage,
    InitialResponse,
    OperationRequest,
    OperationResponse,
    RequestId,
    RuntimeResponse,
    TextItem,
    ToolCall,
    ToolDefinition,
    ToolResult,
    WaitCompleted,
    WaitOutcome,
    WaitRequest,
    WireOk,
    _wire,
    decode_client_message,
    decode_host_message,
    encode_client_message,
    encode_frame,
    encode_host_message,
)
from codemode_trio.protocol import codec as _codec

FRAMES_FILE = Path(__file__).resolve().parents[1] / "tests" / "data" / "frames-0.171.0.jsonl"
TARGET_RATIO = 1.3

Mix = list[tuple[bool, bytes]]  # (is_host_to_client, payload)


def load_mix() -> tuple[Mix, str]:
    """The payload mix and a line describing where it came from."""
    if FRAMES_FILE.exists():
        mix: Mix = []
        for line in FRAMES_FILE.read_text(encoding="utf-8").splitlines():
            if line.strip():
                frame = json.loads(line)
                mix.append((frame["direction"] == "host->client", frame["payload"].encode()))
        return mix, f"recorded frames from {FRAMES_FILE.name}"
    return synthesise_mix(), f"SYNTHESISED SPEC-like mix ({FRAMES_FILE.name} not found)"


def synthesise_mix() -> Mix:
    """Messages shaped like the spec's examples, in a plausible session's proportions."""
    echo = ToolDefinition(
        "echo",
        "echo tool",
        {"type": "object", "properties": {"a": {"type": "number"}}},
        None,
    )
    client: list[ClientMessage] = [
        ConnectionHello((1,), (), ("yield-observation", "bounded-output-v1")),
        OperationRequest(
            RequestId(3),
            ExecuteRequest(
                "s1",
                "const r = await tools.echo({a:1}); text(JSON.stringify(r));",
                "call-X",
                (echo,),
            ),
        ),
        OperationRequest(RequestId(4), WaitRequest("s1", "2", 500)),
        DelegateResponse(DelegateRequestId(1), WireOk(ToolResult({"echo": {"a": 1}}))),
    ]
    result = RuntimeResponse("result", "2", (TextItem('{"echo":{"a":1}}'),), None, 0, 5164179)
    yielded = RuntimeResponse("yielded", "1", (TextItem("middle"),), None, None, 501334994)
    host: list[HostMessage] = [
        ConnectionReady(1, ("bounded-output-v1", "yield-observation")),
        OperationResponse(RequestId(3), WireOk(ExecutionStarted("2"))),
        DelegateRequest(
            DelegateRequestId(1), "s1", ToolCall("2", "tool-1", "echo", None, "function", {"a": 1})
        ),
        InitialResponse(RequestId(3), WireOk(result)),
        OperationResponse(RequestId(4), WireOk(WaitCompleted(WaitOutcome(True, yielded)))),
    ]
    mix: Mix = [(False, encode_client_message(m)) for m in client]
    mix += [(True, encode_host_message(m)) for m in host]
    return mix * 30


def ours(mix: Mix) -> int:
    """Our path over the whole mix; returns the number of payloads that came out."""
    decoder = FrameDecoder()
    feed = decoder.feed
    count = 0
    for is_host, payload in mix:
        if is_host:
            out = encode_host_message(decode_host_message(payload))
        else:
            out = encode_client_message(decode_client_message(payload))
        count += len(feed(encode_frame(out)))
    return count


_pack = struct.Struct("<I").pack
_unpack_from = struct.Struct("<I").unpack_from


def bare(mix: Mix) -> int:
    """The bare stdlib path over the whole mix."""
    loads = json.loads
    dumps = json.dumps
    count = 0
    for _is_host, payload in mix:
        out = dumps(loads(payload), separators=(",", ":"), ensure_ascii=False).encode()
        frame = _pack(len(out)) + out
        (length,) = _unpack_from(frame, 0)
        count += len(frame[4 : 4 + length]) >= 0
    return count


def timed_runs(mix: Mix, loops: int, repeat: int) -> tuple[list[float], list[float]]:
    """Wall times (bare, ours) of ``repeat`` repetitions of ``loops`` passes over ``mix``.

    The two paths alternate within each repetition, and which one goes first alternates
    between repetitions, so that neither is favoured by the other warming the caches.
    """
    times: dict[Callable[[Mix], int], list[float]] = {bare: [], ours: []}
    for index in range(repeat):
        for run in (bare, ours) if index % 2 == 0 else (ours, bare):
            start = time.perf_counter()
            for _ in range(loops):
                run(mix)
            times[run].append(time.perf_counter() - start)
    return times[bare], times[ours]


def _best_per_message(run: Callable[[], object], loops: int, repeat: int, count: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(loops):
            run()
        best = min(best, time.perf_counter() - start)
    return best / (loops * count) * 1e6


def stages(mix: Mix, loops: int, repeat: int) -> str:
    """Per-stage cost (us/message) of both paths, ours split further into its parts.

    The parts of our decode and encode are the measured JSON step and the remainder (total
    minus that step), so that they add up to the totals measured on the real path.
    """
    count = len(mix)
    decoders = {True: decode_host_message, False: decode_client_message}
    encoders: dict[bool, Callable[[Any], bytes]] = {
        True: encode_host_message,
        False: encode_client_message,
    }
    contexts = {True: _codec._HOST_CONTEXTS[False], False: _codec._CLIENT_CONTEXTS[False]}
    messages = [(is_host, decoders[is_host](payload)) for is_host, payload in mix]
    payloads = [payload for _, payload in mix]

    def bare_decode() -> None:
        for payload in payloads:
            json.loads(payload)

    def ours_decode() -> None:
        for is_host, payload in mix:
            decoders[is_host](payload)

    def ours_parse() -> None:
        for is_host, payload in mix:
            _wire.loads(payload, contexts[is_host])

    def bare_encode() -> None:
        for _, message in messages:
            json.dumps(message.to_wire(), separators=(",", ":"), ensure_ascii=False).encode()

    def ours_encode() -> None:
        for is_host, message in messages:
            encoders[is_host](message)

    def to_wire() -> None:
        for _, message in messages:
            message.to_wire()

    def bare_framing() -> None:
        for payload in payloads:
            frame = _pack(len(payload)) + payload
            (length,) = _unpack_from(frame, 0)
            frame[4 : 4 + length]

    def ours_framing() -> None:
        feed = FrameDecoder().feed
        for payload in payloads:
            feed(encode_frame(payload))

    def cost(run: Callable[[], None]) -> float:
        return _best_per_message(run, loops, repeat, count)

    decode, parse = cost(ours_decode), cost(ours_parse)
    encode, wire = cost(ours_encode), cost(to_wire)
    # The bare encode needs the wire dicts too; building them is not the bare path's cost.
    bare_encode_cost = cost(bare_encode) - wire
    rows = [
        ("decode", f"{cost(bare_decode):.2f}", decode),
        ("  JSON text -> values", "", parse),
        ("  values -> messages", "", decode - parse),
        ("encode", f"{bare_encode_cost:.2f}", encode),
        ("  messages -> values", "", wire),
        ("  values -> JSON bytes", "", encode - wire),
        ("framing (write + read)", f"{cost(bare_framing):.2f}", cost(ours_framing)),
    ]
    lines = [f"{'stage (us/message)':<28}{'bare':>10}{'ours':>10}"]
    lines += [f"{name:<28}{bare_us:>10}{ours_us:>10.2f}" for name, bare_us, ours_us in rows]
    return "\n".join(lines)


def calibrate(mix: Mix, min_time: float) -> int:
    """Passes over the mix needed for the bare path to take about ``min_time`` seconds."""
    loops = 1
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            bare(mix)
        if time.perf_counter() - start >= min_time:
            return loops
        loops *= 2


def profile(mix: Mix, loops: int) -> str:
    """cProfile of our path, top functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(loops):
        ours(mix)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
    return out.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="repetitions (best counts)")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per repetition")
    parser.add_argument("--stages", action="store_true", help="time each stage separately")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of our path")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()[0]
    mix, source = load_mix()
    assert ours(mix) == len(mix) == bare(mix)  # same work, and it all round-trips
    kinds = Counter(json.loads(payload)["type"] for _, payload in mix)
    total_bytes = sum(len(payload) for _, payload in mix)

    loops = calibrate(mix, args.min_time)
    ours(mix)  # warm-up
    bare_times, ours_times = timed_runs(mix, loops, args.repeat)
    t_bare, t_ours = min(bare_times), min(ours_times)
    messages = len(mix) * loops
    ratio = t_ours / t_bare
    paired = statistics.median(o / b for b, o in zip(bare_times, ours_times, strict=True))
    load_after = os.getloadavg()[0]

    print(f"payload mix : {source}")
    print(
        f"              {len(mix)} messages, {total_bytes} bytes, "
        f"{sum(1 for h, _ in mix if h)} host->client / {sum(1 for h, _ in mix if not h)} "
        f"client->host"
    )
    print(f"              {dict(kinds.most_common())}")
    print(f"python      : {sys.version.split()[0]}")
    # A busy machine inflates both paths, ours (more allocation, more bytecode) a little more.
    print(f"load average: {load_before:.2f} at start, {load_after:.2f} at end")
    print(f"timing      : best of {args.repeat} x {loops} passes ({messages} messages each)")
    print()
    print(f"{'path':<28}{'messages/s':>14}{'us/message':>14}")
    for name, seconds in (("bare json+struct", t_bare), ("codemode_trio.protocol", t_ours)):
        print(f"{name:<28}{messages / seconds:>14,.0f}{seconds / messages * 1e6:>14.2f}")
    print()
    verdict = "OK" if ratio <= TARGET_RATIO else "ABOVE TARGET"
    print(f"ratio (ours cost / bare cost): {ratio:.2f}x  (target <= {TARGET_RATIO}x: {verdict})")
    print(f"median of the {args.repeat} paired ratios: {paired:.2f}x")

    if args.stages:
        print()
        print(stages(mix, max(1, loops // 4), args.repeat))

    if args.profile:
        print()
        print(profile(mix, loops))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
