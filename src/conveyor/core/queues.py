"""Which queue a worker reads first: strict order, or smooth weighted round-robin (no starvation).

``parse_queues("high:5,default:2,low")`` → ``[("high", 5), ("default", 2), ("low", 1)]``.
Each ``order()`` call returns every queue once: the SWRR pick first, the rest in declared
order, so an empty favourite never blocks the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ValidationError
from .job import validate_queue_name


def parse_queues(spec: str | Sequence[str] | None) -> list[tuple[str, int]]:
    """Parse ``"name[:weight],..."`` (or a list of such items) into (name, weight) pairs."""
    if spec is None:
        return [("default", 1)]
    try:
        items = spec.split(",") if isinstance(spec, str) else list(spec)
    except TypeError:  # not a string nor a list of them (``queues=5``)
        raise ValidationError(
            "queues", f"must be a string or a list of strings, got {type(spec).__name__}"
        ) from None
    out: list[tuple[str, int]] = []
    for raw in items:
        if not isinstance(raw, str):  # ``queues=[1]`` was an AttributeError
            raise ValidationError("queues", f"items must be strings, got {type(raw).__name__}")
        item = raw.strip()
        if not item:
            continue
        name, _, weight_text = item.partition(":")
        weight = 1
        if weight_text:
            try:
                weight = int(weight_text)
            except ValueError as exc:
                raise ValidationError("queues", f"weight in {item!r} must be an integer") from exc
            if weight < 1:
                raise ValidationError("queues", f"weight in {item!r} must be >= 1")
        validate_queue_name(name, "queues")
        if any(name == seen for seen, _ in out):
            raise ValidationError("queues", f"queue {name!r} is listed twice")
        out.append((name, weight))
    if not out:
        raise ValidationError("queues", "at least one queue is required")
    return out


def task_queues(tasks: Iterable[Any]) -> list[str]:
    """The queues a worker serves when none are given: ``default``, then every ``queue`` the
    tasks declare (sorted), each once."""
    declared = {getattr(task, "queue", "default") for task in tasks}
    return ["default", *sorted(declared - {"default"})]


class QueueSelector:
    """Yields the queue order for each claim: strict, or smooth weighted round-robin."""

    def __init__(self, queues: list[tuple[str, int]], strict: bool = False) -> None:
        self.queues = queues
        self.names = [name for name, _ in queues]
        self.strict = strict or len(queues) == 1
        self._current = [0] * len(queues)
        self._total = sum(weight for _, weight in queues)

    def order(self) -> list[str]:
        """The queue order for the next claim."""
        if self.strict:
            return self.names
        best = 0
        for i, (_, weight) in enumerate(self.queues):
            self._current[i] += weight
            if self._current[i] > self._current[best]:
                best = i
        self._current[best] -= self._total
        first = self.names[best]
        return [first, *(n for n in self.names if n != first)]
