"""What the workflow package needs of its app's runtime (a Protocol: no import of
``conveyor.runtime``, which imports the producer, which checks for an open batch)."""

from __future__ import annotations

import random
from typing import Any, Protocol

from ..broker.base import Broker
from ..config import Settings


class FlowHost(Protocol):
    """``conveyor.runtime.Runtime`` as the workflow package sees it."""

    broker: Broker
    settings: Settings
    producer: Any
    owner: Any
    id_rng: random.Random

    def now(self) -> float:
        """The current time."""
        ...
