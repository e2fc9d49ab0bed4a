"""The sans-IO core must never import trio (nor anyio)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import codemode_trio.protocol as p

    loaded_after_import = sorted(m for m in ("trio", "anyio") if m in sys.modules)

    hello = p.build_hello()
    frame = p.encode_frame(p.encode_client_message(hello))
    (payload,) = p.FrameDecoder().feed(frame)
    assert p.decode_client_message(payload, strict=True) == hello
    ready = b'{"type":"connection/ready","selectedVersion":1,"capabilities":[]}'
    result = p.evaluate_handshake(hello, p.decode_host_message(ready, strict=True))
    response = p.decode_host_message(
        b'{"type":"execute/initialResponse","id":2,"result":{"status":"ok","value":'
        b'{"Result":{"cell_id":"1","content_items":[{"type":"input_text","text":"hi"}],'
        b'"error_text":null}}}}'
    )
    p.encode_host_message(response)
    try:
        p.decode_host_message(b"[]")
    except p.HostProtocolViolation:
        pass

    print(json.dumps({
        "after_import": loaded_after_import,
        "after_use": sorted(m for m in ("trio", "anyio") if m in sys.modules),
        "version": result.version,
    }))
    """
)


def test_protocol_package_runs_without_loading_trio() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report == {"after_import": [], "after_use": [], "version": 1}
