"""Flow control for operators (issue 15): the limits in force, changed at run time, and why a
job waits. Used by ``app.limits()`` / ``app.set_limit()``, ``conveyor limits``, ``conveyor
status``, the dashboard's limits page, its API and the Prometheus exporter.

A limiter is named ``rate:<task>`` / ``conc:<task>`` (per key: one bucket or slot per value,
``rate:<task>:<arg>=<value>``); queue limits are ``rate:@<queue>`` / ``conc:@<queue>``. An
override set here replaces the declared limit on every worker at its next claim, without a
restart (it is stored in the broker).
"""

from __future__ import annotations

from typing import Any

from ..core.flow import NOT_PLAIN, is_queue_limiter, limiter_base, parse_rate
from ..core.job import Job
from ..errors import ValidationError
from ..runtime import Runtime


def parse_limit(name: object, value: object, burst: object = None) -> list[float]:
    """The stored spec of ``value`` for limiter ``name``: ``[tokens, per, burst]`` for
    ``rate:...`` (``value`` like ``"10/s"``), ``[n]`` for ``conc:...``."""
    if check_limiter_name(name).startswith("rate:"):
        tokens, per = parse_rate(value, "limit")
        b = max(1.0, tokens) if burst is None else burst  # as RateLimit.bucket() declares it
        if isinstance(b, bool) or not isinstance(b, int | float) or not 1 <= b < float("inf"):
            raise ValidationError("burst", f"must be a number >= 1, got {burst!r}")
        return [tokens, per, float(b)]
    if burst is not None:  # it would be dropped without a word
        raise ValidationError("burst", "applies to rate limits only (rate:<task>)")
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if n < 1:
        raise ValidationError(
            "limit", f"a concurrency limit must be an integer >= 1, got {value!r}"
        )
    return [float(n)]


def set_limit(rt: Runtime, name: str, value: str | int | None, burst: float | None = None) -> None:
    """Override (or with ``value`` None, clear) a limit at run time."""
    spec = None if value is None else parse_limit(name, value, burst)
    check_limiter_name(name)
    rt.broker.flow_set_limit(name, spec)


def check_limiter_name(name: object) -> str:
    """``name`` if it names a limiter (``rate:<task>``, ``conc:<task>``, per key
    ``rate:<task>:<key>=<value>``): at most 300 characters of plain text (no control
    characters, no lone surrogates: it is stored, and shown by ``conveyor limits``)."""
    if (
        not isinstance(name, str)
        or not name.startswith(("rate:", "conc:"))
        or not 5 < len(name) <= 300
        or NOT_PLAIN.search(name)
    ):
        raise ValidationError(
            "name",
            "must name a limiter: rate:<task> or conc:<task>, plain text of at most 300"
            f" characters, got {str(name)[:60]!r}",
        )
    return name


def declared(rt: Runtime) -> dict[str, str]:
    """The limits declared in code (``@app.task(...)`` of this process), by limiter name."""
    out: dict[str, str] = {}
    for task in rt.tasks.values():
        flow = task.flow
        if flow is None:
            continue
        if flow.rate_limit is not None:
            out[f"rate:{task.name}"] = flow.rate_limit.rate + (
                f" per {flow.rate_limit.key}" if isinstance(flow.rate_limit.key, str) else ""
            )
        if flow.concurrency is not None:
            key = flow.concurrency.key
            out[f"conc:{task.name}"] = f"{flow.concurrency.n}" + (
                f" per {key}" if isinstance(key, str) else ""
            )
        if flow.fair_by is not None:
            out[f"fair:{task.name}"] = f"fair by {flow.fair_by}"
    return out


def limits(rt: Runtime) -> dict[str, Any]:
    """Declared limits, run-time overrides, tokens, running per key and waiting per group."""
    status = rt.broker.flow_status(rt.now())
    return {"declared": declared(rt), **status}


def flow_waits(rt: Runtime) -> list[dict[str, Any]]:
    """The groups that wait for a limit (queue, group, waiting, why): ``conveyor status``."""
    if not getattr(rt.broker, "supports_flow", False):
        return []
    return [g for g in rt.broker.flow_status(rt.now())["groups"] if g.get("why")]


def why_waiting(status: dict[str, Any], job: Job) -> str | None:
    """Why a pending flow-controlled job waits ("throttled by rate limit partner:10/s",
    "waiting for account_id=42 (1 running)"), from a ``limits`` / ``flow_status`` result.

    A claim stops at an exhausted queue limit after setting one group aside, so the other
    groups of the queue carry no reason of their own: a job that waits on that queue limit
    too reads the set-aside group's reason."""
    if job.flow is None or str(job.state) != "pending":
        return None
    groups = [g for g in status.get("groups", ()) if g["queue"] == job.queue and g.get("why")]
    for group in groups:
        if group["group"] == job.flow.get("g"):
            return str(group["why"])
    if not _carries_queue_limit(job.flow):
        return None
    marks = (f" @{job.queue}:", f" @{job.queue} (")  # rate:@q -> "@q:10/s", conc:@q -> "@q (n"
    return next((str(g["why"]) for g in groups if any(m in g["why"] for m in marks)), None)


def _carries_queue_limit(flow: dict[str, Any]) -> bool:
    names = [entry[0] for entry in (*(flow.get("r") or ()), *(flow.get("c") or ()))]
    return any(is_queue_limiter(name) for name in names)


__all__ = [
    "declared",
    "flow_waits",
    "limiter_base",
    "limits",
    "parse_limit",
    "set_limit",
    "why_waiting",
]
