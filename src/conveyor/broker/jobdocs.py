"""Documents kept beside a job in the side stores (issue 16): its progress, a cancel request.

Both live in ``broker.docs`` (every backend has it), named by the job id:

* ``job_progress``: the last ``current_job().progress()`` report of a running job, written by
  its worker at most every ``worker.jobctx.PROGRESS_INTERVAL`` s; read by ``job.progress``, the
  dashboard's job page and the /workers page. Kept ``PROGRESS_TTL`` s.
* ``job_cancel``: an operator asked to cancel the job while it runs (``app.cancel``); the
  worker holding the lease stops the job and deletes it (``worker/cancel.py``).

Here (not in ``worker/``) because handles and the monitoring layer read them too.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .side import SideStores

PROGRESS_COLLECTION = "job_progress"
PROGRESS_TTL = 7 * 24 * 3600.0  # a job's last progress is kept this long
CANCEL_COLLECTION = "job_cancel"
CANCEL_TTL = 24 * 3600.0  # a request whose job ended without seeing it is dropped by then


def read_progress(side: SideStores, job_id: str, now: float) -> dict[str, Any] | None:
    """The last stored progress of ``job_id`` (``fraction``, ``message``, ``attempt``, ``at``);
    None when there is none, or when the stored one is not what ``progress()`` writes (a
    fraction outside [0, 1], NaN, not a number: another client, a hand edit), so no reader
    (job page, ``conveyor job``, workers page) computes a percentage of garbage."""
    doc = side.docs.get(PROGRESS_COLLECTION, job_id, now)
    if not isinstance(doc, dict):
        return None
    fraction, message = doc.get("fraction"), doc.get("message")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return None
    if not 0.0 <= fraction <= 1.0:  # NaN fails this too
        return None
    return {**doc, "message": message if isinstance(message, str) else ""}


def write_progress(side: SideStores, job_id: str, value: dict[str, Any], now: float) -> None:
    """Store ``value`` as the job's progress."""
    side.docs.put(PROGRESS_COLLECTION, job_id, value, now, ttl=PROGRESS_TTL)


def request_cancel(side: SideStores, job_id: str, now: float, by: str = "") -> None:
    """Ask whichever worker holds ``job_id``'s lease to stop it."""
    side.docs.put(CANCEL_COLLECTION, job_id, {"at": now, "by": by}, now, ttl=CANCEL_TTL)


def cancel_requested(side: SideStores, job_ids: Collection[str], now: float) -> set[str]:
    """The ids among ``job_ids`` that an operator asked to cancel (one ``docs.list`` call)."""
    if not job_ids:
        return set()
    return {job_id for job_id in side.docs.list(CANCEL_COLLECTION, now) if job_id in job_ids}


def forget_cancel(side: SideStores, job_id: str) -> None:
    """Drop the request for ``job_id`` (it was honoured, or the job is requeued)."""
    side.docs.delete(CANCEL_COLLECTION, job_id)


def progress_text(doc: dict[str, Any] | None) -> str | None:
    """``"40% resized 2 of 5"`` for a stored progress document (None: no progress)."""
    if not doc:
        return None
    fraction = doc.get("fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return None
    message = doc.get("message")
    text = f"{round(float(fraction) * 100)}%"
    return f"{text} {message}" if isinstance(message, str) and message else text
