"""Timeouts for the inline executor (``Worker.process_next``), enforced as the thread pool does.

A job with a timeout runs on a helper thread while the caller waits. At the deadline
``JobTimeout`` is raised inside that thread (as ``ThreadExecutor`` does); a job still running
``timeout_grace`` seconds later is *stuck*: its attempt is recorded as a timeout, the thread is
abandoned (a thread cannot be killed; its late result is discarded) and the worker's
``exit_code`` becomes ``EXIT_STUCK``, which under ``run()`` would recycle the process: a caller
driving ``process_next`` should treat it the same way. Jobs without a timeout run directly in the
caller's thread (no helper thread, exact under a fake clock).
"""

from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, Any

from .execute import Outcome, reported
from .executors import call_in_thread, interrupt_thread
from .running import Running

if TYPE_CHECKING:
    from ..broker.base import Lease
    from ..middleware import Around
    from ..task import Task

log = logging.getLogger("conveyor.worker")


def run_with_timeout(
    lease: Lease,
    task: Task[..., Any],
    timeout: float,
    now: float,
    grace: float,
    rng: random.Random,
    around: Around | None = None,
) -> tuple[Outcome, bool]:
    """Run the leased job with ``timeout`` seconds to finish; never raises.

    Returns the outcome and whether the job was stuck (ignored its timeout for ``grace`` s).
    """
    run = Running(lease, task, "thread", timeout)
    run.around = around
    box: list[tuple[Any, BaseException | None]] = []
    done = threading.Event()

    def target() -> None:
        box.append(call_in_thread(run))
        done.set()

    threading.Thread(target=target, name="conveyor-inline-job", daemon=True).start()
    if not done.wait(timeout):
        log.warning(
            "job %s (%s) passed its timeout of %gs: interrupting", run.job.id, run.job.task, timeout
        )
        interrupt_thread(run)
        if not done.wait(grace):
            run.settle()  # a result that arrives later is discarded
            run.stuck = True  # recorded as timed out (``reported``)
            log.error(
                "job %s (%s) ignored its timeout for %gs: recording it as timed out; "
                "its thread is abandoned and this worker should be recycled "
                "(exit_code EXIT_STUCK)",
                run.job.id,
                run.job.task,
                grace,
            )
            return reported(run, None, None, None, now, rng), True
    run.settle()
    result, exc = box[0]
    return reported(run, result, exc, None, now, rng), False
