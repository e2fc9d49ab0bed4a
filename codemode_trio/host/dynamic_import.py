"""Where a cell's JavaScript uses the ``import`` keyword, found by a small lexer (no parser).

The reference host compiles a cell as a module whose loader refuses every import. mini-racer
compiles scripts only and has no loader hook, so three uses of the keyword must be found in
the source before V8 sees it:

* ``import(...)`` (:attr:`ImportKind.CALL`): V8 would reject it with its own
  ``Error("Not supported")``; the reference host rejects with a string;
* ``import.meta`` (:attr:`ImportKind.META`): a SyntaxError outside a module, an empty object
  inside one;
* a static ``import ... from '...'`` (:attr:`ImportKind.STATEMENT`): the reference host's error
  names the module, which V8's SyntaxError does not.

The first two are rewritten (:func:`runtime_source`) to :data:`REPLACEMENT`, an identifier of
the same length in UTF-16 code units, so that every line and column in error texts stays put;
the cell's wrapper binds it. ``import`` is syntax, not a binding, hence the rewrite.

The lexer skips strings, template literals (with code nested in ``${ }``), comments and
regular expression literals. Whether a ``/`` starts a regular expression or divides is decided
by the previous significant token, the usual rule for lexing JavaScript without parsing it:
after ``)``, ``]``, a name, a number or a literal it divides, except after keywords such as
``return`` or ``typeof``; after ``}`` or any other punctuator it starts a regular expression.
``++`` and ``--`` are read whole: one that ends an operand (``a++ / 2``, the operand on the
same line) divides, one that starts an operand (``++/re/.lastIndex``) starts a regular
expression, like any other operator.
The rule misreads a regular expression right after a statement's ``)`` (``if (x) /re/``).
``import(...)`` followed by ``{`` is a method named ``import`` (``{ import(x) { } }``), not a
call; so is a call followed by a bare block on the next line, which scripts hardly write.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence

import attrs

__all__ = [
    "REPLACEMENT",
    "ImportKind",
    "ImportSite",
    "check_source",
    "find_imports",
    "runtime_source",
    "static_import_specifier",
]

#: What ``import`` becomes in a call or ``import.meta``: "import" in modifier letters, six
#: BMP characters (so six UTF-16 code units, as V8 counts columns) that no script would use.
REPLACEMENT = "\u1da6\u1d50\u1d56\u1d52\u02b3\u1d57"


class ImportKind(enum.Enum):
    """How the ``import`` keyword is used at a site."""

    #: ``import(specifier[, options])``, a dynamic import.
    CALL = "call"
    #: ``import.meta``.
    META = "meta"
    #: A static import declaration: ``import x from 'y'``, ``import 'y'``, ...
    STATEMENT = "statement"


@attrs.frozen
class ImportSite:
    """One use of the ``import`` keyword: ``start`` is the keyword's offset in the source.

    ``end`` is where the construct's head ends: after the keyword for a call or a statement,
    after ``meta`` for ``import.meta``. ``specifier`` is the module a statement names, when
    the lexer found its string.
    """

    kind: ImportKind
    start: int
    end: int
    specifier: str | None = None


@attrs.frozen
class _Token:
    # "name", "punct", "number", "string", "template", "template-head", "regex", or "postfix"
    # for a "++" or "--" that ends the operand before it.
    kind: str
    text: str
    start: int


_LINE_TERMINATORS = "\n\r\u2028\u2029"
# After these names an expression starts, so a "/" begins a regular expression.
_EXPRESSION_KEYWORDS = frozenset(
    [
        "await",
        "case",
        "delete",
        "do",
        "else",
        "extends",
        "in",
        "instanceof",
        "new",
        "of",
        "return",
        "throw",
        "typeof",
        "void",
        "yield",
    ]
)
# The punctuators whose length matters here; every other one is read a character at a time,
# which the regex rule allows: a "/" after any of their last characters starts a regex, as it
# does after the whole punctuator ("=>", ">>=", "&&", ...). Not so after a postfix "++"/"--".
_LONG_PUNCTUATORS = ("...", "?.", "++", "--")


# Runs the lexer skips or takes whole, matched in C rather than character by character.
_SPACE = re.compile(r"[\s\ufeff]+")
_NAME_RUN = re.compile(r"[\w$\u200c\u200d]+")
_STRINGS = {
    # Up to the closing quote, or a raw line break (a broken string), or the end.
    quote: re.compile(rf"{quote}(?:[^{quote}\\\n\r]|\\(?:\r\n|[\s\S]|\Z))*(?:[{quote}\n\r]|\Z)")
    for quote in "'\""
}


def _is_name_start(char: str) -> bool:
    return char in "$_\\" or char.isidentifier()


def _is_name_part(char: str) -> bool:
    return char in "$_\\\u200c\u200d" or ("a" + char).isidentifier()


class _Lexer:
    """Splits JavaScript into its significant tokens; whitespace and comments are dropped."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.at = 0
        self.tokens: list[_Token] = []
        # One entry per open "{" or "${": True for a template substitution, whose "}" goes
        # back into the template.
        self.braces: list[bool] = []

    def run(self) -> list[_Token]:
        source = self.source
        while self.at < len(source):
            char = source[self.at]
            if char.isspace() or char == "\ufeff":
                self.at = _SPACE.match(source, self.at).end()  # type: ignore[union-attr]
            elif source.startswith("//", self.at):
                self._skip_line()
            elif source.startswith("/*", self.at):
                close = source.find("*/", self.at + 2)
                self.at = len(source) if close < 0 else close + 2
            elif char in "'\"":
                self._string(char)
            elif char == "`":
                self._template(self.at, self.at + 1)
            elif char == "/" and self._regex_allowed():
                self._regex()
            elif char.isdigit() or (char == "." and source[self.at + 1 : self.at + 2].isdigit()):
                self._number()
            elif _is_name_start(char) or char == "#":
                self._name()
            else:
                self._punctuator(char)
        return self.tokens

    def _add(self, kind: str, start: int) -> None:
        self.tokens.append(_Token(kind, self.source[start : self.at], start))

    def _skip_line(self) -> None:
        source = self.source
        while self.at < len(source) and source[self.at] not in _LINE_TERMINATORS:
            self.at += 1

    def _regex_allowed(self) -> bool:
        if not self.tokens:
            return True
        last = self.tokens[-1]
        if last.kind == "name":
            return last.text in _EXPRESSION_KEYWORDS
        if last.kind == "punct":
            return last.text not in (")", "]")
        return last.kind == "template-head"

    def _is_postfix(self, start: int) -> bool:
        """Whether the ``++`` or ``--`` at ``start`` ends the operand before it (``a++``)."""
        if self._regex_allowed():
            return False  # no operand before it: a prefix operator (``= ++a``)
        last = self.tokens[-1]
        gap = self.source[last.start + len(last.text) : start]
        # A line break (in a comment too) before it ends the statement: ``a\n++b`` is
        # ``a; ++b``, as the grammar forbids a line break before a postfix operator.
        return not any(char in _LINE_TERMINATORS for char in gap)

    def _string(self, quote: str) -> None:
        start = self.at
        self.at = _STRINGS[quote].match(self.source, start).end()  # type: ignore[union-attr]
        self._add("string", start)

    def _template(self, start: int, at: int) -> None:
        """Read template text from ``at`` up to the closing backtick or the next ``${``."""
        source = self.source
        self.at = at
        while self.at < len(source):
            char = source[self.at]
            if char == "\\":
                self.at += 2
            elif char == "`":
                self.at += 1
                self._add("template", start)
                return
            elif source.startswith("${", self.at):
                self.at += 2
                self._add("template-head", start)
                self.braces.append(True)
                return
            else:
                self.at += 1
        self._add("template", start)  # unterminated: V8 reports it

    def _regex(self) -> None:
        source, start = self.source, self.at
        self.at += 1
        in_class = False
        while self.at < len(source):
            char = source[self.at]
            if char in _LINE_TERMINATORS:
                break  # unterminated: V8 reports it
            self.at += 1
            if char == "\\":
                self.at += 1
            elif char == "[":
                in_class = True
            elif char == "]":
                in_class = False
            elif char == "/" and not in_class:
                break
        while self.at < len(source) and _is_name_part(source[self.at]):
            self.at += 1  # flags
        self._add("regex", start)

    def _number(self) -> None:
        source, start = self.source, self.at
        radix = source[start : start + 2].lower() in ("0x", "0o", "0b")
        seen_dot = False
        while self.at < len(source):
            char = source[self.at]
            if char == "." and not seen_dot and not radix:
                seen_dot = True
            elif char in "+-" and not radix and source[self.at - 1] in "eE":
                pass
            elif not _is_name_part(char):
                break
            self.at += 1
        self._add("number", start)

    def _name(self) -> None:
        source, start = self.source, self.at
        self.at += 1  # the first character, "#" of a private name included
        while self.at < len(source):
            run = _NAME_RUN.match(source, self.at)
            if run is not None:
                self.at = run.end()
            elif source[self.at] == "\\" and source.startswith("u{", self.at + 1):
                # A "\u" escape is name characters here; "\u{...}" ends at its "}".
                close = source.find("}", self.at)
                self.at = len(source) if close < 0 else close + 1
            elif _is_name_part(source[self.at]):
                self.at += 1  # a combining mark and the like, which \w leaves out
            else:
                break
        self._add("name", start)

    def _punctuator(self, char: str) -> None:
        start = self.at
        for long in _LONG_PUNCTUATORS:
            # "?." followed by a digit is a conditional and a number: a ? .5 : 1.
            if self.source.startswith(long, start) and not (
                long == "?." and self.source[start + 2 : start + 3].isdigit()
            ):
                postfix = long in ("++", "--") and self._is_postfix(start)
                self.at += len(long)
                self._add("postfix" if postfix else "punct", start)
                return
        if char == "}" and self.braces and self.braces.pop():
            self._template(start, start + 1)
            return
        if char == "{":
            self.braces.append(False)
        self.at += 1
        self._add("punct", start)


