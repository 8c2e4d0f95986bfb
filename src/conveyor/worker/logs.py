"""Logging for Conveyor processes: ``text`` for people, ``json`` (one object per line) for machines.

One configuration (``configure_logging``, also ``conveyor.configure_logging``) formats Conveyor's
loggers AND the user's: its handler sits on the root logger, so a handler's own
``logging.getLogger(__name__).info(...)`` comes out in the same format as the worker's lines.
``conveyor worker``, ``conveyor scheduler`` and ``conveyor dashboard`` call it for
``--log-format``/``--log-level``; a program that runs ``app.worker()`` itself calls it once.

The handler carries ``JobContextFilter``: a record emitted while a job's handler runs (on any
executor: the job's thread, its asyncio task, the process pool's child) gets ``job_id``,
``task``, ``queue`` and ``attempt`` attributes, read from a context variable the executors set
around the handler (``job_context``). Every job outcome is one line from the ``conveyor.worker``
logger; in JSON its structured fields are top-level keys next to ``ts``, ``level``, ``logger``,
``pid`` and ``msg``, and a failure's traceback is the ``exc`` key (indented continuation lines in
text). Job data is hostile: text lines escape control characters, JSON escapes everything, and
every string is capped at ``MAX_FIELD_CHARS`` so no record can split into several lines.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time

from .leanlog import text_safe

TYPE_CHECKING = False  # not typing's: the lean worker child imports this module
if TYPE_CHECKING:
    from typing import Any, Protocol, TextIO

    class JobRef(Protocol):
        """What the job-context filter reads of a job (a ``Job``, or the child's ``ChildJob``)."""

        @property
        def id(self) -> str:
            """The job id."""

        @property
        def task(self) -> str:
            """The task name."""

        @property
        def queue(self) -> str:
            """The queue."""

        @property
        def attempts(self) -> int:
            """The attempt number (1 on the first run)."""


FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(name)s: %(message)s"
INDENT = "    "  # continuation lines (tracebacks) start with it; record lines never do
#: The longest string a record writes per field (message, traceback): 40 KB of job data in one
#: message would be split by log shippers (Docker cuts lines at 16 KB), so it is cut here.
MAX_FIELD_CHARS = 8192

#: The job whose handler runs in this context (thread, asyncio task, pool child), or None.
job_context: contextvars.ContextVar[JobRef | None] = contextvars.ContextVar(
    "conveyor_job", default=None
)
#: ``(format, level)`` of the active ``configure_logging``, for the process pool's children.
_ACTIVE: list[tuple[str, str | int]] = []
#: Characters JSON allows raw that ``str.splitlines`` and some log readers treat as line ends.
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
_STANDARD = frozenset(
    {*logging.LogRecord("", 0, "", 0, "", None, None).__dict__, "message", "asctime", "taskName"}
)


def running_job_ref() -> JobRef | None:
    """The job whose handler is running here (id, task, queue, attempts), else None.

    Handlers use the public ``conveyor.current_job()`` (worker/jobctx.py), built on this."""
    return job_context.get()


def clip(text: str, limit: int = MAX_FIELD_CHARS, tail: bool = False) -> str:
    """``text`` cut to ``limit`` characters with a note of how much was dropped (``tail``: keep
    the end, as for a traceback)."""
    if len(text) <= limit:
        return text
    dropped = f"[... {len(text) - limit} chars cut]"
    return dropped + text[-limit:] if tail else text[:limit] + dropped


class JobContextFilter(logging.Filter):
    """Adds ``job_id``, ``task``, ``queue`` and ``attempt`` to records emitted inside a job's
    handler (never drops a record). Add it to your own handlers to get the same fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record`` when a job runs in this context."""
        job = job_context.get()
        if job is not None and not hasattr(record, "job_id"):
            record.job_id = job.id
            record.task = job.task
            record.queue = job.queue
            record.attempt = job.attempts
        return True


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, one line per record: the message's control characters are escaped and
    traceback lines are indented, so job data can never forge a log line (a line that does not
    start with whitespace is always the start of a real record). A record from inside a job
    ends with `` [job=ID task=NAME attempt=N]``."""

    def format(self, record: logging.LogRecord) -> str:
        """The record line, then any traceback or stack, indented (never cached on the record:
        other handlers keep the plain text)."""
        record.message = text_safe(clip(_message(record)))
        job_id = getattr(record, "job_id", None)
        if job_id is not None and not hasattr(record, "job"):  # outcome lines name the job
            record.message += text_safe(
                f" [job={job_id} task={getattr(record, 'task', '')} "
                f"attempt={getattr(record, 'attempt', '')}]"
            )
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        trace = _traceback(self, record)
        if trace:
            line += "\n" + _indented(trace)
        if record.stack_info:
            line += "\n" + _indented(self.formatStack(record.stack_info))
        return line


def _message(record: logging.LogRecord) -> str:
    """``record.getMessage()``, or a note when the user's ``msg % args`` fails."""
    try:
        return record.getMessage()
    except Exception as exc:  # a bad format string must not lose the record or raise
        return f"{record.msg!r} % {record.args!r} (unformattable: {type(exc).__name__})"


def _traceback(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback: its ``exc_info``, ``exc_text``, or a job failure's text
    (``traceback_text``, set by the outcome line of a failed job), cut to its last lines."""
    if record.exc_info:
        text = formatter.formatException(record.exc_info)
    else:
        text = record.exc_text or getattr(record, "traceback_text", None) or ""
    return clip(str(text), tail=True)


def _indented(text: str) -> str:
    return "\n".join(INDENT + text_safe(line) for line in text.split("\n"))


class JsonFormatter(logging.Formatter):
    """One JSON object per record. ``extra={"job": {...}}`` fields are merged in as top-level
    keys, as are other ``extra`` fields and the job context (``job_id``, ``task``, ``queue``,
    ``attempt``); a traceback is ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line."""
        import orjson  # here, not at the top: a text-logging supervisor never loads it

        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": clip(_message(record)),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in ("job", "traceback_text"):
                data.setdefault(key, _field(value))
        fields = getattr(record, "job", None)
        if isinstance(fields, dict):
            data.update(fields)
        trace = _traceback(self, record)
        if trace:
            data["exc"] = trace
        try:
            line = orjson.dumps(data, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):  # lone surrogates, huge ints, deep nesting
            line = orjson.dumps(_scrubbed(data)).decode()
        return line.translate(_LINE_BREAKS)  # valid raw in JSON, but line breaks to many readers


def _field(value: object) -> object:
    """An ``extra`` value as JSON can take it (long strings cut)."""
    if isinstance(value, str):
        return clip(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return clip(str(value))


def _scrubbed(data: dict[str, Any]) -> dict[str, Any]:
    """Every value as valid UTF-8 text (lone surrogates written as ``\\udcff``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        text = value if isinstance(value, str) else repr(value)
        out[str(key).encode("utf-8", "backslashreplace").decode()] = clip(
            text.encode("utf-8", "backslashreplace").decode()
        )
    return out


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes to ``sys.stderr`` as it is when each record is emitted
    (like ``logging.lastResort``), so a swapped stderr (tests, daemonising) is followed."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream)
        self._fixed = stream

    @property
    def stream(self) -> Any:
        """The given stream, else the current ``sys.stderr``."""
        return self._fixed if self._fixed is not None else sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # StreamHandler.__init__ assigns it; ``_fixed`` holds the choice


def configure_logging(
    fmt: str = "text", level: str | int = "INFO", stream: TextIO | None = None
) -> logging.Handler:
    """Format every logger (Conveyor's and yours) in ``fmt`` on ``stream`` (stderr), at ``level``.

    Installs one handler on the root logger with ``JobContextFilter``, replacing the one an
    earlier call installed (other handlers are left alone: remove your own ``basicConfig``
    handler first, or you get each record twice). Sets the root logger's and ``conveyor``'s
    level. Returns the handler.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    handler.addFilter(JobContextFilter())
    handler._conveyor = True  # type: ignore[attr-defined]
    reset_logging()
    lvl = level if isinstance(level, int) else level.upper()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(lvl)
    logging.getLogger("conveyor").setLevel(lvl)
    _ACTIVE.append((fmt, lvl))
    return handler


def reset_logging() -> None:
    """Remove the handler ``configure_logging`` installed (and one from older versions on the
    ``conveyor`` logger); Conveyor's records propagate to the root logger again."""
    _ACTIVE.clear()
    for name in ("", "conveyor"):
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if getattr(h, "_conveyor", False)]:
            logger.removeHandler(old)
    logging.getLogger("conveyor").propagate = True


def active_config() -> tuple[str, str | int] | None:
    """``(format, level)`` of the active ``configure_logging``, or None (never configured)."""
    return _ACTIVE[-1] if _ACTIVE else None


def setup_logging(
    fmt: str = "text", level: str | int = "INFO", stream: TextIO | None = None
) -> None:
    """``configure_logging`` under its older name (kept for callers of ``conveyor.worker.logs``)."""
    configure_logging(fmt, level, stream)
