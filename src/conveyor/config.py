"""Every knob with its default and meaning, in one place; ``Settings.from_env()`` reads overrides.

Environment variables are ``CONVEYOR_<FIELD>`` in upper case (e.g. ``CONVEYOR_URL``,
``CONVEYOR_VISIBILITY_TIMEOUT``); retention fields are ``CONVEYOR_RETENTION_<FIELD>``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .errors import ValidationError

DEFAULT_URL = "sqlite:///conveyor.db"


@dataclass(frozen=True)
class Retention:
    """How long finished jobs are kept, so storage cannot grow without bound."""

    completed_ttl: float = 24 * 3600.0  # seconds a completed job stays inspectable
    completed_max: int = 10_000  # per queue; oldest completed jobs are dropped first
    cancelled_ttl: float = 24 * 3600.0
    dead_letter_max: int = 100_000  # per queue; dead letters stay until purged or over the cap
    events_max: int = 10_000  # events kept in the stream
    history_max: int = 50  # schedule history entries per schedule


@dataclass(frozen=True)
class Settings:
    """Runtime configuration shared by the app, workers and the scheduler."""

    url: str | None = None  # None: CONVEYOR_URL, else DEFAULT_URL
    # lease length; a worker's keeper extends its leases every third of it, so a dead worker's
    # jobs come back at their lease deadline: every claim returns expired leases, and an idle
    # worker sleeps until the earliest deadline (docs/reliability.md#on-time-delivery)
    visibility_timeout: float = 10.0
    max_lost: int = 3  # lost deliveries before a job is a poison pill (dead_letter)
    idempotency_ttl: float = 300.0
    max_payload_bytes: int = 1024 * 1024
    # a handler's encoded result over this is not stored: the job completes without it and a
    # ``result_error`` entry says why (docs/operations.md)
    max_result_bytes: int = 1024 * 1024
    poll_interval: float = 0.5  # idle wait between claims when the backend cannot wake us
    reap_interval: float = 2.0  # at most one effective reaper pass per interval
    heartbeat_interval: float = 5.0  # worker registry refresh; entries expire after 2x
    shutdown_timeout: float = 30.0
    timeout_grace: float = 5.0  # seconds a thread job may ignore its timeout before recycle
    retention: Retention = field(default_factory=Retention)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``CONVEYOR_*`` variables, then explicit ``overrides``."""
        env = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"CONVEYOR_{f.name.upper()}")
            if raw is not None and f.name != "retention":
                values[f.name] = _coerce(f.name, raw, f.type)
        retention = Retention(
            **{
                f.name: _coerce(f"retention_{f.name}", raw, f.type)
                for f in fields(Retention)
                if (raw := env.get(f"CONVEYOR_RETENTION_{f.name.upper()}")) is not None
            }
        )
        return replace(cls(retention=retention, **values), **overrides)


def _coerce(name: str, raw: str, annotation: Any) -> Any:
    text = str(annotation)
    try:
        if "int" in text and "float" not in text:
            return int(raw)
        if "float" in text:
            return float(raw)
    except ValueError as exc:
        raise ValidationError(f"CONVEYOR_{name.upper()}", f"{raw!r} is not a number") from exc
    return raw
