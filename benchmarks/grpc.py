#!/usr/bin/env python3
"""Sequential tool calls over the host's gRPC API: codemode-trio versus grpcio's sync client.

Usage::

    python benchmarks/grpc.py [--host PATH] [--calls N] [--repeat R]

Both clients drive the same ``codex-code-mode-host --listen grpc://127.0.0.1:0`` process, one
after the other, through one cell ``for (let i = 0; i < N; i++) await tools.echo({i})``: one
tool call in flight at a time, so each call is a full round trip (ToolCall on the subscription
stream, then a CompleteToolCall unary call).

- ``grpcio``: grpcio's blocking API, as a Python application would write it: the cell's
  ``Execute`` stream read in the main thread, the subscription read in a second thread that
  answers each call with a blocking ``CompleteToolCall``. Messages are the same generated
  protobuf classes (no grpcio stubs needed: ``channel.unary_unary`` / ``unary_stream``).
- ``codemode-trio``: the public API: ``cm.open_grpc_connection``, ``open_session`` with a
  ``ToolRegistry``, ``session.run``.
- ``over stdio`` (only with ``--stdio``, not compared): the same client on a host of its own
  spawned with ``cm.open_host_process(transport="grpc")`` (``--listen grpc+stdio://``), to
  show what the TCP socket costs.

Each client gets a warm-up cell, then R timed cells (alternating which client goes first); the
best rate of each is compared, with the client process's CPU time per call (every thread,
grpcio's C core included). The target is ours/grpcio >= 0.8; the exit status is 1 when missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and this very module would shadow
# the grpcio package it is named after.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import grpc  # noqa: E402
import trio  # noqa: E402

import codemode_trio as cm  # noqa: E402
from codemode_trio.grpc import codemode_pb2 as pb  # noqa: E402
from codemode_trio.hostbin import locate_host  # noqa: E402

SERVICE = "/codex.code_mode.v1.CodeModeHost/"
TARGET_RATIO = 0.8


def cell_source(calls: int) -> str:
    return (
        f"let s = 0; for (let i = 0; i < {calls}; i++) {{ s += (await tools.echo({{i}})).i }}"
        " text(String(s))"
    )


def expected(calls: int) -> str:
    return str(calls * (calls - 1) // 2)


# --------------------------------------------------------------------------- grpcio


class GrpcioClient:
    """A blocking grpcio client of the host's API, for one session."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        ch = self.channel

        def unary(name: str, out: Any) -> Callable[..., Any]:
            return ch.unary_unary(
                SERVICE + name,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=out.FromString,
            )

        def stream(name: str, out: Any) -> Callable[..., Any]:
            return ch.unary_stream(
                SERVICE + name,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=out.FromString,
            )

        self.open_session = stream("OpenSession", pb.SessionEvent)
        self.subscribe = stream("SubscribeToToolCalls", pb.ToolCall)
        self.complete = unary("CompleteToolCall", pb.CompleteToolCallResponse)
        self.execute = stream("Execute", pb.ExecuteEvent)
        self.close_session = unary("CloseSession", pb.CloseSessionResponse)
        self.lease = self.open_session(pb.OpenSessionRequest())
        self.session_id = next(self.lease).opened.session_id
        self.calls = self.subscribe(pb.SubscribeToToolCallsRequest(session_id=self.session_id))
        self.calls.initial_metadata()  # registered
        self.worker = threading.Thread(target=self._answer, daemon=True)
        self.worker.start()
        self.tool = pb.ToolDefinition(
            name="echo", tool_name=pb.ToolName(name="echo"), description="echo", kind=1
        )

    def _answer(self) -> None:
        try:
            for call in self.calls:
                if call.HasField("heartbeat"):
                    continue
                result = json.loads(call.input_json)  # the echo tool
                self.complete(
                    pb.CompleteToolCallRequest(
                        session_id=self.session_id,
                        invocation_id=call.invocation_id,
                        succeeded=pb.ToolCallSucceeded(output_json=json.dumps(result).encode()),
                    )
                )
        except grpc.RpcError:
            pass  # cancelled at the end

    def run(self, source: str) -> str:
        request = pb.ExecuteRequest(
            session_id=self.session_id,
            execution_id=str(uuid.uuid4()),
            tool_call_id="bench",
            source=source,
            enabled_tools=[self.tool],
            yield_time_ms=600_000,
        )
        text = ""
        for event in self.execute(request):
            if event.WhichOneof("event") == "outcome":
                text = "\n".join(item.text.text for item in event.outcome.content_items)
        return text

    def close(self) -> None:
        self.close_session(pb.CloseSessionRequest(session_id=self.session_id))
        self.calls.cancel()
        self.lease.cancel()
        self.channel.close()


