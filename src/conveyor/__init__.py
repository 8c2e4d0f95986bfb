"""Conveyor: background jobs for Python that are never lost.

Public names only; see docs/design.md for the semantics.

The names load on first use (PEP 562 ``__getattr__``): ``from conveyor import Conveyor`` works
as always, while a process that only needs a submodule (the lean supervisor process runs
``python -m conveyor.worker.supervisor``) does not pay for the app, the broker and ``typing``.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing would defeat the lazy loading
if TYPE_CHECKING:
    from .app import Conveyor, default_middleware
    from .broker.base import Broker, Page
    from .core.autobatch import AutoBatch
    from .core.backoff import Backoff
    from .core.clock import Clock, FakeClock, SystemClock
    from .core.flow import ConcurrencyLimit, RateLimit
    from .core.job import ErrorKind, Job
    from .core.state import JobState
    from .errors import (
        BrokerAuthError,
        BrokerConfigError,
        BrokerUnavailable,
        ConveyorError,
        DuplicateJob,
        IllegalTransition,
        JobCancelled,
        JobFailed,
        JobNotFound,
        JobTimeout,
        LeaseLost,
        PayloadTooLarge,
        PermanentError,
        RateLimited,
        Retry,
        StorageFull,
        UnknownTask,
        ValidationError,
        WaitTimeout,
    )
    from .handles import Delivery, JobHandle
    from .middleware import Middleware
    from .task import JobSpec, Task
    from .worker.jobctx import JobContext, current_job
    from .worker.logs import configure_logging
    from .workflow import (
        Workflow,
        WorkflowFailed,
        WorkflowHandle,
        WorkflowPending,
        chain,
        chord,
        group,
    )

# public name -> submodule that defines it
_EXPORTS = {
    "Conveyor": ".app",
    "default_middleware": ".app",
    "Broker": ".broker.base",
    "Page": ".broker.base",
    "AutoBatch": ".core.autobatch",
    "Backoff": ".core.backoff",
    "Clock": ".core.clock",
    "FakeClock": ".core.clock",
    "SystemClock": ".core.clock",
    "ErrorKind": ".core.job",
    "Job": ".core.job",
    "JobState": ".core.state",
    "BrokerUnavailable": ".errors",
    "ConveyorError": ".errors",
    "BrokerAuthError": ".errors",
    "BrokerConfigError": ".errors",
    "StorageFull": ".errors",
    "DuplicateJob": ".errors",
    "IllegalTransition": ".errors",
    "JobFailed": ".errors",
    "JobNotFound": ".errors",
    "JobTimeout": ".errors",
    "JobCancelled": ".errors",
    "LeaseLost": ".errors",
    "PayloadTooLarge": ".errors",
    "PermanentError": ".errors",
    "RateLimited": ".errors",
    "RateLimit": ".core.flow",
    "ConcurrencyLimit": ".core.flow",
    "Retry": ".errors",
    "UnknownTask": ".errors",
    "ValidationError": ".errors",
    "WaitTimeout": ".errors",
    "Delivery": ".handles",
    "JobHandle": ".handles",
    "Middleware": ".middleware",
    "JobSpec": ".task",
    "Task": ".task",
    "configure_logging": ".worker.logs",
    "Workflow": ".workflow",
    "WorkflowFailed": ".workflow",
    "WorkflowHandle": ".workflow",
    "WorkflowPending": ".workflow",
    "chain": ".workflow",
    "chord": ".workflow",
    "group": ".workflow",
    "current_job": ".worker.jobctx",  # issue 16
    "JobContext": ".worker.jobctx",
}

__all__ = [
    "AutoBatch",
    "Backoff",
    "Broker",
    "BrokerAuthError",
    "BrokerConfigError",
    "BrokerUnavailable",
    "Clock",
    "ConcurrencyLimit",
    "Conveyor",
    "ConveyorError",
    "Delivery",
    "DuplicateJob",
    "ErrorKind",
    "FakeClock",
    "IllegalTransition",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "JobTimeout",
    "LeaseLost",
    "Middleware",
    "Page",
    "PayloadTooLarge",
    "PermanentError",
    "RateLimit",
    "RateLimited",
    "Retry",
    "StorageFull",
    "SystemClock",
    "Task",
    "UnknownTask",
    "ValidationError",
    "WaitTimeout",
    "Workflow",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowPending",
    "chain",
    "chord",
    "configure_logging",
    "current_job",
    "default_middleware",
    "group",
]


def __getattr__(name: str) -> object:
    """Import the submodule defining the public ``name`` on first access (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """Module attributes plus the lazily loaded public names."""
    return sorted({*globals(), *__all__})
