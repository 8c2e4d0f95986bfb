"""Worker records (heartbeat documents) as the monitoring readers expect them.

A record is written by a worker of any version, by another client of the store or by hand, so
a reader must not trust its field types: one record with ``queues: 5`` or ``weights: "x"``
used to take down the overview, workers and queues pages, the API, ``/metrics`` and
``conveyor status``. ``clean_worker`` keeps every field but makes the containers the readers
iterate (queues, running ids, jobs, weights) the shapes Conveyor writes, dropping what is not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def clean_worker(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with ``queues``, ``running``, ``running_jobs``, ``jobs`` and ``weights`` of the
    types workers write (wrong ones read as empty, wrong items dropped)."""
    out = dict(doc)
    queues = out.get("queues")
    if queues is not None and not isinstance(queues, str):  # "a,b" stays: it is split later
        out["queues"] = (
            [q for q in queues if isinstance(q, str)] if isinstance(queues, list) else []
        )
    for key in ("running", "running_jobs"):
        if key in out and not isinstance(out[key], list):
            out[key] = []
    if "jobs" in out:
        jobs = out["jobs"]
        out["jobs"] = (
            [j for j in jobs if isinstance(j, dict) and "id" in j] if isinstance(jobs, list) else []
        )
    if "weights" in out:
        weights = out["weights"]
        out["weights"] = (
            {str(k): v for k, v in weights.items() if _number(v)}
            if isinstance(weights, dict)
            else {}
        )
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
