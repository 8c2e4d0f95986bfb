"""The supervisor process's logger: the lines of ``conveyor.worker.logs`` without ``logging``.

When the supervisor runs as its own process (``python -m conveyor.worker.supervisor``) it logs a
few lines per worker process start or exit. The standard ``logging`` package with ``re`` and
``json`` would cost that process ~1.7 MB of its ~11.5 MB, so it writes the same two formats
itself: ``text`` (``TEXT_FORMAT`` of ``conveyor.worker.logs``) and ``json`` (one compact object
per line with ``ts``, ``level``, ``logger``, ``pid``, ``msg``). Standard library only.
"""

from __future__ import annotations

import os
import sys
import time

from ..core.escapes import escape_invisible

TYPE_CHECKING = False  # not typing's: this module must stay import-light
if TYPE_CHECKING:
    from typing import TextIO

LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}
_NAMES = {number: name for name, number in LEVELS.items()}
# JSON string escapes: quote, backslash and control characters (everything else is valid UTF-8),
# and the Unicode line breaks: valid raw in JSON, but line breaks to many readers (as the
# logging JsonFormatter writes them).
_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", **{i: f"\\u{i:04x}" for i in range(32)}}
_ESCAPES.update({0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def json_string(text: str) -> str:
    """``text`` as a JSON string literal (lone surrogates, from a non-UTF-8 argv or file name,
    as ``\\udcff`` escapes: written raw, the line could not be encoded and was lost)."""
    out = text.translate(_ESCAPES)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = "".join(f"\\u{ord(ch):04x}" if "\ud800" <= ch <= "\udfff" else ch for ch in out)
    return '"' + out + '"'


def text_safe(text: str) -> str:
    """``text`` on one line, as written: every control character but tab and every invisible
    format character escaped (``\\n``, ``\\x1b``, ``\\u202e``), so job data (an exception
    message, an argument) can never start a forged log line nor reorder or hide the text
    around it (``conveyor.core.escapes``, the pages' rule)."""
    return escape_invisible(text, "\t")


class LeanLogger:
    """``info`` / ``warning`` / ``error`` / ``log(level, ...)`` like a ``logging.Logger``."""

    def __init__(
        self, name: str, fmt: str = "text", level: str = "INFO", stream: TextIO | None = None
    ) -> None:
        if fmt not in ("text", "json"):
            raise ValueError("log format must be one of text, json")
        self.name = name
        self.json = fmt == "json"
        self.level = LEVELS[level.upper()]
        self.stream = stream

    def log(self, level: int, msg: str, *args: object) -> None:
        """Write one line if ``level`` passes the threshold (``msg % args``, as logging does)."""
        if level < self.level:
            return
        text = msg % args if args else msg
        now = time.time()
        millis = int((now - int(now)) * 1000)
        name = _NAMES.get(level, f"Level {level}")
        if self.json:
            ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{millis:03d}Z"
            line = (
                f'{{"ts":"{ts}","level":"{name.lower()}","logger":{json_string(self.name)},'
                f'"pid":{os.getpid()},"msg":{json_string(text)}}}'
            )
        else:
            asctime = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{millis:03d}"
            line = f"{asctime} {name:<7} [{os.getpid()}] {self.name}: {text_safe(text)}"
        stream = self.stream or sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not stop supervision
            pass

    def debug(self, msg: str, *args: object) -> None:
        """Log at DEBUG."""
        self.log(10, msg, *args)

    def info(self, msg: str, *args: object) -> None:
        """Log at INFO."""
        self.log(20, msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        """Log at WARNING."""
        self.log(30, msg, *args)

    def error(self, msg: str, *args: object) -> None:
        """Log at ERROR."""
        self.log(40, msg, *args)
