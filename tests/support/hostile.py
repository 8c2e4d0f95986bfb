"""Hostile data shared by every test that checks Conveyor survives what users and attackers send.

Job data (arguments, errors, names, ids) is hostile: it must never stop a queue, break a CLI table,
a page or a log line. Tests import these values instead of inventing their own, so every backend
and every page sees the same set.
"""

from __future__ import annotations

from typing import Any


def deep_list(depth: int) -> Any:
    """A list nested ``depth`` levels deep (orjson refuses > 255, json's recursion limit ~1000)."""
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def deep_json_text(depth: int) -> str:
    """Valid JSON text nesting ``depth`` levels deep, built without recursion."""
    return "[" * depth + "]" * depth


#: Values that are valid Python but cannot be stored as Conveyor's JSON (orjson) payloads.
UNENCODABLE: dict[str, Any] = {
    "lone_surrogate": "name-\udcff.txt",  # os.listdir on a non-UTF-8 file name
    "deep_nesting": deep_list(600),
    "int_over_64_bits": 2**64,
    "nan": float("nan"),
    "infinity": float("inf"),
    "object": object(),
}

#: Strings that must be shown as text, never interpreted (markup, control characters, paths).
HOSTILE_TEXT: dict[str, str] = {
    "markup": '<script>alert("x")</script><img src=x onerror=alert(1)>',
    "newline": "first line\nforged: log line",
    "carriage_return": "ok\r\x1b[2J\x1b[31mred",
    "rich_markup": "[bold red]not a style[/]",
    "path_traversal": "zz/../../jobs/victim-1",
    "long": "x" * 5000,
    "unicode": "名前 🚀 \u202eevil",
}

#: Names (queue, task) that must be refused: a trailing newline used to slip past `$` regexes.
BAD_NAMES: dict[str, str] = {
    "trailing_newline": "default\n",
    "embedded_newline": "de\nfault",
    "slash": "a/b",
    "empty": "",
}

#: Host headers a DNS-rebinding page would send to a dashboard bound on loopback.
FOREIGN_HOSTS: tuple[str, ...] = ("rebind.attacker.example", "evil.example:80", "10.0.0.1")

#: A request body larger than any endpoint should read (64 MiB).
HUGE_BODY_BYTES = 64 * 1024 * 1024


def store_unvalidated(app: Any, job_id: str, task: str, *args: Any, **options: Any) -> str:
    """Store a job whose id enqueue refuses today (``/``, newlines), as an older version or a
    client in another language could have written it, straight through the broker; returns the id.

    ``args`` are the job's positional arguments; ``options`` may hold ``kwargs`` and any
    enqueue option (queue, metadata, idempotency_key...).
    """
    import dataclasses

    from conveyor.task import JobSpec

    kwargs = options.pop("kwargs", {})
    now = app.now()
    job = app.build_job(JobSpec(task, tuple(args), kwargs, options), now)
    app.broker.enqueue([dataclasses.replace(job, id=job_id)], now)
    return job_id


#: Text a terminal would interpret (issue 20): rich markup, emoji codes, escape sequences,
#: bidirectional overrides, NUL/BEL and a 40 KB value. The CLI must print each literally.
TERMINAL_TEXT: dict[str, str] = {
    "close_tag": "a[/]b",
    "style_tag": "[red]not red[/red] [link=http://x]link[/link]",
    "emoji_code": ":two: :thumbs_up:",
    "ansi": "\x1b[2J\x1b[31mred\x1b]0;title\x07",
    "carriage_return": "shown\rhidden",
    "rtl": "abc\u202edcba\u200f\u2066x\u2069",
    "nul_bell": "a\x00b\x07c",
    "line_separator": "one\u2028two",
    "huge": "z" * 40_000,
}

#: What must never reach a terminal raw once TERMINAL_TEXT went through the CLI.
TERMINAL_RAW = ("\x1b", "\r", "\x00", "\x07", "\u202e", "\u200f", "\u2066", "\u2028", "\u20e3")

#: Invisible format characters (bidi marks, embeddings, overrides and isolates, line and paragraph
#: separators, zero-width characters, the byte-order mark, soft hyphen): text logs, pages and the
#: CLI show each as an escape, so no job data reorders or hides the text around it.
INVISIBLE_FORMAT: dict[str, str] = {
    "lrm_rlm": "a\u200eb\u200fc",
    "embeddings": "\u202aL\u202bR\u202cpop",
    "overrides": "user\u202egnp.exe\u202d",
    "isolates": "\u2066x\u2067y\u2068z\u2069",
    "separators": "one\u2028two\u2029three",
    "bom": "\ufeffstart",
    "zero_width": "ad\u200bmin\u200c\u2060",
    "soft_hyphen": "pay\u00adpal",
    "arabic_mark": "x\u061cy",
    "tag_chars": "flag\U000e0041\U000e007f",
}
