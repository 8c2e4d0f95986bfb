"""Every knob with its default and meaning, in one place; ``Settings.from_env()`` reads overrides.

Environment variables are ``CONVEYOR_<FIELD>`` in upper case (e.g. ``CONVEYOR_URL``,
``CONVEYOR_VISIBILITY_TIMEOUT``); retention fields are ``CONVEYOR_RETENTION_<FIELD>``. Values
are validated by pydantic-settings (the rules live in ``settings_env.py``; docs/operations.md
has the table): a bad variable raises ``SettingsError`` naming it and its rule. ``Settings()``
holds the defaults (CLI help texts read them there); ``settings_env.describe()`` lists every
variable with its default and rule.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import ValidationError

DEFAULT_URL = "sqlite:///conveyor.db"
#: The rule of ``url`` / ``CONVEYOR_URL`` (also in ``settings_env``): checked here without
#: pydantic, so a worker configured by ``CONVEYOR_URL`` alone stays lean (docs/benchmarks.md).
URL_PATTERN = r"^[A-Za-z][A-Za-z0-9+.\-]*://"
URL_RULE = "must be a broker URL (memory://, sqlite:///path, redis://host)"


@dataclass(frozen=True)
class Retention:
    """How long finished jobs are kept, so storage cannot grow without bound."""

    completed_ttl: float = 24 * 3600.0  # seconds a completed job stays inspectable
    completed_max: int = 10_000  # per queue; oldest completed jobs are dropped first
    cancelled_ttl: float = 24 * 3600.0
    dead_letter_max: int = 100_000  # per queue; dead letters stay until purged or over the cap
    events_max: int = 10_000  # events kept in the stream
    history_max: int = 50  # schedule history entries per schedule

    def __post_init__(self) -> None:
        _check(self)


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
    # opt-in auto-batching of single-job enqueues (conveyor.autobatch): 0 is off; else at most
    # this many jobs per broker call, each waiting at most autobatch_max_delay seconds
    autobatch_max_jobs: int = 0
    autobatch_max_delay: float = 0.0
    retention: Retention = field(default_factory=Retention)

    def __post_init__(self) -> None:
        _check(self, exclude="retention")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``CONVEYOR_*`` variables, then explicit ``overrides``.

        Every value is checked by pydantic-settings (``settings_env.py``): a bad one raises
        ``SettingsError`` (a ``ValidationError``) naming the variable and its rule, e.g.
        ``CONVEYOR_VISIBILITY_TIMEOUT: must be > 0, got '-5'``. A variable that looks like a
        misspelt setting is logged (with the name it resembles). With no ``CONVEYOR_*``
        setting and no override the defaults are used as they are (pydantic is not loaded).
        """
        env = os.environ if environ is None else environ
        given = [k for k in env if k.startswith("CONVEYOR_")]
        wanted = [k for k in given if k in ENV_VARIABLES]
        if len(wanted) != len(given):
            _warn_misspelt(set(given) - set(wanted))
        if not overrides and wanted in ([], ["CONVEYOR_URL"]):
            url = env.get("CONVEYOR_URL")
            if url is not None:
                _check_url(url, "CONVEYOR_URL")
            return cls._trusted(url=url, retention=Retention())
        from .settings_env import load

        return load({k: env[k] for k in wanted}, overrides)

    @classmethod
    def _trusted(cls, **values: Any) -> Settings:
        """Settings from already validated values (no second check)."""
        obj = object.__new__(cls)
        for f in fields(cls):
            object.__setattr__(obj, f.name, values.get(f.name, f.default))
        return obj


class SettingsError(ValidationError):
    """Settings that break their rules: ``problems`` lists (variable or field, rule) pairs;
    the message names every one (``field`` is the first)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        first, rule = problems[0]
        more = "".join(f"; {name}: {text}" for name, text in problems[1:])
        super().__init__(first, rule + more)


def _check(obj: Any, exclude: str = "") -> None:
    """Validate (and normalise: "10" -> 10.0) the fields of ``obj`` that are not defaults.

    All-default objects (the common case) cost a few comparisons and never load pydantic.
    """
    changed = {
        f.name: getattr(obj, f.name)
        for f in fields(obj)
        if f.name != exclude and not _same(getattr(obj, f.name), f.default)
    }
    if "url" in changed:
        _check_url(changed.pop("url"), "url")
    if changed:
        from .settings_env import check_values

        for name, value in check_values(type(obj), changed).items():
            if name in changed:
                object.__setattr__(obj, name, value)


def _check_url(value: Any, name: str) -> None:
    if value is not None and not (isinstance(value, str) and re.match(URL_PATTERN, value)):
        raise SettingsError([(name, f"{URL_RULE}, got {value!r}")])


def _same(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def _env_names() -> frozenset[str]:
    """Every ``CONVEYOR_*`` variable that sets a field of ``Settings`` or ``Retention``."""
    names = {f"CONVEYOR_{f.name.upper()}" for f in fields(Settings) if f.name != "retention"}
    names |= {f"CONVEYOR_RETENTION_{f.name.upper()}" for f in fields(Retention)}
    return frozenset(names)


#: Every settings variable; other ``CONVEYOR_*`` variables belong to other parts
#: (dashboard, alerts, CLI) and are checked there (docs/operations.md#settings).
ENV_VARIABLES = _env_names()
_OTHER_VARIABLES_PREFIXES = ("CONVEYOR_DASHBOARD_", "CONVEYOR_ALERT", "CONVEYOR_WORKER_EXEC")
_warned: set[str] = set()


def _warn_misspelt(names: set[str]) -> None:
    """Log a ``CONVEYOR_*`` variable that is no setting but resembles one (once each)."""
    for name in sorted(names - _warned):
        _warned.add(name)
        if name.startswith(_OTHER_VARIABLES_PREFIXES):
            continue
        close = difflib.get_close_matches(name, ENV_VARIABLES, n=1, cutoff=0.85)
        if close:
            logging.getLogger("conveyor").warning(
                "environment variable %s is not a Conveyor setting: did you mean %s?",
                name,
                close[0],
            )
