"""Contract: enqueue semantics are unchanged with auto-batching on (issue 18).

The enqueue, id, idempotency, ``unique=`` and ``debounce=`` contract tests run again here, on
every backend, with an app whose single-job enqueues all go through the auto-batcher (real
writer thread, real timer): what a caller is told and what is stored must not change.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor import AutoBatch, Conveyor, FakeClock
from conveyor.broker.base import Broker
from tests.contract.test_enqueue_claim import *  # noqa: F403 - the tests, collected again
from tests.contract.test_flow_debounce import *  # noqa: F403
from tests.contract.test_flow_unique import *  # noqa: F403
from tests.contract.test_unique_ids import *  # noqa: F403


@pytest.fixture
def app(request: Any, backend: str, broker: Broker, clock: FakeClock) -> Iterator[Conveyor]:
    """The contract suite's app, with auto-batching on (overrides tests/conftest.py's)."""
    app = Conveyor(broker, clock=clock, rng=random.Random(42), autobatch=AutoBatch(16, 0.0005))
    batcher = app.runtime.producer.autobatch
    assert batcher is not None
    yield app
    batcher.close()
