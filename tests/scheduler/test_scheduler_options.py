"""``app.scheduler(...)`` checks its options by name, as ``app.worker(...)`` does.

Only ``interval`` was checked, and not for infinity (``Event.wait(inf)`` raises
OverflowError in ``run()``). ``reap_interval="5"`` made the reap plugin raise a TypeError on
every pass, a NaN or negative one reaped on every pass or never, ``max_lost=0`` dead-lettered
a job at its first lost lease, ``alert_interval=-1`` evaluated on every pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, ValidationError

NAN, INF = float("nan"), float("inf")
BAD: list[tuple[str, Any]] = [
    ("interval", INF),
    ("interval", NAN),
    ("interval", "0.5"),
    ("interval", True),
    ("interval", None),
    ("reap_interval", "5"),
    ("reap_interval", NAN),
    ("reap_interval", INF),
    ("reap_interval", -1),
    ("reap_interval", 0),
    ("max_lost", 0),
    ("max_lost", 1.5),
    ("max_lost", "3"),
    ("max_lost", True),
    ("alert_interval", -1),
    ("alert_interval", NAN),
    ("alert_interval", "30"),
    ("interval", 1e99),  # finite, but Event.wait(1e99) raises OverflowError as infinity did
    ("reap_interval", 1e99),
    ("alert_interval", 1e99),
]


@pytest.mark.parametrize(("field", "value"), BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_a_bad_scheduler_option_is_refused_by_name(app: Conveyor, field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=rf"^{field}: "):
        app.scheduler(**{field: value})


def test_good_options_are_kept(app: Conveyor) -> None:
    scheduler = app.scheduler(interval=1, reap_interval=2.5, max_lost=5, alert_interval=60)
    assert (scheduler.interval, scheduler.reap_interval, scheduler.max_lost) == (1.0, 2.5, 5)
    assert scheduler.alert_interval == 60.0
    defaults = app.scheduler()
    assert defaults.reap_interval == app.runtime.settings.reap_interval
    assert defaults.max_lost == app.runtime.settings.max_lost and defaults.alert_interval is None


@pytest.mark.parametrize("bad", [0, -1, "5", 1.5, True, 10**12])
def test_schedule_history_checks_its_limit(app: Conveyor, bad: Any) -> None:
    """``history(name, limit="5")`` was a raw TypeError (memory) or an empty list (SQLite),
    ``1.5`` an IntegrityError, ``-1`` an empty list."""
    app.task(name="t")(lambda: None)
    app.schedule_cron("s", "t", every=60)
    with pytest.raises(ValidationError, match=r"^limit: "):
        app.schedules.history("s", limit=bad)
    assert app.schedules.history("s", limit=5) == []


@pytest.mark.parametrize("bad", ["", "a\nforged: line", 5, "s" * 201])
def test_a_scheduler_id_is_checked(app: Conveyor, bad: Any) -> None:
    """``id=`` is logged, stored in the reaper's election document and in every history
    entry: a newline forged log lines, an int was stored as is."""
    with pytest.raises(ValidationError, match=r"^id: "):
        app.scheduler(id=bad)
    assert app.scheduler(id="beat-1").id == "beat-1"