def _closing_paren(tokens: Sequence[_Token], opening: int) -> int | None:
    """The index of the ``)`` matching the ``(`` at ``opening``, if the source has one."""
    depth = 0
    for index in range(opening, len(tokens)):
        token = tokens[index]
        if token.kind != "punct":
            continue
        if token.text == "(":
            depth += 1
        elif token.text == ")":
            depth -= 1
            if depth == 0:
                return index
    return None


def _specifier(tokens: Sequence[_Token], keyword: int) -> str | None:
    """The module a static import names: the string after ``import`` or after its ``from``."""
    following = tokens[keyword + 1 : keyword + 2]
    if following and following[0].kind == "string":
        return following[0].text[1:-1]
    depth = 0
    for index in range(keyword + 1, len(tokens) - 1):
        token = tokens[index]
        if token.text == "{":
            depth += 1
        elif token.text == "}":
            depth -= 1
        elif token.text == ";":
            return None
        elif depth == 0 and token.text == "from" and tokens[index + 1].kind == "string":
            return tokens[index + 1].text[1:-1]
    return None


def _site(tokens: Sequence[_Token], index: int) -> ImportSite | None:
    keyword = tokens[index]
    end = keyword.start + len(keyword.text)
    if index > 0 and tokens[index - 1].text in (".", "?."):
        return None  # a property: obj.import(...)
    following = tokens[index + 1] if index + 1 < len(tokens) else None
    if following is None:
        return None
    if following.text == "(":
        closing = _closing_paren(tokens, index + 1)
        after = closing + 1 if closing is not None else len(tokens)
        if after < len(tokens) and tokens[after].text == "{":
            return None  # a method named import: { import(x) { ... } }
        return ImportSite(ImportKind.CALL, keyword.start, end)
    if following.text == ".":
        meta = tokens[index + 2] if index + 2 < len(tokens) else None
        if meta is not None and meta.text == "meta":
            return ImportSite(ImportKind.META, keyword.start, meta.start + len(meta.text))
        return None
    if following.kind in ("string", "name") or following.text in ("{", "*"):
        return ImportSite(ImportKind.STATEMENT, keyword.start, end, _specifier(tokens, index))
    return None


