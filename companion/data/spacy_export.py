"""spaCy's rule-based tokenizer as data that JavaScript can run (the book's in-page translator).

:func:`spacy_tokenizer_rules` describes ``spacy.blank(language).tokenizer`` (the tokenizer that
:class:`~companion.data.tokenizers.WordTokenizer` uses) as a JSON-serialisable dict; ``web/translator/tokenizer.js``
runs spaCy's algorithm on it and gives the same tokens, hence the same ids. The format::

    {
      "format": "spacy-tokenizer-rules/1",
      "language": "de",
      "spacy_version": "3.8.18",
      "whitespace": {"source": "[\\u{9}-\\u{D}...]", "flags": "u"},   # one character that str.isspace() accepts
      "prefix":      {"source": ..., "flags": "u"} or null,             # used like Python's re.search
      "suffix":      {...} or null,                                     # re.search
      "infix":       {...} or null,                                     # re.finditer
      "token_match": {...} or null,                                     # re.match (anchored at the start)
      "url_match":   {...} or null,                                     # re.match
      "special_cases": {"z.B.": ["z.B."], "geht's": ["geht", "'s"], ...},  # exception -> its tokens (ORTH)
      "faster_heuristics": true                                         # spaCy's Tokenizer.faster_heuristics
    }

Each pattern is the ``source`` and ``flags`` of a JavaScript ``RegExp`` that matches exactly where the Python
pattern does. :func:`python_regex_to_js` builds it from Python's own parse of the pattern rather than from its
text, because the two syntaxes agree on the characters but not on their meaning: Python's ``\\w``, ``\\d``,
``\\s`` and ``\\b`` are Unicode-aware, JavaScript's are ASCII-only, and Python's ``$`` also matches before a
final newline. Those become explicit character classes (computed by Python's ``re`` itself, so they follow the
Unicode version of the Python that exported them) and lookarounds. Constructs without an exact JavaScript
equivalent (case-insensitive or multi-line matching, backreferences, conditional, atomic or possessive groups,
``\\B``) raise a ``ValueError`` instead of being approximated.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any

try:  # Python >= 3.11
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef]

from .tokenizers import spacy_tokenizer

__all__ = ["RULES_FORMAT", "spacy_tokenizer_rules", "python_regex_to_js"]

RULES_FORMAT = "spacy-tokenizer-rules/1"

# flags that change nothing once the pattern is parsed (UNICODE is the default for str patterns) or that the
# converter handles (DOTALL, ASCII); anything else (IGNORECASE, MULTILINE, LOCALE) is refused
_HANDLED_FLAGS = re.UNICODE | re.VERBOSE | re.DOTALL | re.ASCII | re.DEBUG

# the regex callables of a spaCy tokenizer, with the method of a compiled pattern each must be
_REGEX_ATTRIBUTES = {
    "prefix": ("prefix_search", "search"),
    "suffix": ("suffix_search", "search"),
    "infix": ("infix_finditer", "finditer"),
    "token_match": ("token_match", "match"),
    "url_match": ("url_match", "match"),
}


def spacy_tokenizer_rules(language: str) -> dict[str, Any]:
    """The rules of ``spacy.blank(language).tokenizer`` in the JSON form described in this module's docstring.

    Raises ``TypeError`` when ``language`` is not a string, ``ValueError`` when spaCy does not know it or when
    one of its patterns cannot be expressed exactly as a JavaScript regular expression.
    """
    if not isinstance(language, str):
        raise TypeError(f"language must be a str (a language code such as 'de'), got {type(language).__name__}")
    import spacy
    from spacy.attrs import ORTH, intify_attrs

    tokenizer = spacy_tokenizer(language)
    rules: dict[str, Any] = {
        "format": RULES_FORMAT,
        "language": language,
        "spacy_version": spacy.__version__,
        "whitespace": {"source": "[" + _char_ranges(_whitespace_code_points()) + "]", "flags": "u"},
    }
    for key, (attribute, method) in _REGEX_ATTRIBUTES.items():
        rules[key] = _callable_to_js(getattr(tokenizer, attribute), f"{language} tokenizer.{attribute}", method)
    if rules["infix"] is not None and _min_width(tokenizer.infix_finditer.__self__) == 0:
        # after an empty match, Python's finditer may still match non-empty text at the same place and
        # JavaScript's matchAll may not, so the two would split differently
        raise ValueError(f"the {language} tokenizer's infix pattern can match the empty string; not supported")
    rules["special_cases"] = {
        chunk: [intify_attrs(spec, _do_deprecated=True)[ORTH] for spec in specs]
        for chunk, specs in sorted(tokenizer.rules.items())
    }
    rules["faster_heuristics"] = bool(tokenizer.faster_heuristics)
    return rules


def python_regex_to_js(pattern: re.Pattern) -> dict[str, str]:
    """``{"source", "flags"}`` of a JavaScript ``RegExp`` that matches exactly where ``pattern`` matches.

    Positions agree as code points (the ``u`` flag makes JavaScript step over astral characters whole). Use
    the result as Python uses the pattern: ``exec`` for ``search``; add ``g`` for ``finditer`` and ``y`` (with
    ``lastIndex = 0``) for ``match``.
    """
    if not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, str):
        raise TypeError(f"pattern must be a compiled str regular expression, got {type(pattern).__name__}")
    parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    flags = parsed.state.flags
    if flags & ~_HANDLED_FLAGS:
        refused = re.RegexFlag(flags & ~_HANDLED_FLAGS)
        raise ValueError(f"pattern {_short(pattern)} uses {refused!r}, which JavaScript does not match the same way")
    return {"source": _JsWriter(pattern, flags).sequence(parsed), "flags": "u"}


# -- helpers -----------------------------------------------------------------------------------------------


def _callable_to_js(function: Any, name: str, method: str) -> dict[str, str] | None:
    """The JavaScript form of a tokenizer callable that must be ``re.compile(...).<method>``, or None."""
    if function is None:
        return None
    pattern = getattr(function, "__self__", None)
    if not isinstance(pattern, re.Pattern) or getattr(function, "__name__", None) != method:
        raise ValueError(f"{name} must be the .{method} method of a compiled regular expression, got {function!r}")
    return python_regex_to_js(pattern)


def _min_width(pattern: re.Pattern) -> int:
    return sre_parse.parse(pattern.pattern, pattern.flags).getwidth()[0]


def _short(pattern: re.Pattern) -> str:
    text = pattern.pattern
    return repr(text if len(text) <= 60 else text[:57] + "...")


@functools.cache
def _whitespace_code_points() -> tuple[int, ...]:
    """What spaCy splits on (``str.isspace``, which is also Python's ``\\s``)."""
    return tuple(c for c in range(sys.maxunicode + 1) if chr(c).isspace())


@functools.cache
def _category_class_body(escape: str, flags: int) -> str:
    """The code points that the Python class escape (``\\w``, ``\\D``, ...) matches under ``flags`` (only
    ``re.ASCII`` matters), as the body of a JavaScript character class. Python's ``re`` decides, one run of
    consecutive code points at a time."""
    everything = "".join(map(chr, range(sys.maxunicode + 1)))  # lone surrogates included, as in Python's re
    runs = re.finditer(escape + "+", everything, flags & re.ASCII)
    return "".join(_js_range(run.start(), run.end() - 1) for run in runs)


def _char_ranges(code_points: tuple[int, ...]) -> str:
    """Sorted code points as the body of a character class, consecutive ones as ranges."""
    body, start = [], None
    for i, c in enumerate(code_points):
        start = c if start is None else start
        if i + 1 == len(code_points) or code_points[i + 1] != c + 1:
            body.append(_js_range(start, c))
            start = None
    return "".join(body)


def _js_char(code_point: int) -> str:
    """One code point in JavaScript (``u`` flag) syntax, valid inside and outside character classes."""
    char = chr(code_point)
    return char if char.isascii() and char.isalnum() else f"\\u{{{code_point:X}}}"


def _js_range(low: int, high: int) -> str:
    return _js_char(low) if low == high else f"{_js_char(low)}-{_js_char(high)}"


_CATEGORY_ESCAPES = {"DIGIT": r"\d", "NOT_DIGIT": r"\D", "SPACE": r"\s", "NOT_SPACE": r"\S"}
_CATEGORY_ESCAPES |= {"WORD": r"\w", "NOT_WORD": r"\W"}


class _JsWriter:
    """Writes JavaScript regex source for the nodes of Python's parse tree (``re._parser``)."""

    def __init__(self, pattern: re.Pattern, flags: int) -> None:
        self.pattern = pattern
        self.flags = flags

    def sequence(self, items) -> str:
        return "".join(self.node(str(op), value) for op, value in items)

    def node(self, op: str, value: Any) -> str:  # noqa: C901 (one branch per node type reads best)
        if op == "LITERAL":
            return _js_char(value)
        if op == "NOT_LITERAL":
            return f"[^{_js_char(value)}]"
        if op == "ANY":  # Python's "." skips only "\n"; JavaScript's also skips "\r", U+2028 and U+2029
            return "[^]" if self.flags & re.DOTALL else "[^\\n]"
        if op == "IN":
            return self.char_class(value)
        if op == "BRANCH":
            return "(?:" + "|".join(self.sequence(branch) for branch in value[1]) + ")"
        if op == "SUBPATTERN":
            _group, add_flags, del_flags, body = value
            if (add_flags | del_flags) & ~(re.UNICODE | re.ASCII) or add_flags & re.ASCII:
                raise self.refuse("scoped inline flags such as (?i:...)")
            return f"(?:{self.sequence(body)})"  # groups need not capture: spaCy uses whole matches only
        if op in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, body = value
            lazy = "?" if op == "MIN_REPEAT" else ""
            return f"(?:{self.sequence(body)}){_quantifier(low, high)}{lazy}"
        if op in ("ASSERT", "ASSERT_NOT"):
            direction, body = value
            kind = ("<" if direction < 0 else "") + ("=" if op == "ASSERT" else "!")
            return f"(?{kind}{self.sequence(body)})"
        if op == "AT":
            return self.anchor(str(value))
        raise self.refuse(f"the construct {op}")

    def char_class(self, items) -> str:
        negate, body = "", []
        for op, value in items:
            op = str(op)
            if op == "NEGATE":
                negate = "^"
            elif op == "LITERAL":
                body.append(_js_char(value))
            elif op == "RANGE":
                body.append(_js_range(*value))
            elif op == "CATEGORY":
                body.append(self.category(str(value)))
            else:
                raise self.refuse(f"the class item {op}")
        return f"[{negate}{''.join(body)}]"

    def category(self, name: str) -> str:
        escape = _CATEGORY_ESCAPES.get(name.removeprefix("CATEGORY_"))
        if escape is None:
            raise self.refuse(f"the class {name}")
        return _category_class_body(escape, self.flags)

    def anchor(self, name: str) -> str:
        if name in ("AT_BEGINNING", "AT_BEGINNING_STRING"):  # no MULTILINE, so both mean the start
            return "^"
        if name == "AT_END":  # Python's $ also matches just before a final "\n"
            return "(?=\\n?$)"
        if name == "AT_END_STRING":
            return "$"
        if name == "AT_BOUNDARY":  # Python's \b follows its (Unicode) \w
            word = "[" + self.category("CATEGORY_WORD") + "]"
            return f"(?:(?<={word})(?!{word})|(?<!{word})(?={word}))"
        raise self.refuse(f"the anchor {name}")

    def refuse(self, what: str) -> ValueError:
        return ValueError(f"pattern {_short(self.pattern)} uses {what}, which has no exact JavaScript equivalent")


def _quantifier(low: int, high: int) -> str:
    unbounded = high == sre_parse.MAXREPEAT
    if (low, unbounded) == (0, True):
        return "*"
    if (low, unbounded) == (1, True):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    if unbounded:
        return f"{{{low},}}"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"
