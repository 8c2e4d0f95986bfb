"""Processed / failed history kept in the broker: per minute for a day, per hour for a week.

The per-minute metric buckets (``metrics:m:<minute>``, ``metrics_read.py``) hold every counter
and histogram of every queue and task, which is too much to read 1,440 of them for a day-long
chart. So each metrics flush also adds two small counters per queue (``<queue>|processed``,
``<queue>|failed``) to two coarser series, kept in the same ``CounterStore``:

* ``history:m:<minute>`` — one bucket per minute, kept ``MINUTE_TTL`` (24 h + 1 h);
* ``history:h:<hour>`` — one bucket per hour, kept ``HOUR_TTL`` (7 d + 1 h).

Retention is bounded by those TTLs: at most 1,500 minute and 170 hour buckets live at a time,
each with two counters per queue. They live in the broker, so the charts survive restarts of
the dashboard and the workers. ``read_history`` returns one of the ranges in ``RANGES``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError

if TYPE_CHECKING:
    from ..broker.side import SideStores

MINUTE_PREFIX, HOUR_PREFIX = "history:m:", "history:h:"
MINUTE_TTL = 25 * 3600.0
HOUR_TTL = 7 * 24 * 3600.0 + 3600.0
KINDS = ("processed", "failed")
#: range name -> (step in seconds, number of points, bucket prefix)
RANGES: dict[str, tuple[int, int, str]] = {
    "1h": (60, 60, MINUTE_PREFIX),
    "24h": (60, 1440, MINUTE_PREFIX),
    "7d": (3600, 168, HOUR_PREFIX),
}


def history_increments(
    buckets: Mapping[str, Mapping[str, float]],
) -> dict[str, dict[str, float]]:
    """From flushed metric buckets (``metrics:m:<minute>`` -> ``queue|task|name``), the
    increments of the history buckets (minute and hour) as ``{bucket: {queue|kind: n}}``."""
    out: dict[str, dict[str, float]] = {}
    for bucket, values in buckets.items():
        if not bucket.startswith("metrics:m:"):
            continue
        minute = int(bucket.rsplit(":", 1)[1])
        targets = (f"{MINUTE_PREFIX}{minute}", f"{HOUR_PREFIX}{minute // 60}")
        for key, amount in values.items():
            queue, _, name = key.partition("|")
            name = name.rpartition("|")[2]
            if name not in KINDS or not amount:
                continue
            for target in targets:
                slot = out.setdefault(target, {})
                slot[f"{queue}|{name}"] = slot.get(f"{queue}|{name}", 0.0) + amount
    return out


def write_history(side: SideStores, buckets: Mapping[str, Mapping[str, float]], now: float) -> None:
    """Add the history increments of flushed metric buckets (called by the metrics flush)."""
    for bucket, values in sorted(history_increments(buckets).items()):
        ttl = MINUTE_TTL if bucket.startswith(MINUTE_PREFIX) else HOUR_TTL
        side.counters.add(bucket, values, now, ttl)


def read_history(
    side: SideStores,
    now: float,
    range_name: str = "1h",
    queue: str | None = None,
    members: Collection[str] = (),
) -> dict[str, Any]:
    """One range of history, oldest point first: ``{"range", "step", "points": [{"t",
    "processed", "failed"}], "processed", "failed"}`` (``queue``: that queue only, counted
    over ``members`` when given: a sharded queue's shards and its own name)."""
    wanted = None if queue is None else set(members or (queue,))
    if range_name not in RANGES:
        raise ValidationError("range", f"must be one of {', '.join(RANGES)}")
    step, count, prefix = RANGES[range_name]
    current = int(now // step)
    slots = list(range(current - count + 1, current + 1))
    raw = side.counters.get([f"{prefix}{s}" for s in slots], now)
    points = []
    for s in slots:
        values = raw.get(f"{prefix}{s}", {})
        point: dict[str, Any] = {"t": float(s * step)}
        for kind in KINDS:
            point[kind] = int(
                sum(
                    v
                    for k, v in values.items()
                    if k.rpartition("|")[2] == kind
                    and (wanted is None or k.rpartition("|")[0] in wanted)
                )
            )
        points.append(point)
    return {
        "range": range_name,
        "step": step,
        "queue": queue,
        "points": points,
        "processed": sum(p["processed"] for p in points),
        "failed": sum(p["failed"] for p in points),
    }
