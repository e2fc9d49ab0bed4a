"""Every ``<<``/``>>`` example of the wire spec decodes and re-encodes byte for byte.

The examples live in ``data/spec_examples.json``, generated from the spec by
``data/extract_spec_examples.py``; the test never reads the spec itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codemode_trio.protocol import (
    decode_client_message,
    decode_host_message,
    encode_client_message,
    encode_host_message,
)

EXAMPLES_FILE = Path(__file__).parent / "data" / "spec_examples.json"
EXAMPLES: list[dict[str, str]] = json.loads(EXAMPLES_FILE.read_text(encoding="utf-8"))


def _compact(text: str) -> bytes:
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False).encode()


def _example_id(example: dict[str, str]) -> str:
    data = json.loads(example["json"])
    label = data["type"]
    inner = data.get("request") or data.get("result", {}).get("value") or data.get("reason")
    if isinstance(inner, dict):
        label += "/" + str(inner.get("method") or inner.get("type") or next(iter(inner)))
    return f"{example['direction']} {label}"


def test_examples_cover_both_directions_and_the_multi_line_execute() -> None:
    directions = {example["direction"] for example in EXAMPLES}
    assert directions == {"<<", ">>"}
    assert len(EXAMPLES) >= 30
    executes = [e for e in EXAMPLES if '"method":"session/execute"' in e["json"]]
    assert len(executes) == 1
    # The §6.2 example spans several lines in the spec; the extractor joined it into one value.
    assert json.loads(executes[0]["json"])["request"]["request"]["enabled_tools"][0]["name"] == (
        "echo"
    )


@pytest.mark.parametrize("strict", [False, True], ids=["tolerant", "strict"])
@pytest.mark.parametrize("example", EXAMPLES, ids=[_example_id(e) for e in EXAMPLES])
def test_spec_example_round_trips_to_compact_json(example: dict[str, str], strict: bool) -> None:
    payload = example["json"].encode()
    if example["direction"] == "<<":
        encoded = encode_host_message(decode_host_message(payload, strict=strict))
    else:
        encoded = encode_client_message(decode_client_message(payload, strict=strict))
    assert encoded == _compact(example["json"])
