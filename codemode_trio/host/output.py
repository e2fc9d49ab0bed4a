"""Server-side output bounding (``outputTruncation: "server"``), as host 0.171.0 does it.

The host estimates tokens at four UTF-8 bytes each and cuts text to a head and a tail of
``budget * 2`` bytes each around a ``…N tokens truncated…`` marker. Output within budget is
returned untouched. Over budget:

- when every item is text, the items are joined with newlines into one item headed by a banner::

      Warning: truncated output (original token count: 250)
      Total output lines: 1

      xxxxxxxxxxxxxxxxxxxx…240 tokens truncated…xxxxxxxxxxxxxxxxxxxx

- when images or audio are present, text items spend the budget in order: an item that fits is
  kept, the one that overflows is cut to what is left, later ones are dropped and counted in a
  final ``[omitted N text items ...]`` item; images and audio are always kept.

In server mode a script error is also reported as a last text item (``Script error:``, a
newline, then the error text) before bounding; see :func:`with_script_error`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol.content import ContentItem, TextItem

__all__ = ["DEFAULT_OUTPUT_TOKENS", "estimate_tokens", "truncate_output", "with_script_error"]

#: The budget when a request gives none.
DEFAULT_OUTPUT_TOKENS = 10_000

_BYTES_PER_TOKEN = 4


def _tokens(size: int) -> int:
    return -(-size // _BYTES_PER_TOKEN)


def estimate_tokens(text: str) -> int:
    """The host's token estimate: four UTF-8 bytes per token, rounded up."""
    return _tokens(len(text.encode()))


def _cut_text(text: str, budget: int) -> str:
    """``text`` cut to ``budget`` tokens around the truncation marker."""
    data = text.encode()
    keep = budget * _BYTES_PER_TOKEN // 2
    # A cut never splits a character: decoding drops the partial one.
    head = data[:keep].decode(errors="ignore")
    tail = data[len(data) - keep :].decode(errors="ignore") if keep else ""
    removed = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\u2026{_tokens(removed)} tokens truncated\u2026{tail}"


def with_script_error(
    items: Sequence[ContentItem], error_text: str | None
) -> tuple[ContentItem, ...]:
    """Server mode reports a script error in the output too, as its last item."""
    if error_text is None:
        return tuple(items)
    return (*items, TextItem(f"Script error:\n{error_text}"))


def truncate_output(items: Sequence[ContentItem], budget: int | None) -> tuple[ContentItem, ...]:
    """Bound ``items`` to ``budget`` tokens (``None``: the default of 10 000)."""
    if budget is None:
        budget = DEFAULT_OUTPUT_TOKENS
    texts = [item.text for item in items if type(item) is TextItem]
    joined = "\n".join(texts)
    total = estimate_tokens(joined)
    if total <= budget:
        return tuple(items)
    if len(texts) == len(items):
        banner = (
            f"Warning: truncated output (original token count: {total})\n"
            f"Total output lines: {joined.count(chr(10)) + 1}\n\n"
        )
        return (TextItem(banner + _cut_text(joined, budget)),)
    kept: list[ContentItem] = []
    remaining = budget
    omitted = 0
    for item in items:
        if type(item) is not TextItem:
            kept.append(item)
            continue
        cost = estimate_tokens(item.text)
        if cost <= remaining:
            kept.append(item)
            remaining -= cost
        elif remaining > 0:
            kept.append(TextItem(_cut_text(item.text, remaining)))
            remaining = 0
        else:
            omitted += 1
    if omitted:
        kept.append(TextItem(f"[omitted {omitted} text items ...]"))
    return tuple(kept)
