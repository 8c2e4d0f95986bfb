"""Flow control is not on PostgreSQL yet: asking for it is a clear error, never a silent no-op."""

from __future__ import annotations

import pytest

from conveyor import ConcurrencyLimit, Conveyor
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.errors import ValidationError


def test_a_limited_task_is_refused_naming_the_option(pg: PostgresBroker) -> None:
    app = Conveyor(pg)
    try:
        with pytest.raises(ValidationError, match=r"rate_limit|concurrency") as err:

            @app.task(concurrency=ConcurrencyLimit(1, key="account_id"))
            def sync(account_id: int) -> None: ...

            sync.enqueue(1)
        assert "not implemented on the PostgresBroker backend" in str(err.value)
    finally:
        app.close()
