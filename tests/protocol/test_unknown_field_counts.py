"""The warn-once counter of unknown fields: keyed without list indices, and bounded."""

from __future__ import annotations

import json
import logging

import pytest

from codemode_trio.protocol import decode_host_message, unknown_field_counts
from codemode_trio.protocol._wire import UnknownFieldCounts

ITEMS_WHERE = "execute/initialResponse.result.value.Result.content_items"


def _result_with_items(count: int, extra_key: str) -> bytes:
    item = {"type": "input_text", "text": "hi", extra_key: 1}
    return json.dumps(
        {
            "type": "execute/initialResponse",
            "id": 2,
            "result": {
                "status": "ok",
                "value": {
                    "Result": {
                        "cell_id": "1",
                        "content_items": [item] * count,
                        "error_text": None,
                        "result_buffered_for_ns": 0,
                        "code_mode_host_duration_ns": 5,
                    }
                },
            },
        }
    ).encode()


def test_the_same_field_in_every_list_item_is_one_entry_and_any_index_reads_it() -> None:
    key = "x_list_index_test"
    reports: list[tuple[str, tuple[str, ...]]] = []
    before = unknown_field_counts[(f"{ITEMS_WHERE}[]", key)]

    decode_host_message(
        _result_with_items(3, key), on_unknown=lambda where, names: reports.append((where, names))
    )

    # The hook still hears the exact location of each item.
    assert reports == [(f"{ITEMS_WHERE}[{index}]", (key,)) for index in range(3)]
    assert unknown_field_counts[(f"{ITEMS_WHERE}[]", key)] == before + 3
    assert unknown_field_counts[(f"{ITEMS_WHERE}[0]", key)] == before + 3
    assert unknown_field_counts[(f"{ITEMS_WHERE}[41]", key)] == before + 3
    assert (f"{ITEMS_WHERE}[7]", key) in unknown_field_counts
    assert [entry for entry in unknown_field_counts if entry[1] == key] == [
        (f"{ITEMS_WHERE}[]", key)
    ]


def test_nested_list_indices_are_all_blanked() -> None:
    counts = UnknownFieldCounts()
    counts.record("operation/request.request(session/execute).request.enabled_tools[12]", ("x",))
    counts.record("a[1].b[22].c", ("y",))
    assert dict(counts) == {
        ("operation/request.request(session/execute).request.enabled_tools[]", "x"): 1,
        ("a[].b[].c", "y"): 1,
    }


def test_each_entry_is_logged_once_and_then_only_counted(caplog: pytest.LogCaptureFixture) -> None:
    counts = UnknownFieldCounts()
    with caplog.at_level(logging.WARNING, logger="codemode_trio.protocol"):
        for index in range(5):
            counts.record(f"cell/closed.items[{index}]", ("x_new", "x_other"))
    assert counts == {("cell/closed.items[]", "x_new"): 5, ("cell/closed.items[]", "x_other"): 5}
    assert [record.getMessage() for record in caplog.records] == [
        "ignoring unknown field 'x_new' in cell/closed.items[0] (version skew?)",
        "ignoring unknown field 'x_other' in cell/closed.items[0] (version skew?)",
    ]


def test_past_the_limit_new_entries_share_one_overflow_entry_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = UnknownFieldCounts(limit=4)
    with caplog.at_level(logging.WARNING, logger="codemode_trio.protocol"):
        for index in range(10):
            counts.record("cell/closed", (f"x_{index}",))
        counts.record("cell/closed", ("x_0",))  # an entry kept before the limit still counts

    assert len(counts) == 5
    assert counts[UnknownFieldCounts.OVERFLOW] == 6
    assert counts[("cell/closed", "x_0")] == 2
    assert counts[("cell/closed", "x_9")] == 0
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 5
    assert "more than 4 distinct unknown fields seen" in messages[-1]


def test_the_default_bound_is_1024_entries(caplog: pytest.LogCaptureFixture) -> None:
    counts = UnknownFieldCounts()
    with caplog.at_level(logging.ERROR, logger="codemode_trio.protocol"):
        for index in range(1500):
            counts.record(f"cell/closed.x{index}", ("x",))
    assert len(counts) == 1025
    assert counts[UnknownFieldCounts.OVERFLOW] == 1500 - 1024
    assert isinstance(unknown_field_counts, UnknownFieldCounts)
    assert unknown_field_counts.limit == 1024
