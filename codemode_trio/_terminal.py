r"""Text made safe to write to a terminal: the one escaping every command-line printer uses.

What reaches the terminal from a cell (model-written code), a host or a transcript (a bug report
from anyone) may hold escape sequences that retitle the window, recolour the screen, move the
cursor to overwrite earlier lines or write the clipboard (OSC 52). Every C0 control (tab and
newline too, unless the text is allowed several lines), DEL, every C1 control and the characters
that reorder displayed text (bidi embeddings, overrides and isolates) are shown as ``\xNN`` /
``\uNNNN`` escapes instead. A backslash itself is left alone: the escaped text is for reading,
not for decoding back.
"""

from __future__ import annotations

import re

__all__ = ["json_terminal_safe", "terminal_safe"]

# The characters a terminal may act on, or that reorder what is displayed around them.
_REORDERING = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_REORDERING}]")
# The same but for tab (\x09) and newline (\x0a): cell output is usually several lines.
_UNSAFE_KEEPING_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_REORDERING}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, keep_lines: bool = False) -> str:
    r"""Return ``text`` with every character that could control a terminal escaped.

    With ``keep_lines``, ``\n`` and ``\t`` stay as they are (``\r`` is still escaped: it
    returns the cursor to overwrite what a line said).
    """
    pattern = _UNSAFE_KEEPING_LINES if keep_lines else _UNSAFE
    return pattern.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_terminal_safe(encoded: str) -> str:
    r"""Escape, inside JSON text, the characters :func:`terminal_safe` would.

    ``json.dumps(..., ensure_ascii=False)`` already escapes the C0 controls, but not DEL, the
    C1 controls or the bidi characters; written as ``\uNNNN`` they decode to the same value.
    """
    return _UNSAFE.sub(_json_escape, encoded)
