"""Logging for worker processes: ``text`` for people, ``json`` (one object per line) for machines.

Every job outcome is one line from the ``conveyor.worker`` logger. In JSON the structured fields
(``job_id``, ``task``, ``queue``, ``attempt``, ``worker``, ``duration``, ``outcome`` and, for
failures, ``error_kind``, ``error``, ``message``) are top-level keys next to ``ts``, ``level``,
``logger``, ``pid`` and ``msg``.
"""

from __future__ import annotations

import logging
import sys
import time

from .leanlog import text_safe

TYPE_CHECKING = False  # not typing's: the lean supervisor process imports this module
if TYPE_CHECKING:
    from typing import Any, TextIO

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s"
INDENT = "    "  # continuation lines (tracebacks) start with it; record lines never do


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, one line per record: the message's control characters are escaped and
    traceback lines are indented, so job data can never forge a log line (a line that does not
    start with whitespace is always the start of a real record)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record line, then any traceback or stack, indented (never cached on the record:
        other handlers keep the plain text)."""
        record.message = text_safe(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        if record.exc_info:
            line += "\n" + _indented(self.formatException(record.exc_info))
        elif record.exc_text:
            line += "\n" + _indented(record.exc_text)
        if record.stack_info:
            line += "\n" + _indented(self.formatStack(record.stack_info))
        return line


def _indented(text: str) -> str:
    return "\n".join(INDENT + text_safe(line) for line in text.split("\n"))


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``extra={"job": {...}}`` fields are merged in."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line."""
        import orjson  # here, not at the top: a text-logging supervisor never loads it

        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "job", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str).decode()


def setup_logging(
    fmt: str = "text", level: str | int = "INFO", stream: TextIO | None = None
) -> None:
    """Send ``conveyor.*`` logs to ``stream`` (stderr) in ``fmt``, replacing earlier setups."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    handler._conveyor = True  # type: ignore[attr-defined]
    logger = logging.getLogger("conveyor")
    for old in [h for h in logger.handlers if getattr(h, "_conveyor", False)]:
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level if isinstance(level, int) else level.upper())
    logger.propagate = False
