"""The four recipes of docs/flow-control.md run as written and do what the text says.

Each Python block of the "Recipes" section is executed in a namespace holding only what a
reader has at that point (``app`` on the memory broker with a FakeClock, the names imported
at the top of the page, and a stand-in ``partner`` HTTP client), then driven by claims.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, JobState, RateLimit, RateLimited

DOC = Path(__file__).resolve().parents[2] / "docs" / "flow-control.md"


class _Response:
    status_code = 429
    headers = {"Retry-After": "7"}


class _Partner:
    def post(self, order_id: str) -> _Response:
        return _Response()


def _recipes() -> dict[str, Any]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Recipes") : text.index("## Unique jobs")]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 4
    clock = FakeClock(1_700_000_000.0)
    ns: dict[str, Any] = {
        "app": Conveyor("memory://", clock=clock),
        "clock": clock,
        "partner": _Partner(),
        "ConcurrencyLimit": ConcurrencyLimit,
        "RateLimit": RateLimit,
        "RateLimited": RateLimited,
    }
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/flow-control.md recipe {i + 1}", "exec"), ns)
    return ns


def _claim(ns: dict[str, Any], queue: str, limit: int = 100) -> list[Any]:
    return list(ns["app"].broker.claim([queue], ns["clock"].now(), limit=limit))


def test_partner_api_at_10_per_second() -> None:
    ns = _recipes()
    jobs = [ns["push_order"].enqueue(f"o{i}") for i in range(25)]
    assert len(_claim(ns, "partner")) == 10
    ns["clock"].advance(0.5)
    assert len(_claim(ns, "partner")) == 5
    ns["clock"].advance(10)
    worker = ns["app"].worker(queues=["partner"])
    worker.run_until_idle()  # the stand-in partner answers 429: back in 7 s, no attempt spent
    late = jobs[-1].refresh()
    assert late.state is JobState.SCHEDULED and late.attempts == 0
    assert late.run_at == ns["clock"].now() + 7


def test_one_sync_per_account() -> None:
    ns = _recipes()
    for account in (1, 1, 2):
        ns["sync_account"].enqueue(account)
    assert sorted(lease.job.args[0] for lease in _claim(ns, "default")) == [1, 2]
    assert _claim(ns, "default") == []


def test_fair_tenants() -> None:
    ns = _recipes()
    for batch in range(50):
        ns["import_rows"].enqueue("big", batch)
    ns["import_rows"].enqueue("small", 0)
    first = [lease.job.args[0] for lease in _claim(ns, "default", limit=3)]
    assert "small" in first


def test_llm_tokens_per_minute_per_customer() -> None:
    ns = _recipes()
    for i in range(30):
        ns["complete"].enqueue("acme", f"p{i}")
    ns["complete"].enqueue("globex", "hello")
    got = _claim(ns, "llm")
    customers = [lease.job.args[0] for lease in got]
    assert customers.count("acme") == 10 and customers.count("globex") == 1  # burst 10
    ns["clock"].advance(1.0)
    assert [lease.job.args[0] for lease in _claim(ns, "llm")] == ["acme"]  # 60/m: one a second
