"""Issue 19 item 6: settings are validated by pydantic-settings; every ``CONVEYOR_*`` variable
is checked with an error naming it and its rule.

Before: ``CONVEYOR_VISIBILITY_TIMEOUT=-5`` was accepted (every job then ran three times and
dead-lettered) and values were parsed by hand from the annotation's text.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor import ValidationError
from conveyor.config import Retention, Settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("CONVEYOR_VISIBILITY_TIMEOUT", "-5", "must be > 0, got '-5'"),
        ("CONVEYOR_VISIBILITY_TIMEOUT", "0", "must be > 0"),
        ("CONVEYOR_VISIBILITY_TIMEOUT", "nan", "must be a finite number"),
        ("CONVEYOR_VISIBILITY_TIMEOUT", "ten", "must be a number"),
        ("CONVEYOR_MAX_LOST", "0", "must be >= 1"),
        ("CONVEYOR_MAX_LOST", "2.5", "must be a whole number"),
        ("CONVEYOR_POLL_INTERVAL", "0", "must be > 0"),
        ("CONVEYOR_HEARTBEAT_INTERVAL", "-1", "must be > 0"),
        ("CONVEYOR_SHUTDOWN_TIMEOUT", "-1", "must be >= 0"),
        ("CONVEYOR_MAX_PAYLOAD_BYTES", "0", "must be >= 1"),
        ("CONVEYOR_IDEMPOTENCY_TTL", "inf", "must be a finite number"),
        ("CONVEYOR_URL", "conveyor.db", "must be a broker URL"),
        ("CONVEYOR_RETENTION_EVENTS_MAX", "-1", "must be >= 0"),
        ("CONVEYOR_RETENTION_COMPLETED_TTL", "1 day", "must be a number"),
        # finite but over MAX_DELAY (100 years): Event.wait(1e99) raises OverflowError (the
        # heartbeat and lease keeper threads died), a TTL of 2e99 s overflows Redis's EXPIRE
        ("CONVEYOR_VISIBILITY_TIMEOUT", "1e99", "must be <= 3153600000"),
        ("CONVEYOR_HEARTBEAT_INTERVAL", "1e99", "must be <= 3153600000"),
        ("CONVEYOR_POLL_INTERVAL", "1e99", "must be <= 3153600000"),
        ("CONVEYOR_REAP_INTERVAL", "1e99", "must be <= 3153600000"),
        ("CONVEYOR_SHUTDOWN_TIMEOUT", "1e99", "must be <= 3153600000"),
        ("CONVEYOR_TIMEOUT_GRACE", "1e99", "must be <= 3153600000"),
        ("CONVEYOR_IDEMPOTENCY_TTL", "1e99", "must be <= 3153600000"),
        # retention TTLs at most MAX_DELAY too (were unbounded: 1e99 s overflows Redis's EXPIRE)
        ("CONVEYOR_RETENTION_COMPLETED_TTL", "1e99", "must be <= 3153600000, got '1e99'"),
        ("CONVEYOR_RETENTION_CANCELLED_TTL", "1e99", "must be <= 3153600000"),
        # retention counts: a 31-digit one made the memory broker's constructor raise
        # OverflowError and every Redis enqueue / outcome fail ("Integer exceeds 64-bit range")
        ("CONVEYOR_RETENTION_EVENTS_MAX", "1" + "0" * 30, "must be <= 1000000000000"),
        ("CONVEYOR_RETENTION_COMPLETED_MAX", "1" + "0" * 30, "must be <= 1000000000000"),
        ("CONVEYOR_RETENTION_DEAD_LETTER_MAX", "1" + "0" * 30, "must be <= 1000000000000"),
        ("CONVEYOR_RETENTION_HISTORY_MAX", "1" + "0" * 30, "must be <= 1000000000000"),
    ],
)
def test_bad_variables_are_refused_naming_the_variable_and_rule(
    variable: str, value: str, rule: str
) -> None:
    with pytest.raises(ValidationError) as info:
        Settings.from_env({variable: value})
    assert info.value.field == variable
    assert rule in info.value.rule


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(ValidationError) as info:
        Settings.from_env({"CONVEYOR_VISIBILITY_TIMEOUT": "-5", "CONVEYOR_MAX_LOST": "x"})
    assert "CONVEYOR_VISIBILITY_TIMEOUT: must be > 0" in str(info.value)
    assert "CONVEYOR_MAX_LOST: must be a whole number" in str(info.value)


def test_good_variables_and_overrides() -> None:
    env = {
        "CONVEYOR_URL": "redis://localhost:6379/0",
        "CONVEYOR_VISIBILITY_TIMEOUT": "7.5",
        "CONVEYOR_MAX_LOST": "5",
        "CONVEYOR_RETENTION_EVENTS_MAX": "0",
        "UNRELATED": "x",
    }
    s = Settings.from_env(env, poll_interval=0.1)
    assert (s.url, s.visibility_timeout, s.max_lost, s.poll_interval) == (
        "redis://localhost:6379/0",
        7.5,
        5,
        0.1,
    )
    assert s.retention.events_max == 0
    assert Settings.from_env({}) == Settings()
    with pytest.raises(ValidationError, match="poll_interval: must be > 0"):
        Settings.from_env({}, poll_interval=0)
    with pytest.raises(ValidationError, match="nonsense: is not a setting"):
        Settings.from_env({}, nonsense=1)


def test_public_api_keeps_working_and_checks_values() -> None:
    s = dataclasses.replace(Settings(), visibility_timeout=20)
    assert s.visibility_timeout == 20.0 and isinstance(s.visibility_timeout, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.visibility_timeout = 1.0  # type: ignore[misc]
    with pytest.raises(ValidationError, match="visibility_timeout: must be > 0, got -5"):
        Settings(visibility_timeout=-5)
    with pytest.raises(ValidationError, match="events_max: must be >= 0"):
        Retention(events_max=-1)
    for name in ("completed_ttl", "cancelled_ttl"):  # durations: at most MAX_DELAY
        with pytest.raises(ValidationError, match=rf"^{name}: must be <= 3153600000, got 1e\+99"):
            Retention(**{name: 1e99})
        assert getattr(Retention(**{name: 3153600000}), name) == 3153600000.0
    assert Settings(reap_interval=0.0).reap_interval == 0.0


def test_a_misspelt_variable_is_reported(caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="conveyor")
    Settings.from_env({"CONVEYOR_VISIBILTY_TIMEOUT": "5"})
    assert "did you mean CONVEYOR_VISIBILITY_TIMEOUT?" in caplog.text


def test_defaults_and_a_url_alone_do_not_load_pydantic() -> None:
    """A worker configured by CONVEYOR_URL alone stays lean (idle RSS, docs/benchmarks.md)."""
    code = (
        "import sys; from conveyor.config import Settings; Settings.from_env({}); "
        "s = Settings.from_env({'CONVEYOR_URL': 'redis://h:1/0'}); "
        "print(s.url, 'pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "redis://h:1/0 False"


def test_docs_table_lists_every_variable_with_its_default_and_rule() -> None:
    from conveyor.settings_env import describe, table_row

    text = DOCS.read_text()
    rows = describe()
    assert len(rows) == 19
    for row in rows:
        assert table_row(row) in text, table_row(row)
