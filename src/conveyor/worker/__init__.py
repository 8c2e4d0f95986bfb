"""Workers: claim jobs through the broker protocol, run them, record outcomes.

``Worker`` loads on first use (PEP 562), so ``python -m conveyor.worker.supervisor`` and
``python -m conveyor.worker.child`` do not import the worker loop through this package.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing would defeat the lazy loading
if TYPE_CHECKING:
    from .loop import Worker

__all__ = ["Worker"]


def __getattr__(name: str) -> object:
    """Import ``Worker`` from ``conveyor.worker.loop`` on first access (PEP 562)."""
    if name == "Worker":
        from .loop import Worker

        return Worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
