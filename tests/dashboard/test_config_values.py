"""Dashboard limits that would quietly defeat themselves are refused where they are set, with
the field (or the environment variable) named: a NaN session lifetime made sessions last for
ever, ``login_per_minute=0`` turned the brute-force limit off, ``rate_burst=0`` refused every
API call, a NaN or zero ``live_interval`` broke or spun every live stream."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor.dashboard import DashboardConfig
from conveyor.errors import ValidationError

from .conftest import TOKEN

BAD: list[tuple[str, Any]] = [
    ("session_ttl", float("nan")),
    ("session_ttl", float("inf")),
    ("session_ttl", -1),
    ("session_ttl", 0),
    ("login_per_minute", 0),
    ("login_per_minute", 2.5),
    ("rate_burst", 0),
    ("rate_burst", -1),
    ("rate_limit", float("nan")),
    ("rate_limit", float("inf")),
    ("rate_limit", -5),
    ("live_interval", float("nan")),
    ("live_interval", 0),
    ("live_interval", "fast"),
    # finite but over 100 years (MAX_DELAY): a 1e99 s session TTL overflows the session
    # store's expiry (Redis EXPIRE) and the cookie's Max-Age, a 1e99 s live interval a sleep
    ("session_ttl", 1e99),
    ("live_interval", 1e99),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=lambda v: repr(v))
def test_a_self_defeating_limit_is_refused(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        DashboardConfig(token=TOKEN, **{field: value})
    assert info.value.field == field


@pytest.mark.parametrize("raw", ["nan", "inf", "-5"])
def test_the_rate_limit_variable_is_checked_too(raw: str) -> None:
    env = {"CONVEYOR_DASHBOARD_TOKEN": TOKEN, "CONVEYOR_DASHBOARD_RATE_LIMIT": raw}
    with pytest.raises(ValidationError) as info:
        DashboardConfig.from_env(env)
    assert info.value.field == "CONVEYOR_DASHBOARD_RATE_LIMIT"


def test_usual_values_still_work() -> None:
    config = DashboardConfig(token=TOKEN, rate_limit=0, rate_burst=3, live_interval=0.1)
    assert config.rate_limit == 0  # 0: no API rate limit, as before
    assert DashboardConfig(token=TOKEN, session_ttl=60, login_per_minute=1).session_ttl == 60
