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
