"""Invisible characters shown as escapes: one rule for text logs, pages and ``/metrics``.

Job data (an error message, an argument, a task name written by another client) may hold control
characters (a newline forges a log line, ``ESC`` runs a terminal sequence) and invisible format
characters: bidi marks, embeddings, overrides and isolates (U+200E/F, U+202A-202E, U+2066-2069)
reorder the text around them, zero-width characters and the byte-order mark hide inside a word,
line and paragraph separators (U+2028/9) break lines. Each is written as its Python escape
(``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0041``) so what a reader sees is what is stored.

Standard library only and import-light (the lean supervisor process uses it): ``unicodedata``
is loaded only when a text holds a character that is not printable.
"""

from __future__ import annotations

#: Unicode categories shown as escapes: control, format (bidi, zero-width, BOM), surrogate,
#: line and paragraph separator.
INVISIBLE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(ch: str) -> str:
    """``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0041``: the Python escape of one character."""
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_invisible(text: str, keep: str | frozenset[str] = "") -> str:
    """``text`` with every control, format, surrogate and line / paragraph separator character
    escaped but those in ``keep`` (a page keeps newline, tab and the zero-width joiner of emoji
    sequences); any other character, printable or a space, as it is. Returns ``text`` itself
    when nothing needs escaping."""
    if text.isprintable():  # the common case: one C-speed scan, no per-character work
        return text
    import unicodedata  # here: most texts never need it (the supervisor's RSS)

    category = unicodedata.category
    return "".join(
        escape_char(ch) if ch not in keep and category(ch) in INVISIBLE_CATEGORIES else ch
        for ch in text
    )
