"""Search filters evaluated in Python: shared by the backends that filter outside their store."""

from __future__ import annotations

from ..core.job import Job
from ..core.serialization import dumps, encode_value
from .base import SearchQuery


def matches(job: Job, q: SearchQuery) -> bool:
    """True when ``job`` passes every filter of ``q``."""
    if q.id and not job.id.startswith(q.id):
        return False
    if (q.state and job.state != q.state) or (q.task and job.task != q.task):
        return False
    if q.queue and job.queue != q.queue:
        return False
    if (q.since is not None and job.created_at < q.since) or (
        q.until is not None and job.created_at >= q.until
    ):
        return False
    if q.error and q.error.lower() not in (job.last_error or "").lower():
        return False
    if q.text:
        blob = dumps([encode_value(job.args, "args"), encode_value(job.kwargs, "kwargs")])
        if q.text.lower().encode() not in blob.lower():
            return False
    return True
