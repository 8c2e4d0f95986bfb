"""Decoding a ``jobs`` row of the PostgreSQL backend: the envelope plus the claim overlay.

The claim is ONE statement per batch (``postgres/claim.py``): it writes the row's columns
(state ``active``, lease deadline, fencing token, ``claims``, ``started_at``, ``worker``) and
leaves the stored envelope as it was, so no per-job write follows. The envelope therefore lags
by the claim while ``claims > 0``: ``pg_rec`` applies the overlay (state, attempts,
started_at, worker, lease deadline) to the decoded job, and the next full write of the row
(``PostgresBroker._save``, the set-based completion) stores the whole envelope and resets
``claims`` to 0. Every reader decodes rows through ``pg_rec`` with ``COLS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
