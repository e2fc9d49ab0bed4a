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
from collections.abc import Callable, Iterable, Sequence

import attrs

__all__ = [
    "CHECK_EVERY",
    "REPLACEMENT",
    "ImportKind",
    "ImportSite",
    "Stopped",
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


class Stopped(Exception):
    """Raised through :func:`find_imports` by a ``checkpoint`` that wants the work to stop."""


# Token kinds. A "postfix" is a "++" or "--" that ends the operand before it.
_NAME = "name"
_PUNCT = "punct"
_NUMBER = "number"
_STRING = "string"
_TEMPLATE = "template"
_TEMPLATE_HEAD = "template-head"
_REGEX = "regex"
_POSTFIX = "postfix"

#: How many steps of work (tokens read, tokens looked at) pass between two calls of a
#: ``checkpoint``; a step is a bounded amount of work, so the calls are evenly spread.
CHECK_EVERY = 4096

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

# Every literal and run below is matched by one regular expression, in C: the lexer's Python
# loop runs once per token, never once per character, and no pattern can backtrack (each
# repetition's alternatives start with different characters and nothing after them is
# required), so lexing is linear in the source's length.
_LINE_BREAK = re.compile(r"[\n\r\u2028\u2029]")
# In a name, "\u{...}" is one escape; a regular expression's flags are name characters.
_NAME_PART_RUN = re.compile(r"(?:[\w$\u200c\u200d]+|\\u\{[^}]*\}?|\\)*")
_FLAGS = re.compile(r"[\w$\u200c\u200d\\]*")
_STRINGS = {
    # Up to the closing quote, or a raw line break (a broken string), or the end.
    quote: re.compile(rf"{quote}(?:[^{quote}\\\n\r]+|\\(?:\r\n|[\s\S]|\Z))*(?:[{quote}\n\r]|\Z)")
    for quote in "'\""
}
# Template text up to the closing backtick, the next "${" or the end; "\x" is text.
_TEMPLATE_TEXT = re.compile(r"(?:[^`\\$]+|\\[\s\S]?|\$(?!\{))*")
# A regular expression literal without its flags: up to the closing "/" outside a class, or
# a line break (unterminated: V8 reports it).
_REGEX_BODY = re.compile(
    r"/(?:[^\\/\[\n\r\u2028\u2029]+|\\[\s\S]?|\[(?:[^\]\\\n\r\u2028\u2029]+|\\[\s\S]?)*\]?)*/?"
)
# A number: a radix literal reads name characters only; a decimal one also one "." and a
# sign after an exponent's "e".
_RADIX_NUMBER = re.compile(r"0[xXoObB][\w$\u200c\u200d\\]*")
_DIGITS = r"(?:[\w$\u200c\u200d\\]|(?<=[eE])[+-])*"
_DECIMAL_NUMBER = re.compile(rf"(?:\.{_DIGITS}|[^.]{_DIGITS}(?:\.{_DIGITS})?)")


# What the lexer skips between tokens: space and comments (an unterminated one ends it all).
_SKIP = re.compile(r"(?:[\s\ufeff]+|//[^\n\r\u2028\u2029]*|/\*(?:[^*]+|\*(?!/))*(?:\*/|\Z))*")
# The most common tokens, which need no look at the tokens before them, each matched with
# the space and comments after it: an ASCII name not followed by what a name may hold beyond
# \w, and a punctuator that is never part of a longer one that matters here.
_COMMON = re.compile(
    r"(?:(?P<name>[A-Za-z_$][\w$]*)(?![\w$\\\u200c\u200d\u0080-\U0010ffff])"
    r"|(?P<punct>[()\[\];,:=<>!~*%&|^]|\.(?![.\d])|\?(?!\.)))" + _SKIP.pattern
)


def _is_name_part(char: str) -> bool:
    return char in "$_\\\u200c\u200d" or ("a" + char).isidentifier()


class _Steps:
    """Counts work and calls the caller's checkpoint every :data:`CHECK_EVERY` steps."""

    def __init__(self, checkpoint: Callable[[], None] | None) -> None:
        self.checkpoint = checkpoint
        self.left = CHECK_EVERY

    def take(self, count: int = 1) -> None:
        self.left -= count
        if self.left <= 0:
            self.left = CHECK_EVERY
            if self.checkpoint is not None:
                self.checkpoint()


class _Lexer:
    """Splits JavaScript into its significant tokens; whitespace and comments are dropped.

    A token is ``(kind, start, end)``. ``regex_ok`` says whether a ``/`` after the last token
    starts a regular expression (see the module docstring).
    """

    def __init__(self, source: str, steps: _Steps) -> None:
        self.source = source
        self.steps = steps
        self.at = 0
        self.tokens: list[tuple[str, int, int]] = []
        # Indices of the tokens that are the name "import".
        self.imports: list[int] = []
        self.regex_ok = True
        self.last_end = 0
        # The index of each "(" token whose ")" was found -> the index of that ")".
        self.closing: dict[int, int] = {}
        # One entry per open "{" or "${": True for a template substitution, whose "}" goes
        # back into the template.
        self.braces: list[bool] = []

    def run(self) -> list[tuple[str, int, int]]:
        source = self.source
        size = len(source)
        take = self.steps.take
        tokens = self.tokens
        parens: list[int] = []
        match = _COMMON.match
        at = _SKIP.match(source, 0).end()  # type: ignore[union-attr]
        while at < size:
            take()
            common = match(source, at)
            if common is not None:
                # The common tokens, in one step with the space and comments after them.
                kind = common.lastgroup
                end = common.end(kind)  # type: ignore[arg-type]
                if kind == "name":
                    tokens.append((_NAME, at, end))
                    text = source[at:end]
                    if text == "import":
                        self.imports.append(len(tokens) - 1)
                    self.regex_ok = text in _EXPRESSION_KEYWORDS
                else:
                    tokens.append((_PUNCT, at, end))
                    char = source[at]
                    if char == "(":
                        parens.append(len(tokens) - 1)
                    elif char == ")" and parens:
                        self.closing[parens.pop()] = len(tokens) - 1
                    self.regex_ok = char not in ")]"
                self.last_end = end
                at = common.end()
                continue
            self.at = at
            char = source[at]
            if char.isspace() or char == "\ufeff" or source.startswith(("//", "/*"), at):
                pass
            elif char in "'\"":
                self.at = _STRINGS[char].match(source, at).end()  # type: ignore[union-attr]
                self._add(_STRING, at)
            elif char == "`":
                self._template(at, at + 1)
            elif char == "/" and self.regex_ok:
                self.at = _REGEX_BODY.match(source, at).end()  # type: ignore[union-attr]
                self._name_parts(_FLAGS)
                self._add(_REGEX, at)
            elif char.isdigit() or (char == "." and source[at + 1 : at + 2].isdigit()):
                self._number(at)
            elif char in "$_\\#" or char.isidentifier():
                self.at = at + 1  # the first character, "#" of a private name included
                self._name_parts(_NAME_PART_RUN)
                self._add(_NAME, at)
            else:
                self._punctuator(char, at)
            at = _SKIP.match(source, self.at).end()  # type: ignore[union-attr]
        self.at = at
        return tokens

    def _add(self, kind: str, start: int) -> None:
        end = self.at
        self.tokens.append((kind, start, end))
        self.last_end = end
        if kind == _NAME:
            text = self.source[start:end]
            if text == "import":
                self.imports.append(len(self.tokens) - 1)
            self.regex_ok = text in _EXPRESSION_KEYWORDS
        elif kind == _PUNCT:
            self.regex_ok = self.source[start:end] not in (")", "]")
        else:
            self.regex_ok = kind == _TEMPLATE_HEAD

    def _name_parts(self, run: re.Pattern[str]) -> None:
        """Read name characters from ``at``: runs of ``run``, and combining marks and the like."""
        source = self.source
        while True:
            self.at = run.match(source, self.at).end()  # type: ignore[union-attr]
            if self.at < len(source) and _is_name_part(source[self.at]):
                self.at += 1  # a combining mark and the like, which \w leaves out
                self.steps.take()
            else:
                return

    def _template(self, start: int, at: int) -> None:
        """Read template text from ``at`` up to the closing backtick or the next ``${``."""
        source = self.source
        self.at = _TEMPLATE_TEXT.match(source, at).end()  # type: ignore[union-attr]
        if source.startswith("`", self.at):
            self.at += 1
            self._add(_TEMPLATE, start)
        elif source.startswith("${", self.at):
            self.at += 2
            self._add(_TEMPLATE_HEAD, start)
            self.braces.append(True)
        else:
            self.at = min(self.at, len(source))
            self._add(_TEMPLATE, start)  # unterminated: V8 reports it

    def _number(self, start: int) -> None:
        source = self.source
        radix = source[start : start + 2].lower() in ("0x", "0o", "0b")
        pattern = _RADIX_NUMBER if radix else _DECIMAL_NUMBER
        self.at = pattern.match(source, start).end()  # type: ignore[union-attr]
        seen_dot = radix or "." in source[start : self.at]
        # Name characters beyond \w (combining marks...) continue it, one at a time.
        while self.at < len(source):
            char = source[self.at]
            if char == "." and not seen_dot:
                seen_dot = True
            elif char in "+-" and not radix and source[self.at - 1] in "eE":
                pass
            elif not _is_name_part(char):
                break
            self.at += 1
            self.steps.take()
        self._add(_NUMBER, start)

    def _is_postfix(self, start: int) -> bool:
        """Whether the ``++`` or ``--`` at ``start`` ends the operand before it (``a++``)."""
        if self.regex_ok:
            return False  # no operand before it: a prefix operator (``= ++a``)
        # A line break (in a comment too) before it ends the statement: ``a\n++b`` is
        # ``a; ++b``, as the grammar forbids a line break before a postfix operator.
        return _LINE_BREAK.search(self.source, self.last_end, start) is None

    def _punctuator(self, char: str, start: int) -> None:
        source = self.source
        if char in ".?+-":
            for long in ("...", "?.", "++", "--"):
                # "?." followed by a digit is a conditional and a number: a ? .5 : 1.
                if source.startswith(long, start) and not (
                    long == "?." and source[start + 2 : start + 3].isdigit()
                ):
                    postfix = long in ("++", "--") and self._is_postfix(start)
                    self.at = start + len(long)
                    self._add(_POSTFIX if postfix else _PUNCT, start)
                    return
        if char == "}" and self.braces and self.braces.pop():
            self._template(start, start + 1)
            return
        if char == "{":
            self.braces.append(False)
        self.at = start + 1
        self._add(_PUNCT, start)


class _Sites:
    """What each ``import`` token of a lexed source is, found in passes linear in its tokens."""

    def __init__(self, lexer: _Lexer) -> None:
        self.source = lexer.source
        self.tokens = lexer.tokens
        self.steps = lexer.steps
        # Parentheses were paired by the lexer, with a stack: as counting depth from each "("
        # would pair them, without a pass per "(".
        self.closing = lexer.closing

    def text(self, index: int) -> str:
        _, start, end = self.tokens[index]
        return self.source[start:end]

    def _is(self, index: int, text: str) -> bool:
        # Without slicing the token: it may be a long string.
        _, start, end = self.tokens[index]
        return end - start == len(text) and self.source.startswith(text, start)

    def site(self, index: int) -> ImportSite | None:
        tokens = self.tokens
        _, start, end = tokens[index]
        if index > 0 and (self._is(index - 1, ".") or self._is(index - 1, "?.")):
            return None  # a property: obj.import(...)
        if index + 1 >= len(tokens):
            return None
        if self._is(index + 1, "("):
            closing = self.closing.get(index + 1)
            after = closing + 1 if closing is not None else len(tokens)
            if after < len(tokens) and self._is(after, "{"):
                return None  # a method named import: { import(x) { ... } }
            return ImportSite(ImportKind.CALL, start, end)
        if self._is(index + 1, "."):
            if index + 2 < len(tokens) and self._is(index + 2, "meta"):
                return ImportSite(ImportKind.META, start, tokens[index + 2][2])
            return None
        kind = tokens[index + 1][0]
        if kind in (_STRING, _NAME) or self._is(index + 1, "{") or self._is(index + 1, "*"):
            return ImportSite(ImportKind.STATEMENT, start, end)
        return None

    def specifiers(self, keywords: Sequence[int]) -> dict[int, str | None]:
        """The module each static import at ``keywords`` names (token indices, in order).

        It is the string after ``import``, or the one after a ``from`` at the keyword's brace
        depth, before any ``;``. All are found in one pass: the statements still looking at
        a token are grouped by the brace depth their keyword is at.
        """
        tokens = self.tokens
        found: dict[int, str | None] = {}
        waiting: dict[int, list[int]] = {}  # brace depth of the keyword -> keywords
        starts = iter(keywords)
        next_start = next(starts, None)
        depth = 0
        for index in range(keywords[0] + 1 if keywords else 0, len(tokens) - 1):
            self.steps.take()
            while next_start is not None and next_start < index:
                if tokens[next_start + 1][0] == _STRING:
                    found[next_start] = self.text(next_start + 1)[1:-1]
                else:
                    waiting.setdefault(depth, []).append(next_start)
                next_start = next(starts, None)
            if self._is(index, "{"):
                depth += 1
            elif self._is(index, "}"):
                depth -= 1
            elif self._is(index, ";"):
                waiting.clear()
            elif self._is(index, "from") and tokens[index + 1][0] == _STRING:
                for keyword in waiting.pop(depth, ()):
                    found[keyword] = self.text(index + 1)[1:-1]
        for keyword in keywords:
            if keyword not in found and tokens[keyword + 1][0] == _STRING:
                found[keyword] = self.text(keyword + 1)[1:-1]
        return found


def find_imports(source: str, *, checkpoint: Callable[[], None] | None = None) -> list[ImportSite]:
    """Every use of the ``import`` keyword in ``source``, in source order.

    ``import`` inside strings, templates, comments and regular expressions is not a use, nor
    a property (``obj.import(...)``) or a method named ``import`` (``{ import(x) { } }``).

    The work is linear in the length of ``source``. ``checkpoint``, if given, is called every
    :data:`CHECK_EVERY` steps of it; whatever it raises (:class:`Stopped`, say) ends the work.
    """
    if "import" not in source:
        return []  # most cells: no need to lex them
    steps = _Steps(checkpoint)
    lexer = _Lexer(source, steps)
    lexer.run()
    analysis = _Sites(lexer)
    sites: list[tuple[int, ImportSite]] = []
    for index in lexer.imports:
        steps.take()
        site = analysis.site(index)
        if site is not None:
            sites.append((index, site))
    statements = [index for index, site in sites if site.kind is ImportKind.STATEMENT]
    named = analysis.specifiers(statements) if statements else {}
    return [
        attrs.evolve(site, specifier=named.get(index)) if index in named else site
        for index, site in sites
    ]


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
        source, ((site.start, site.start + 6, REPLACEMENT) for site in sites if site.kind in keep)
    )


def check_source(source: str, sites: Sequence[ImportSite]) -> str:
    """``source`` for V8 to find the syntax errors a module would have at its import calls.

    The calls are kept, so that V8 refuses ``import()``, ``new import(x)`` or three
    arguments as the reference host does; each ``import.meta`` becomes ``(0)``, which, like
    it, can be read from but not assigned to.
    """
    metas = [site for site in sites if site.kind is ImportKind.META]
    return _replaced(source, ((m.start, m.end, "(0)".ljust(m.end - m.start)) for m in metas))


def static_import_specifier(source: str, sites: Sequence[ImportSite] | None = None) -> str | None:
    """The module named by the first static import declaration of ``source``, if any.

    ``sites`` are the source's, if :func:`find_imports` already found them.
    """
    for site in find_imports(source) if sites is None else sites:
        if site.kind is ImportKind.STATEMENT and site.specifier is not None:
            return site.specifier
    return None
