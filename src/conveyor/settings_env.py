"""Validation of ``Settings`` with pydantic-settings: every ``CONVEYOR_*`` variable is checked.

``config.Settings`` stays a frozen dataclass (attribute reads on the hot path cost nothing
extra); this module is imported only when there is something to check — a ``CONVEYOR_*``
settings variable in the environment, an override, or a ``Settings(...)`` built with a value
that is not the default — so a process configured by defaults never loads pydantic.

The models below are the single statement of each rule (bound, type, finiteness); their
defaults are the dataclasses' own. ``describe()`` turns them into the table of
docs/operations.md (a test keeps the two equal) and gives CLI help texts the real defaults.
Errors become one ``SettingsError`` (a ``ValidationError``) naming each variable (or field)
and its rule, e.g. ``CONVEYOR_VISIBILITY_TIMEOUT: must be > 0, got '-5'``.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Mapping
from typing import Any

import pydantic
from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources import EnvSettingsSource

from .config import URL_PATTERN, URL_RULE, Retention, Settings, SettingsError
from .core.job import MAX_DELAY

# durations: at most 100 years (an int: the rule reads <= 3153600000); Event.wait(1e99)
# raises OverflowError and a 2e99 s TTL overflows Redis's EXPIRE
_MAX_SECONDS = int(MAX_DELAY)
# retention counts: far above any real cap, inside what every backend holds (a 31-digit one
# overflowed the memory broker's deque and Redis's 64-bit integers; Lua prints 10**14 as 1e+14)
_MAX_COUNT = 10**12

_S, _R = Settings(), Retention()
_ENVIRON: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("environ")


class _MappingEnv(EnvSettingsSource):
    """pydantic-settings' environment source, reading the mapping ``from_env`` was given."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = _ENVIRON.get()
        if self.case_sensitive:
            return dict(environ)
        return {k.lower(): v for k, v in environ.items()}


class _Sourced(BaseSettings):
    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit values first, then the given environment (no .env or secrets files)."""
        return init_settings, _MappingEnv(settings_cls)


class RetentionModel(_Sourced):
    """The rules of ``config.Retention`` (``CONVEYOR_RETENTION_<FIELD>``)."""

    model_config = SettingsConfigDict(env_prefix="CONVEYOR_RETENTION_", extra="ignore")

    completed_ttl: float = Field(
        _R.completed_ttl,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a completed job stays inspectable",
    )
    completed_max: int = Field(
        _R.completed_max,
        ge=0,
        le=_MAX_COUNT,
        description="completed jobs kept per queue (oldest dropped first)",
    )
    cancelled_ttl: float = Field(
        _R.cancelled_ttl,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a cancelled job is kept",
    )
    dead_letter_max: int = Field(
        _R.dead_letter_max,
        ge=0,
        le=_MAX_COUNT,
        description="dead letters kept per queue (until purged)",
    )
    events_max: int = Field(
        _R.events_max,
        ge=0,
        le=_MAX_COUNT,
        description="events kept in the event stream",
    )
    history_max: int = Field(
        _R.history_max,
        ge=0,
        le=_MAX_COUNT,
        description="history entries kept per schedule",
    )


class SettingsModel(_Sourced):
    """The rules of ``config.Settings`` (``CONVEYOR_<FIELD>``)."""

    model_config = SettingsConfigDict(env_prefix="CONVEYOR_", extra="ignore")

    url: str | None = Field(
        _S.url,
        min_length=1,
        pattern=URL_PATTERN,
        description="broker URL when the app gives none (`sqlite:///conveyor.db` then)",
    )
    visibility_timeout: float = Field(
        _S.visibility_timeout,
        gt=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="lease length in seconds; a worker extends its leases every third of it",
    )
    max_lost: int = Field(
        _S.max_lost,
        ge=1,
        description="lost deliveries (expired leases) before a job is dead-lettered (poison pill)",
    )
    idempotency_ttl: float = Field(
        _S.idempotency_ttl,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds an idempotency key is remembered (per queue)",
    )
    max_payload_bytes: int = Field(
        _S.max_payload_bytes,
        ge=1,
        description="largest encoded job (arguments included) enqueue accepts",
    )
    max_result_bytes: int = Field(
        _S.max_result_bytes,
        ge=0,
        description="largest encoded result stored; a bigger one is dropped (`result_error`)",
    )
    poll_interval: float = Field(
        _S.poll_interval,
        gt=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="longest idle wait between claims when the backend cannot wake a worker",
    )
    reap_interval: float = Field(
        _S.reap_interval,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="at most one effective reaper pass per this many seconds",
    )
    heartbeat_interval: float = Field(
        _S.heartbeat_interval,
        gt=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="worker registry refresh; entries expire after twice this",
    )
    shutdown_timeout: float = Field(
        _S.shutdown_timeout,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds in-flight jobs may finish after SIGTERM",
    )
    timeout_grace: float = Field(
        _S.timeout_grace,
        ge=0,
        le=_MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a thread job may ignore its timeout before its process is recycled",
    )
    autobatch_max_jobs: int = Field(
        _S.autobatch_max_jobs,
        ge=0,
        description="auto-batching of single-job enqueues: most jobs per broker call (0: off)",
    )
    autobatch_max_delay: float = Field(
        _S.autobatch_max_delay,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="auto-batching: longest wait in seconds of a job for its batch",
    )


def load(environ: Mapping[str, str], overrides: Mapping[str, Any]) -> Settings:
    """``Settings`` from ``CONVEYOR_*`` variables of ``environ`` and ``overrides`` (which win)."""
    extra = dict(overrides)
    retention = extra.pop("retention", None)
    unknown = set(extra) - {f.name for f in dataclasses.fields(Settings)}
    if unknown:
        raise SettingsError([(name, "is not a setting") for name in sorted(unknown)])
    token = _ENVIRON.set(environ)
    try:
        values = _validated(SettingsModel, extra, "CONVEYOR_")
        if retention is None:
            kept = _validated(RetentionModel, {}, "CONVEYOR_RETENTION_")
        else:
            kept = check_values(Retention, dataclasses.asdict(retention), "retention.")
    finally:
        _ENVIRON.reset(token)
    return Settings._trusted(retention=Retention(**kept), **values)


def check_values(cls: type, values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Validate the given field values of ``Settings`` or ``Retention`` (no environment)."""
    model = SettingsModel if cls is Settings else RetentionModel
    token = _ENVIRON.set({})
    try:
        return _validated(model, {k: v for k, v in values.items() if k != "retention"}, prefix)
    finally:
        _ENVIRON.reset(token)


