"""Module-level functions that tests register as ``executor="process"`` tasks (children import
them by module and name)."""

from __future__ import annotations

import os
import time


def pid() -> int:
    """The pid of the process that runs the job."""
    return os.getpid()


def sleep_then_pid(seconds: float) -> int:
    """Sleep in one C call, then return the pid."""
    time.sleep(seconds)
    return os.getpid()


def square(x: int) -> int:
    """A CPU-bound stand-in."""
    return x * x


def die() -> None:
    """Kill the process that runs the job."""
    os._exit(13)


def fail(message: str) -> None:
    """Raise a plain error."""
    raise ValueError(message)


async def async_pid() -> int:
    """An async function run in a child process."""
    return os.getpid()


def retry_in(delay: float) -> None:
    """Ask for a retry ``delay`` seconds later."""
    from conveyor.errors import Retry

    raise Retry(delay=delay, reason="later")


def _refuse() -> None:
    raise RuntimeError("this value cannot be rebuilt here")


class Unloadable:
    """Pickles in the child, but unpickling it (in the worker) raises."""

    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_refuse, ())


def unloadable() -> Unloadable:
    """Return a value the worker cannot receive."""
    return Unloadable()


class Unprintable(Exception):
    """An exception whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


def unprintable() -> None:
    """Raise an exception that cannot describe itself."""
    raise Unprintable()


def unpicklable() -> object:
    """Return a value that cannot be pickled (a lock)."""
    import threading

    return threading.Lock()


class NotFound(Exception):
    """A permanent error with a two-argument ``__init__``: pickle cannot rebuild it from its
    ``args`` (the usual way custom exceptions are written)."""

    def __init__(self, what: str, where: str) -> None:
        super().__init__(f"{what} not found in {where}")
        self.what, self.where = what, where


class Gone(NotFound):
    """Subclass of a ``PermanentError`` mix-in, below."""


def lookup(what: str) -> None:
    """Raise ``PermanentGone`` (a PermanentError) with a two-argument ``__init__``."""
    raise PermanentGone(what, "the catalogue")


def _permanent() -> type:
    from conveyor.errors import PermanentError

    return PermanentError


class PermanentGone(Gone, _permanent()):  # type: ignore[misc]
    """A ``PermanentError`` that pickle cannot rebuild from its ``args``."""


def own_cancelled() -> None:
    """Raise ``asyncio.CancelledError`` from the job's own code (no one cancelled it)."""
    import asyncio

    raise asyncio.CancelledError("the job's own cancelled future")


def unrebuildable(message: str) -> None:
    """Raise an exception the worker cannot rebuild: its class is local to this call (pickle
    finds classes by name) and it holds a lock (so rebuilding it from its attributes fails)."""
    import threading

    class UpstreamError(Exception):
        pass

    exc = UpstreamError(message + " name-\udcff.txt")  # plus a lone surrogate (os.listdir)
    exc.lock = threading.Lock()  # type: ignore[attr-defined]
    raise exc


def unrebuildable_permanent(kind: str) -> None:
    """Raise an exception the worker cannot rebuild whose class is a ``PermanentError``
    (``kind="permanent"``) or a ``LookupError`` (``kind="lookup"``)."""
    import threading

    from conveyor.errors import PermanentError

    base: type[Exception] = PermanentError if kind == "permanent" else LookupError

    class Refused(base):  # type: ignore[valid-type,misc]
        pass

    exc = Refused("no such thing")
    exc.lock = threading.Lock()  # type: ignore[attr-defined]
    raise exc
