"""A client that breaks protocol rules on purpose, to show that ``conform --client`` sees them.

Run as a script: it spawns ``$CODEX_CODE_MODE_HOST_PATH`` and speaks raw frames, breaking each
rule once (the last one, a reused request id, is fatal to the host), then exits 0 as if all
had gone well.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from typing import Any


def main() -> int:
    host = subprocess.Popen(
        [os.environ["CODEX_CODE_MODE_HOST_PATH"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert host.stdin is not None
    assert host.stdout is not None
    stdin, stdout = host.stdin, host.stdout

    def send(message: dict[str, Any]) -> None:
        payload = json.dumps(message).encode()
        stdin.write(struct.pack("<I", len(payload)) + payload)
        stdin.flush()

    def until(kind: str) -> dict[str, Any]:
        while True:
            header = stdout.read(4)
            if len(header) < 4:
                raise SystemExit(f"host closed while waiting for {kind}")
            message: dict[str, Any] = json.loads(stdout.read(struct.unpack("<I", header)[0]))
            if message["type"] == kind:
                return message

    def request(request_id: int, body: dict[str, Any]) -> None:
        send({"type": "operation/request", "id": request_id, "request": body})

    echo = {
        "name": "echo",
        "tool_name": {"name": "echo", "namespace": None},
        "description": "echo",
        "kind": "function",
    }
    send(
        {
            "type": "connection/hello",
            "supportedVersions": [1],
            "requiredCapabilities": [],
            "optionalCapabilities": [],
        }
    )
    until("connection/ready")
    execute = {"tool_call_id": "c", "enabled_tools": [echo], "yield_time_ms": 60000}
    # A session that was never opened.
    request(
        1, {"method": "session/execute", "sessionId": "s0", "request": {**execute, "source": ""}}
    )
    until("operation/response")
    request(2, {"method": "session/open", "sessionId": "s1"})
    until("operation/response")
    source = "await tools.echo({})"
    request(
        3,
        {"method": "session/execute", "sessionId": "s1", "request": {**execute, "source": source}},
    )
    until("delegate/request")
    # A wait before the initial response, an unknown delegate, a yield not negotiated.
    request(
        4,
        {
            "method": "session/wait",
            "sessionId": "s1",
            "request": {"cell_id": "1", "yield_time_ms": 10},
        },
    )
    send({"type": "delegate/response", "id": 99, "result": {"status": "error", "message": "x"}})
    send({"type": "operation/yield", "id": 3})
    # An answer to a cancelled delegate.
    request(5, {"method": "session/terminate", "sessionId": "s1", "cellId": "1"})
    until("delegate/cancel")
    send({"type": "delegate/response", "id": 1, "result": {"status": "error", "message": "late"}})
    # A request on a session that was shut down.
    request(6, {"method": "session/shutdown", "sessionId": "s1"})
    until("operation/response")
    request(7, {"method": "session/shutdown", "sessionId": "s1"})
    # A reused request id: the host dies of it.
    request(2, {"method": "session/open", "sessionId": "s2"})
    stdin.close()
    host.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
