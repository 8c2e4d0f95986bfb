"""The whole contract suite again, on a real 3-node Redis Cluster.

The contract modules are imported so pytest collects their tests here; this module's ``broker``
fixture (a flushed cluster broker) replaces the parametrized one from tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.broker.base import Broker
from conveyor.broker.redis import RedisBroker
from tests.contract.test_admin import *  # noqa: F403
from tests.contract.test_bad_input import *  # noqa: F403
from tests.contract.test_enqueue_claim import *  # noqa: F403
from tests.contract.test_leases import *  # noqa: F403
from tests.contract.test_outcomes import *  # noqa: F403
from tests.contract.test_side_stores import *  # noqa: F403


@pytest.fixture
def broker(redis_cluster: Any) -> Iterator[Broker]:
    """A flushed broker on the session's Redis Cluster."""
    b = RedisBroker.from_url(redis_cluster.url)
    b.flush_all()
    yield b
    b.close()
