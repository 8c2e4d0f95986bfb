"""The side stores: the small non-job stores every backend composes next to its job store.

Schedules, the worker registry, alert state, dashboard sessions, audit and schedule history,
worker events and metrics are all built on these four protocols, not on job transitions. Each
backend builds one object per protocol sharing its connection (``broker.docs``, ``broker.logs``,
``broker.events``, ``broker.counters``); monitoring, the scheduler and the worker registry take
a ``SideStores`` (anything with those four attributes, a ``Broker`` included) and use nothing
else of it. Time is an argument (``now``), as everywhere in the broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class DocStore(Protocol):
    """Small JSON documents by (collection, name) with an optional TTL and compare-and-set."""

    def put(
        self,
        collection: str,
        name: str,
        doc: Mapping[str, Any],
        now: float,
        ttl: float | None = None,
    ) -> None:
        """Create or replace a document; it vanishes ``ttl`` seconds after ``now`` if given."""

    def get(self, collection: str, name: str, now: float) -> dict[str, Any] | None:
        """One live document, or None."""

    def list(self, collection: str, now: float) -> dict[str, dict[str, Any]]:
        """Every live document of a collection, by name."""

    def delete(self, collection: str, name: str) -> bool:
        """Remove a document; True if it existed."""

    def update_if(
        self,
        collection: str,
        name: str,
        field: str,
        expected: Any,
        changes: Mapping[str, Any],
        now: float,
    ) -> bool:
        """Atomically merge ``changes`` into the document if ``doc[field] == expected``."""


@runtime_checkable
class LogStore(Protocol):
    """Named bounded logs (audit, schedule history), newest kept."""

    def append(self, name: str, entries: Sequence[Mapping[str, Any]], cap: int) -> None:
        """Append entries to a named log, keeping the newest ``cap``."""

    def read(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of a log, newest first."""


@runtime_checkable
class EventStore(Protocol):
    """The bounded event stream: job transitions (written by the job store) and the rest."""

    def add(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Append events that are not job transitions (worker_up, worker_down, ...)."""

    def read(self, after: str | None = None, limit: int = 100) -> tuple[list[dict[str, Any]], str]:
        """Events after cursor ``after`` (None: the oldest kept), oldest first, and the next cursor.

        Passing the returned cursor back resumes exactly where this read stopped.
        """


@runtime_checkable
class CounterStore(Protocol):
    """Named float counters grouped in expiring buckets (e.g. one minute of metrics)."""

    def add(self, bucket: str, increments: Mapping[str, float], now: float, ttl: float) -> None:
        """Add to named counters of a bucket, kept ``ttl`` s after ``now``."""

    def get(self, buckets: Sequence[str], now: float) -> dict[str, dict[str, float]]:
        """The counters of each live bucket."""


@runtime_checkable
class SideStores(Protocol):
    """The four side stores of one backend (every ``Broker`` is one)."""

    @property
    def docs(self) -> DocStore:
        """Documents: schedules, workers, alert state, sessions."""

    @property
    def logs(self) -> LogStore:
        """Bounded logs: audit, schedule history."""

    @property
    def events(self) -> EventStore:
        """The event stream."""

    @property
    def counters(self) -> CounterStore:
        """Metric counters."""