def measure_grpcio(address: str, calls: int, repeat: int) -> list[tuple[float, float]]:
    client = GrpcioClient(address)
    try:
        client.run(cell_source(10))
        samples = []
        for _ in range(repeat):
            cpu, wall = time.process_time(), time.perf_counter()
            assert client.run(cell_source(calls)) == expected(calls)
            samples.append((time.perf_counter() - wall, time.process_time() - cpu))
        return samples
    finally:
        client.close()


# --------------------------------------------------------------------------- codemode-trio


def measure_ours(target: str | Path, calls: int, repeat: int) -> list[tuple[float, float]]:
    """Our client on ``target`` (``grpc://...``), or on a host binary spawned over its stdio."""
    tools = cm.ToolRegistry()

    @tools.function(description="echo")
    async def echo(i: int) -> dict[str, int]:
        return {"i": i}

    async def main() -> list[tuple[float, float]]:
        opener = (
            cm.open_host_process(target, transport="grpc")
            if isinstance(target, Path)
            else cm.open_grpc_connection(target)
        )
        async with opener as conn, conn.open_session(tools) as s:
            await s.run(cell_source(10), yield_time_ms=600_000)
            samples = []
            for _ in range(repeat):
                cpu, wall = time.process_time(), time.perf_counter()
                result = await s.run(cell_source(calls), yield_time_ms=600_000)
                samples.append((time.perf_counter() - wall, time.process_time() - cpu))
                assert result.text == expected(calls), result
            return samples

    return trio.run(main)


# --------------------------------------------------------------------------- main


def start_host(host: Path) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [str(host), "--listen", "grpc://127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    url = process.stdout.readline().decode().strip()
    if not url.startswith("http://"):
        process.kill()
        raise SystemExit(f"the host did not print its address (got {url!r})")
    return process, url.removeprefix("http://")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", type=Path, default=None, help="host binary")
    parser.add_argument("--calls", type=int, default=1000, help="tool calls per timed cell")
    parser.add_argument("--repeat", type=int, default=3, help="timed cells per client")
    parser.add_argument(
        "--stdio", action="store_true", help="also time our client over grpc+stdio://"
    )
    options = parser.parse_args(argv)
    host = options.host or locate_host()
    process, address = start_host(host)
    results: dict[str, list[tuple[float, float]]] = {"grpcio": [], "codemode-trio": []}
    if options.stdio:
        results["over stdio"] = []
    try:
        for round_number in range(options.repeat):
            order = list(results)
            if round_number % 2:
                order.reverse()
            for name in order:
                if name == "grpcio":
                    results[name] += measure_grpcio(address, options.calls, 1)
                elif name == "codemode-trio":
                    results[name] += measure_ours(f"grpc://{address}", options.calls, 1)
                else:
                    results[name] += measure_ours(host, options.calls, 1)
    finally:
        process.kill()
        process.wait()
    print(f"host: {host}  calls per cell: {options.calls}  cells per client: {options.repeat}")
    best: dict[str, float] = {}
    for name, samples in results.items():
        rates = [options.calls / wall for wall, _ in samples]
        cpu_us = [cpu / options.calls * 1e6 for _, cpu in samples]
        best[name] = max(rates)
        print(
            f"  {name:14} best {max(rates):8,.0f} calls/s   "
            f"client CPU {min(cpu_us):6.0f} us/call (best) {sorted(cpu_us)[len(cpu_us) // 2]:6.0f}"
            " (median)"
        )
    ratio = best["codemode-trio"] / best["grpcio"]
    print(f"  ratio codemode-trio/grpcio: {ratio:.2f} (target >= {TARGET_RATIO})")
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
