"""Conveyor: background jobs for Python that are never lost.

Public names only; see DESIGN.md and docs/ for the semantics.
"""

from .app import Conveyor
from .broker.base import Broker, Page
from .core.backoff import Backoff
from .core.clock import Clock, FakeClock, SystemClock
from .core.job import ErrorKind, Job
from .core.state import JobState
from .errors import (
    BrokerUnavailable,
    ConveyorError,
    DuplicateJob,
    IllegalTransition,
    JobNotFound,
    JobTimeout,
    LeaseLost,
    PayloadTooLarge,
    PermanentError,
    Retry,
    UnknownTask,
    ValidationError,
)
from .handles import Delivery, JobHandle
from .middleware import Middleware
from .task import JobSpec, Task

__all__ = [
    "Backoff", "Broker", "BrokerUnavailable", "Clock", "Conveyor", "ConveyorError", "Delivery",
    "DuplicateJob", "ErrorKind", "FakeClock", "IllegalTransition", "Job", "JobHandle",
    "JobNotFound", "JobSpec", "JobState", "JobTimeout", "LeaseLost", "Middleware", "Page",
    "PayloadTooLarge", "PermanentError", "Retry", "SystemClock", "Task", "UnknownTask",
    "ValidationError",
]  # fmt: skip
