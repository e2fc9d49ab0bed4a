"""Server-side output bounding, against outputs recorded from host 0.171.0."""

from __future__ import annotations

from codemode_trio.host.output import estimate_tokens, truncate_output, with_script_error
from codemode_trio.protocol import ImageItem, TextItem

PNG = ImageItem("data:image/png;base64,AAAA", "high")


def test_tokens_are_four_utf8_bytes_rounded_up() -> None:
    assert estimate_tokens("x" * 100_000) == 25_000
    assert estimate_tokens("é" * 20) == 10
    assert estimate_tokens("") == 0


def test_output_within_budget_is_untouched() -> None:
    items = (TextItem("hi"), PNG, TextItem("there"))
    assert truncate_output(items, 1000) == items


def test_text_only_output_is_merged_under_a_banner() -> None:
    (item,) = truncate_output((TextItem("x" * 1000),), 10)
    assert item == TextItem(
        "Warning: truncated output (original token count: 250)\nTotal output lines: 1\n\n"
        + "x" * 20
        + "\u2026240 tokens truncated\u2026"
        + "x" * 20
    )


def test_a_zero_budget_keeps_only_the_banner_and_marker() -> None:
    assert truncate_output((TextItem("abcdefghijkl"),), 0) == (
        TextItem(
            "Warning: truncated output (original token count: 3)\nTotal output lines: 1\n\n"
            "\u20263 tokens truncated\u2026"
        ),
    )


def test_multibyte_text_is_cut_on_character_boundaries() -> None:
    (item,) = truncate_output((TextItem("aé" * 20),), 3)
    assert item.text.endswith("\n\naéaé\u202612 tokens truncated\u2026aéaé")
    (item,) = truncate_output((TextItem("é" * 20),), 3)
    assert item.text.endswith("\n\nééé\u20267 tokens truncated\u2026ééé")


def test_items_with_images_spend_the_budget_in_order() -> None:
    items = (TextItem("ab\ncd"), TextItem("x" * 40), PNG, TextItem("zz"))
    assert truncate_output(items, 4) == (
        TextItem("ab\ncd"),
        TextItem("xxxx\u20268 tokens truncated\u2026xxxx"),
        PNG,
        TextItem("[omitted 1 text items ...]"),
    )


def test_a_script_error_joins_the_output_before_bounding() -> None:
    items = with_script_error((TextItem("hi"),), "Error: boom\n    at exec_main.mjs:1:19")
    assert items == (
        TextItem("hi"),
        TextItem("Script error:\nError: boom\n    at exec_main.mjs:1:19"),
    )
    assert with_script_error(items, None) == items
