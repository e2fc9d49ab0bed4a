"""The client side of tests/data/transcript-0.171.0.cbor: its recorded scenario, run again.

Run from the repository root; the host comes from ``$CODEX_CODE_MODE_HOST_PATH``.
"""

from __future__ import annotations

import trio

import codemode_trio as cm
from tests.data.record_transcript import scenario


async def main() -> None:
    async with cm.open_host_process() as conn:
        print(await scenario(conn))


if __name__ == "__main__":
    trio.run(main)
