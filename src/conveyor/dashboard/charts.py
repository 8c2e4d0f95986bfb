"""Server-side SVG charts: processed / failed counts over time, with axes and a legend.

``chart_model(points, step)`` turns a series (``{"t" or "minute": epoch, "processed",
"failed"}`` oldest first) into plain numbers and labels; ``_chart.html`` draws them with SVG
attributes only (no inline styles, no script: the CSP holds). Up to ``MAX_BARS`` points are
bars (failed drawn over processed); longer series (a day of minutes) are two polylines.
Time labels are UTC; each carries its epoch (``t``) and format (``fmt``: ``hm`` or ``dhm``) so
dashboard.js rewrites them in the browser's zone when the Local toggle is on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

WIDTH, HEIGHT = 760, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 28
MAX_BARS = 200
X_TICKS = 6


def nice_ceiling(value: float) -> int:
    """The smallest 1/2/5 x 10^k at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * power >= value:
            return int(factor * power)
    return int(10 * power)  # pragma: no cover - the loop always returns


def label_format(span: float) -> str:
    """``hm`` (hours:minutes) for a chart of a day or less, else ``dhm`` (weekday day h:m)."""
    return "hm" if span <= 26 * 3600 else "dhm"


def time_label(t: float, span: float) -> str:
    """A UTC label fit for a chart spanning ``span`` seconds (``label_format``)."""
    fmt = "%H:%M" if label_format(span) == "hm" else "%a %d %H:%M"
    return time.strftime(fmt, time.gmtime(t))


def chart_model(points: Sequence[Mapping[str, Any]], step: float = 60.0) -> dict[str, Any]:
    """Geometry and labels of a processed/failed chart (see the module docstring)."""
    n = max(1, len(points))
    times = [float(p.get("t", p.get("minute", 0.0)) or 0.0) for p in points]
    processed = [int(p.get("processed", 0) or 0) for p in points]
    failed = [int(p.get("failed", 0) or 0) for p in points]
    top = nice_ceiling(max([*processed, *failed, 1]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / n

    def y(value: int) -> float:
        return round(TOP + plot_h - value / top * plot_h, 1)

    span = (times[-1] - times[0] + step) if times else step
    every = max(1, math.ceil(n / X_TICKS))
    fmt = label_format(span)
    x_ticks = [
        {
            "x": round(LEFT + i * slot + slot / 2, 1),
            "label": time_label(times[i], span),
            "t": times[i],
        }
        for i in range(0, len(times), every)
    ]
    y_ticks = [{"y": y(v), "label": str(v)} for v in sorted({0, top // 2, top})]
    model: dict[str, Any] = {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "top": TOP,
        "right": WIDTH - RIGHT,
        "bottom": TOP + plot_h,
        "x_ticks": x_ticks,
        "y_ticks": y_ticks,
        "bars": [],
        "lines": None,
        "processed": sum(processed),
        "failed": sum(failed),
        "step": step,
        "fmt": fmt,
        "first": times[0] if times else None,
        "last": times[-1] if times else None,
    }
    if len(points) <= MAX_BARS:
        width = max(0.5, round(slot * 0.8, 2))
        model["bars"] = [
            {
                "x": round(LEFT + i * slot + slot * 0.1, 2),
                "w": width,
                "y": y(processed[i]),
                "h": round(TOP + plot_h - y(processed[i]), 1),
                "fy": y(failed[i]),
                "fh": round(TOP + plot_h - y(failed[i]), 1),
                "t": times[i],
                "label": time_label(times[i], span),
                "tail": f": {processed[i]} processed, {failed[i]} failed",
            }
            for i in range(len(points))
        ]
    else:
        xs = [round(LEFT + i * slot + slot / 2, 1) for i in range(len(points))]
        model["lines"] = {
            "processed": " ".join(f"{x},{y(v)}" for x, v in zip(xs, processed, strict=True)),
            "failed": " ".join(f"{x},{y(v)}" for x, v in zip(xs, failed, strict=True)),
        }
    return model
