"""tests/seeds/README.md tells the truth about the API it maps the seeds onto."""

from __future__ import annotations

from pathlib import Path

from conveyor import Conveyor, FakeClock
from conveyor.config import Settings

README = Path(__file__).resolve().parent / "README.md"


def test_readme_does_not_claim_dequeue_skips_reaping() -> None:
    assert "does not reap" not in README.read_text()


def test_dequeue_alone_sees_an_expired_lease_again() -> None:
    clock = FakeClock(1_700_000_000.0)
    app = Conveyor("memory://", clock=clock, settings=Settings(reap_interval=0.0))
    job_id = app.enqueue("send_email", args=["x"]).id
    first = app.dequeue("default", visibility_timeout=1.0)
    assert first is not None and first.id == job_id
    clock.advance(1.5)
    again = app.dequeue("default", visibility_timeout=1.0)  # no reap_expired call of our own
    assert again is not None and again.id == job_id and again.delivery_count == 2
