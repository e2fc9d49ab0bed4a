"""A host that plays a transcript's host side: what ``transcript replay --client`` runs.

``python -m codemode_trio.conformance.replay_host`` reads the transcript named by
``$CODEMODE_TRIO_REPLAY_TRANSCRIPT`` and writes its verdict, one JSON object, to
``$CODEMODE_TRIO_REPLAY_REPORT``: ``{"divergence": null | "...", "client_frames": N}``. On a
divergence it also prints it on stderr and exits 1, as a host that met a rule break would.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Final

import trio

from ..protocol.framing import MAX_FRAME_BYTES, encode_frame, frame_length_error
from .replay import HostReplayer, connections

__all__ = ["REPORT_ENV", "TRANSCRIPT_ENV", "main", "replay_host"]

TRANSCRIPT_ENV: Final = "CODEMODE_TRIO_REPLAY_TRANSCRIPT"
REPORT_ENV: Final = "CODEMODE_TRIO_REPLAY_REPORT"


async def replay_host(replayer: HostReplayer, report: str) -> int:
    """Serve stdio from the recording; return the exit status."""
    receive = trio.lowlevel.FdStream(os.dup(0))
    send = trio.lowlevel.FdStream(os.dup(1))
    buffer = bytearray()
    async with receive, send:
        for payload in replayer.start():
            await send.send_all(encode_frame(payload))
        while not replayer.finished:
            data = await receive.receive_some(1 << 16)
            if not data:
                replayer.client_eof()
                break
            buffer += data
            while len(buffer) >= 4 and not replayer.finished:
                length = int.from_bytes(buffer[:4], "little")
                if length > MAX_FRAME_BYTES:
                    # Refused at its header, as the host refuses it: never buffered on a
                    # client's word.
                    error = frame_length_error(length)
                    replayer.divergence = f"client frame {replayer.client_frames + 1}: {error}"
                    break
                if len(buffer) < 4 + length:
                    break
                payload = bytes(buffer[4 : 4 + length])
                del buffer[: 4 + length]
                for answer in replayer.client_frame(payload):
                    await send.send_all(encode_frame(answer))
        if replayer.divergence is None:
            # The recording is over; the client closes when it is done, as it did then.
            while await receive.receive_some(1 << 16):
                pass
    verdict = {"divergence": replayer.divergence, "client_frames": replayer.client_frames}
    async with await trio.open_file(report, "w", encoding="utf-8") as file:
        await file.write(json.dumps(verdict))
    if replayer.divergence is not None:
        print(f"Error: transcript divergence: {replayer.divergence}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    """Entry point: the transcript and report paths come from the environment."""
    transcript = os.environ.get(TRANSCRIPT_ENV, "")
    report = os.environ.get(REPORT_ENV, "")
    if not transcript or not report:
        print(f"Error: {TRANSCRIPT_ENV} and {REPORT_ENV} must be set", file=sys.stderr)
        return 1
    recorded = connections(transcript)
    if not recorded:
        print(f"Error: {transcript} records no connection", file=sys.stderr)
        return 1
    return trio.run(replay_host, HostReplayer(recorded[0]), report)


if __name__ == "__main__":
    sys.exit(main())
