"""Job ids typed by people: a full id, or a unique prefix of one (like git's short hashes).

``resolve_job_id(runtime, text)`` returns the full id: the job stored under exactly ``text``
if there is one, else the only job whose id starts with ``text`` (the broker's id-prefix
search, on every backend). An ambiguous prefix is refused naming the candidates; no match is
``JobNotFound``. The CLI uses it wherever it accepts an id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import JobNotFound, ValidationError
from . import admin

if TYPE_CHECKING:
    from ..runtime import HasRuntime, Runtime

#: Candidates named in the error of an ambiguous prefix.
SHOWN_CANDIDATES = 10


class AmbiguousJobId(ValidationError):
    """A prefix that more than one stored job id starts with."""

    def __init__(self, prefix: str, candidates: list[str], total: int) -> None:
        self.prefix = prefix
        self.candidates = candidates
        self.total = total
        more = f" and {total - len(candidates)} more" if total > len(candidates) else ""
        super().__init__(
            "id",
            f"{prefix!r} matches {total} jobs: {', '.join(candidates)}{more}; type more of the id",
        )


def resolve_job_id(app: Runtime | HasRuntime, text: str) -> str:
    """The full id of the job ``text`` names (an id or a unique id prefix); see the module."""
    from ..runtime import as_runtime

    runtime = as_runtime(app)
    if not isinstance(text, str) or not text or len(text) > 200:
        raise ValidationError("id", "must be a job id or id prefix (1-200 characters)")
    if runtime.broker.get(text) is not None:
        return text
    page = admin.search(runtime, id=text, page=1, page_size=SHOWN_CANDIDATES)
    if page.total == 0:
        raise JobNotFound(text)
    if page.total == 1:
        return page.items[0].id
    raise AmbiguousJobId(text, [job.id for job in page.items], page.total)


def resolve_job_ids(app: Runtime | HasRuntime, texts: list[str] | tuple[str, ...]) -> list[str]:
    """``resolve_job_id`` of each, in order, duplicates dropped."""
    return list(dict.fromkeys(resolve_job_id(app, t) for t in texts))
