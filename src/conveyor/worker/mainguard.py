"""The missing ``if __name__ == "__main__":`` guard of scripts that use ``executor="process"``.

The process pool's children are started by multiprocessing (forkserver or spawn), which
re-imports the parent's main script in each child so that tasks defined there can be found.
A script that starts a worker at import time (no guard) would start a second worker inside
every pool child, which claims jobs of the shared broker and dead-letters them with
multiprocessing's "bootstrapping phase" ``RuntimeError``.

Both sides detect it: ``Worker.run()`` in a child that is still bootstrapping (and a process
pool asked to start there) exits at once with ``EXIT_UNGUARDED_MAIN``, before it can claim
anything; the parent's pool sees a child die with that code before it was ready and reports
``UnguardedMain`` for its jobs; the worker then logs one error explaining the fix, releases
the jobs uncharged and stops (``EXIT_CONFIG``).
"""

from __future__ import annotations

import os
import sys

from .procutil import EXIT_UNGUARDED_MAIN

HELP = (
    "this script starts a worker when it is imported, and executor='process' re-imports "
    "the main script in each pool child: put the code that enqueues and runs workers "
    'under `if __name__ == "__main__":`'
)


class UnguardedMain(RuntimeError):
    """The pool cannot run jobs: its children re-run a main script that lacks the guard."""


def in_bootstrapping_child() -> bool:
    """True inside a multiprocessing child that is still importing the parent's main module."""
    process = sys.modules.get("multiprocessing.process")  # not imported: not such a child
    if process is None:
        return False
    return bool(getattr(process.current_process(), "_inheriting", False))


def exit_unguarded() -> None:
    """Leave a pool child that re-ran an unguarded script, before it does anything else."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
    sys.stderr.write(f"conveyor: process pool child {os.getpid()} stopped: {main}: {HELP}\n")
    sys.stderr.flush()
    os._exit(EXIT_UNGUARDED_MAIN)


def explain() -> str:
    """The worker's one error message for a pool whose children re-run an unguarded script."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
    return (
        f'{main} is missing its `if __name__ == "__main__":` guard. executor="process" '
        "re-imports the main script in each pool child, and this one starts a worker when "
        "imported: put the code that enqueues and runs workers under the guard. Its jobs "
        "are released (not charged) and this worker stops."
    )


def is_bootstrap_error(exc: BaseException) -> bool:
    """multiprocessing's refusal to start a process from a child still bootstrapping."""
    return isinstance(exc, RuntimeError) and "bootstrapping phase" in str(exc)
