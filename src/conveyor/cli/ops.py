"""What the inspection and action commands share: error mapping, time formats, the audited
operator, the search filter options and id resolution (full ids or unique prefixes)."""

from __future__ import annotations

import functools
import getpass
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import BrokerUnavailable, ConveyorError, JobNotFound, ValidationError
from ..monitoring.filters import MAX_PAGE
from .common import unreachable
from .render import literal

if TYPE_CHECKING:
    from ..app import Conveyor
    from ..monitoring.actions import Operator

F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(fn: F) -> F:
    """Turn Conveyor errors into click errors: a clear message and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValidationError as exc:
            raise click.BadParameter(literal(exc.rule, None), param_hint=f"'{exc.field}'") from exc
        except JobNotFound as exc:
            raise click.ClickException(
                f"job '{literal(exc.job_id)}' not found (no job id is or starts with it)"
            ) from exc
        except LookupError as exc:
            raise click.ClickException(literal(str(exc).strip("'\""), None)) from exc
        except BrokerUnavailable as exc:
            raise unreachable(exc) from exc
        except ConveyorError as exc:
            raise click.ClickException(literal(str(exc), None)) from exc

    return wrapper  # type: ignore[return-value]


def when(ts: Any) -> str:
    """Epoch seconds as ISO 8601 UTC (empty for None)."""
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return ""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):  # a stored time past year 9999: show, not crash
        return f"{ts!r} (out of range)"


def age(seconds: Any) -> str:
    """A duration as ``12s`` / ``5m`` / ``3h`` (empty for None)."""
    if not isinstance(seconds, int | float):
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def cli_operator(app: Conveyor) -> Operator:
    """Audited actions recorded as ``cli:<os user>``."""
    from ..monitoring.actions import Operator

    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    return Operator(app, actor=f"cli:{user}", source="cli")


def resolve_ids(app: Conveyor, ids: Sequence[str]) -> list[str]:
    """Full ids of ``ids`` (each an id or a unique prefix; ambiguous prefixes refused)."""
    from ..monitoring.lookup import resolve_job_ids

    return resolve_job_ids(app, tuple(ids))


def filter_options(fn: F) -> F:
    """The search filters shared by ``jobs`` and ``dlq list``."""
    options = [
        click.option("--id", "job_id", default=None, help="Job id or id prefix."),
        click.option("--task", default=None, help="Task name."),
        click.option("--queue", default=None, help="Queue name."),
        click.option(
            "--since", default=None, help="Created at/after: ISO time, epoch or age (2h)."
        ),
        click.option("--until", default=None, help="Created before: ISO time, epoch or age."),
        click.option("--error", default=None, help="Text in the last error (e.g. ValueError)."),
        click.option("--text", default=None, help="Text in the arguments."),
        click.option("--page", type=click.IntRange(1, MAX_PAGE), default=1, show_default=True),
        click.option("--page-size", type=click.IntRange(1, 500), default=50, show_default=True),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


_FILTER_NAMES = {
    "job_id": "id",
    "task": "task",
    "queue": "queue",
    "since": "since",
    "until": "until",
    "error": "error",
    "text": "text",
    "state": "state",
}


def search_filters(**kw: Any) -> dict[str, Any]:
    """The Inspector filters among the command's keyword arguments (empty ones dropped)."""
    return {
        _FILTER_NAMES[k]: v for k, v in kw.items() if k in _FILTER_NAMES and v not in (None, "")
    }
