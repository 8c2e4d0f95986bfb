"""The whole contract suite again, on a real 3-node Redis Cluster.

Every ``tests/contract/test_*.py`` module is imported and its tests are placed in this module,
so pytest collects them here (new contract modules join automatically); this module's
``broker`` fixture (a flushed cluster broker) replaces the parametrized one of tests/conftest.py.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest

import tests.contract
from conveyor.broker.base import Broker
from conveyor.broker.redis import RedisBroker

# Workflows span queues (hash slots), so Redis Cluster refuses them (docs/workflows.md); the
# refusal itself is tested below instead of the workflow contract.
CLUSTER_UNSUPPORTED = {
    "test_workflows",
    "test_flow_workflows",
    "test_workflow_steps",
    "test_workflow_release",
    "test_workflow_retention",
    "test_batch_join",
    "test_clear_workflow_nodes",
    "test_workflow_ops",
}

for _info in pkgutil.iter_modules(tests.contract.__path__):
    if _info.name.startswith("test_") and _info.name not in CLUSTER_UNSUPPORTED:
        _module = importlib.import_module(f"tests.contract.{_info.name}")
        globals().update({k: v for k, v in vars(_module).items() if k.startswith("test_")})


@pytest.fixture
def broker(redis_cluster: Any) -> Iterator[Broker]:
    """A flushed broker on the session's Redis Cluster."""
    b = RedisBroker.from_url(redis_cluster.url)
    b.flush_all()
    yield b
    b.close()


def test_workflows_are_refused_on_cluster_with_a_clear_error(broker: Broker) -> None:
    from conveyor import Conveyor, chain
    from conveyor.errors import ValidationError

    app = Conveyor(broker)

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(ValidationError, match="workflow"):
        chain(add.partial(1, 2), add.partial(3)).enqueue()
    assert broker.counts().get("default", {}).get("pending", 0) == 0  # nothing half-stored