def _validated(model: type[BaseSettings], given: Mapping[str, Any], env: str) -> dict[str, Any]:
    try:
        return model(**given).model_dump()
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err["loc"] else "?"
            where = name if name in given or not env.startswith("CONVEYOR") else env + name
            problems.append((where.upper() if where.startswith("CONVEYOR") else where, _rule(err)))
        raise SettingsError(problems) from None


_RULES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than_equal": "must be <= {le}",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "finite_number": "must be a finite number",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": URL_RULE,
}


def _rule(err: Any) -> str:
    template = _RULES.get(err["type"])
    ctx = {k: _number(v) for k, v in err.get("ctx", {}).items()}
    text = template.format(**ctx) if template else str(err["msg"])
    return f"{text}, got {err['input']!r}"


def _number(value: Any) -> Any:
    """A bound as written: ``3153600000``, not ``3.1536e+09``; ``0.5`` as it is."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else format(value, "g")
    return value


def describe() -> list[dict[str, Any]]:
    """One row per ``CONVEYOR_*`` settings variable: ``variable``, ``field``, ``default``,
    ``rule`` and ``meaning`` (docs/operations.md's table; CLI help texts)."""
    rows = []
    for model, prefix in ((SettingsModel, "CONVEYOR_"), (RetentionModel, "CONVEYOR_RETENTION_")):
        for name, info in model.model_fields.items():
            rows.append(
                {
                    "variable": prefix + name.upper(),
                    "field": name,
                    "default": info.default,
                    "rule": _rule_text(name, info),
                    "meaning": info.description or "",
                }
            )
    return rows


def _rule_text(name: str, info: Any) -> str:
    if name == "url":
        return "a broker URL"
    bounds = []
    for m in info.metadata:
        if getattr(m, "gt", None) is not None:
            bounds.append(f"> {m.gt}")
        elif getattr(m, "ge", None) is not None:
            bounds.append(f">= {m.ge}")
        if getattr(m, "le", None) is not None:
            bounds.append(f"{'and ' if bounds else ''}<= {m.le}")
    kind = "whole number" if info.annotation is int else "finite number"
    return " ".join([kind, *bounds])


def table_row(row: Mapping[str, Any]) -> str:
    """A ``describe()`` row as a line of docs/operations.md's settings table."""
    default = row["default"]
    shown = (
        "none"
        if default is None
        else f"{default:g}"
        if isinstance(default, float)
        else str(default)
    )
    return f"| `{row['variable']}` | {shown} | {row['rule']} | {row['meaning']} |"
