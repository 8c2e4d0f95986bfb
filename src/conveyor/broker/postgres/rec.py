"""Decoding a ``jobs`` row of the PostgreSQL backend: the envelope plus the claim overlay.

The claim is ONE statement per batch (``postgres/claim.py``): it writes the row's columns
(state ``active``, lease deadline, fencing token, ``claims``, ``started_at``, ``worker``) and
leaves the stored envelope as it was, so no per-job write follows. The envelope therefore lags
by the claim while ``claims > 0``: ``pg_rec`` applies the overlay (state, attempts,
started_at, worker, lease deadline) to the decoded job, and the next full write of the row
(``PostgresBroker._save``, the set-based completion) stores the whole envelope and resets
``claims`` to 0. Every reader decodes rows through ``pg_rec`` with ``COLS``.

``completed_envelope`` is the completion's fast path: it patches the stored envelope as a dict
(the overlay and the fields ``lifecycle.complete`` sets) instead of building a ``Job`` and
encoding it again; anything unexpected sends the row to the full decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ...core.serialization import ENVELOPE_VERSION, encode_value
from ...core.state import JobState
from ..sqlite_rows import Rec

#: The row layout ``pg_rec`` reads: ``Rec``'s eleven columns, then the claim overlay.
COLS = (
    "rid, id, queue, task, state, priority, run_at, created_at, finished_at, last_error,"
    " payload, claims, started_at, worker, lease_at"
)


def pg_rec(row: Sequence[Any]) -> Rec:
    """Decode one ``COLS`` row; an active row claimed since its envelope was written gets
    the claim's fields (the envelope still says ``pending`` and the attempt before)."""
    claims = row[11]
    if not claims or row[4] != "active":
        return Rec(tuple(row[:11]), True)
    rec = Rec((*row[:4], "pending", *row[5:11]), True)
    job = rec.job
    job.state = JobState.ACTIVE
    job.attempts += claims
    job.started_at = row[12]
    job.worker_id = row[13] or None
    job.lease_expires_at = row[14]
    rec.state = "active"
    return rec


def completed_envelope(row: Sequence[Any], now: float, result: Any) -> tuple[bytes, int] | None:
    """The envelope of the active ``COLS`` row completed at ``now`` with ``result``, and its
    attempt number; None when the stored envelope is not the plain one expected (the caller
    then decodes it fully). Raises what encoding ``result`` raises (``ValidationError``)."""
    try:
        data = orjson.loads(row[10])
    except orjson.JSONDecodeError:
        return None
    claims = row[11]
    if (
        not isinstance(data, dict)
        or data.get("v") != ENVELOPE_VERSION
        or data.get("id") != row[1]
        or data.get("state") != ("pending" if claims else "active")
        or type(attempts := data.get("attempts", 0)) is not int
    ):
        return None
    if claims:
        data["attempts"] = attempts = attempts + claims
        data["started_at"], data["worker_id"] = row[12], row[13] or None
    data["state"], data["result"] = "completed", encode_value(result, "result")
    data["finished_at"], data["lease_expires_at"] = now, None
    return orjson.dumps(data), attempts
