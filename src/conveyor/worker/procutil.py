"""Process-level facts shared by the supervisor and worker processes: exit codes and RSS.

Standard library only (``os``, ``sys`` and, as a fallback, ``resource``), because the lean
supervisor process (``python -m conveyor.worker.supervisor``) imports it: nothing here may pull
in the worker, the broker or ``typing``.
"""

from __future__ import annotations

import os

# Exit codes of a worker process (``Worker.run()`` returns them; the supervisor reads them).
EXIT_OK = 0  # stopped (signal, stop(), or a memory recycle the supervisor asked for)
EXIT_APP = 2  # the app cannot be imported
EXIT_RECYCLE = 3  # --max-jobs-per-child reached: start a fresh process
EXIT_STUCK = 4  # a job ignored its timeout: start a fresh process
EXIT_CONFIG = 5  # the broker refused the credentials / configuration: do not restart
EXIT_UNGUARDED_MAIN = 6  # a process-pool child re-ran a script without a __main__ guard
EXIT_STOPPED = 7  # an operator stopped this worker (dashboard, control.py): do not restart it

# Set by the supervisor for its children: "<host>:<supervisor pid>:<start time>" names one
# ``conveyor worker`` invocation (its heartbeats carry it as ``group``), and its process count.
# An operator's Stop / Quiet of the group reaches every child, restarted ones included.
GROUP_ENV = "CONVEYOR_WORKER_GROUP"
PROCESSES_ENV = "CONVEYOR_WORKER_PROCESSES"


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process (this one by default), in bytes; 0 if unknown."""
    try:
        with open(f"/proc/{pid or 'self'}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        if pid is not None:
            return 0
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
