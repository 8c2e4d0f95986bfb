"""Terminal output of job data: always literal, never truncating ids, readable when narrow.

Job data (arguments, errors, ids, task and queue names, worker and schedule records) comes from
users and other services, so every value reaches rich as a ``Text`` (never parsed as markup),
the console has emoji codes off (``:two:`` stays ``:two:``), control and bidirectional
characters are shown as escapes (``\\x1b``, ``\\u202e``: no terminal escape sequence runs and no
line is visually reordered), and long values are cut with a note saying how much was left out.

Tables fit the terminal: low-value columns are dropped first (a note names them), headers wrap
instead of being cut to ``que…``, and id columns are never shortened. When even the kept
columns cannot fit, rows print as ``field value`` records, one block per row.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

#: Characters shown as escapes on top of every control (Cc) and format (Cf) character:
#: line and paragraph separators (they break lines like ``\n``).
_EXTRA_ESCAPED = {"\u2028", "\u2029"}
#: Longest value shown in a table cell (a detail view allows more); ids are exempt.
CELL_LIMIT = 200
DETAIL_LIMIT = 2000


def _escape_char(ch: str) -> str:
    """``\\n``, ``\\x1b``, ``\\u202e``: the Python escape of one invisible character."""
    code = ord(ch)
    if ch in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _invisible(ch: str) -> bool:
    return ch in _EXTRA_ESCAPED or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn")


def literal(value: Any, limit: int | None = CELL_LIMIT, *, keep_newlines: bool = False) -> str:
    """``value`` as one safe line: invisible characters escaped, cut after ``limit`` chars.

    ``keep_newlines`` keeps ``\\n`` (tracebacks); every other control character is escaped.
    """
    text = "" if value is None else value if isinstance(value, str) else str(value)
    total = len(text)
    if limit is not None and total > limit:
        text = text[:limit]
    if any(not ch.isprintable() for ch in text):  # fast path: plain text needs no scan
        text = "".join(
            ch
            if (keep_newlines and ch == "\n") or (not _invisible(ch) and ch != "\t")
            else _escape_char(ch)
            for ch in text
        )
    if limit is not None and total > limit:
        text += f"… (+{total - limit} chars)"
    return text


def text(value: Any, limit: int | None = CELL_LIMIT, style: str = "") -> Text:
    """``literal(value)`` as a rich ``Text`` (never parsed as markup or emoji)."""
    from rich.text import Text

    return Text(literal(value, limit), style=style)


@dataclass(frozen=True)
class Col:
    """A table column: ``drop`` orders what goes first on a narrow terminal (0: never); an
    id column is never wrapped or shortened (job ids are at most 200 characters; ``limit``
    only stops a forged 40 KB worker id from flooding the terminal)."""

    name: str
    drop: int = 0
    is_id: bool = False
    limit: int | None = CELL_LIMIT


def as_col(column: str | Col) -> Col:
    """A plain header is a kept, non-id column; an ``id`` header is an id column."""
    if isinstance(column, Col):
        return column
    return Col(column, is_id=column == "id")


def _min_width(col: Col, cells: Sequence[str]) -> int:
    """Narrowest readable width: the longest header word, a short value whole, and a whole
    id for id columns (long values wrap)."""
    words = max((len(w) for w in col.name.split()), default=1)
    if col.is_id:
        return max([words, *(len(c) for c in cells)])
    longest = max((len(c) for c in cells), default=0)
    return max(words, min(longest, 12))


def _natural_width(col: Col, cells: Sequence[str]) -> int:
    """The width that shows the header and every value on one line (long values capped)."""
    longest = max([len(col.name), *(len(c) for c in cells)])
    return longest if col.is_id else min(longest, 60)


def _spread(mins: list[int], naturals: list[int], room: int) -> list[int]:
    """Widths from ``mins`` grown one column at a time towards ``naturals`` within ``room``."""
    widths = list(mins)
    spare = room - sum(widths)
    while spare > 0:
        grew = False
        for i, natural in enumerate(naturals):
            if spare > 0 and widths[i] < natural:
                widths[i] += 1
                spare -= 1
                grew = True
        if not grew:
            break
    return widths


def fit_columns(widths: Sequence[int], drops: Sequence[int], total: int) -> list[int]:
    """Indexes of the columns kept so that ``widths`` plus borders fit ``total`` columns:
    the highest ``drop`` goes first (the rightmost among equals); ``drop == 0`` stays."""
    kept = list(range(len(widths)))

    def needed() -> int:
        return sum(widths[i] for i in kept) + 3 * len(kept) + 1

    order = sorted((i for i in kept if drops[i] > 0), key=lambda i: (-drops[i], -i))
    for index in order:
        if needed() <= total:
            break
        kept.remove(index)
    return kept


def print_table(
    console: Console, title: str, columns: Sequence[str | Col], rows: Sequence[Sequence[Any]]
) -> None:
    """Print ``rows`` under ``columns`` fitted to the console's width (see the module doc)."""
    from rich.table import Table
    from rich.text import Text

    cols = [as_col(c) for c in columns]
    cells = [[literal(v, c.limit) for c, v in zip(cols, row, strict=False)] for row in rows]
    mins = [_min_width(c, [r[i] for r in cells]) for i, c in enumerate(cols)]
    kept = fit_columns(mins, [c.drop for c in cols], console.width)
    room = console.width - (3 * len(kept) + 1)
    if sum(mins[i] for i in kept) > room:
        print_records(console, title, [c.name for c in cols], cells)
        return
    naturals = [_natural_width(cols[i], [r[i] for r in cells]) for i in kept]
    widths = _spread([mins[i] for i in kept], naturals, room)
    table = Table(title=Text(literal(title, None)), title_justify="left")
    for i, width in zip(kept, widths, strict=True):
        table.add_column(Text(cols[i].name), width=width, no_wrap=cols[i].is_id, overflow="fold")
    for row in cells:
        table.add_row(*(Text(row[i]) for i in kept))
    console.print(table)
    hidden = [cols[i].name for i in range(len(cols)) if i not in kept]
    if hidden:
        console.print(
            Text(
                f"(not shown at {console.width} columns: {', '.join(hidden)}; "
                "widen the terminal or use --json)",
                style="dim",
            )
        )


def print_records(
    console: Console, title: str, names: Sequence[str], rows: Sequence[Sequence[str]]
) -> None:
    """Rows as ``name  value`` blocks, for terminals too narrow for any table."""
    from rich.text import Text

    console.print(Text(literal(title, None), style="bold"))
    pad = max((len(n) for n in names), default=0)
    for row in rows:
        for name, value in zip(names, row, strict=False):
            if value:
                console.print(Text(f"{name.ljust(pad)}  {value}"), overflow="fold")
        console.print()