def find_imports(source: str) -> list[ImportSite]:
    """Every use of the ``import`` keyword in ``source``, in source order.

    ``import`` inside strings, templates, comments and regular expressions is not a use, nor
    a property (``obj.import(...)``) or a method named ``import`` (``{ import(x) { } }``).
    """
    if "import" not in source:
        return []  # most cells: no need to lex them
    tokens = _Lexer(source).run()
    sites = (
        _site(tokens, index)
        for index, token in enumerate(tokens)
        if token.kind == "name" and token.text == "import"
    )
    return [site for site in sites if site is not None]


def _replaced(source: str, spans: Iterable[tuple[int, int, str]]) -> str:
    parts: list[str] = []
    at = 0
    for start, end, text in spans:
        parts += (source[at:start], text)
        at = end
    parts.append(source[at:])
    return "".join(parts)


def runtime_source(source: str, sites: Sequence[ImportSite]) -> str:
    """``source`` with the keyword of each call and ``import.meta`` replaced (same length)."""
    keep = (ImportKind.CALL, ImportKind.META)
    return _replaced(
        source,
        ((site.start, site.start + 6, REPLACEMENT) for site in sites if site.kind in keep),
    )


def check_source(source: str, sites: Sequence[ImportSite]) -> str:
    """``source`` for V8 to find the syntax errors a module would have at its import calls.

    The calls are kept, so that V8 refuses ``import()``, ``new import(x)`` or three
    arguments as the reference host does; each ``import.meta`` becomes ``(0)``, which, like
    it, can be read from but not assigned to.
    """
    return _replaced(
        source,
        (
            (site.start, site.end, "(0)".ljust(site.end - site.start))
            for site in sites
            if site.kind is ImportKind.META
        ),
    )


def static_import_specifier(source: str) -> str | None:
    """The module named by the first static import declaration of ``source``, if any."""
    for site in find_imports(source):
        if site.kind is ImportKind.STATEMENT and site.specifier is not None:
            return site.specifier
    return None
