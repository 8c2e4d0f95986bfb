"""A worker process the supervisor cannot start (``posix_spawn`` fails: the interpreter gone
after a deploy, EAGAIN or ENOMEM under pressure) is logged as one error line and retried with
the crash-loop backoff; the supervisor keeps running and still stops cleanly on SIGTERM.

It used to raise out of ``Supervisor.run()``: the supervisor died with a traceback, and with it
every other worker process of the group (they drain when their supervisor is gone).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from conveyor.worker.leanlog import LeanLogger
    from conveyor.worker.supervisor import Supervisor

    def later(signum, frame):
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGALRM, later)
    signal.setitimer(signal.ITIMER_REAL, 2.5)
    log = LeanLogger("conveyor.supervisor", "text", "info", stream=sys.stderr)
    sup = Supervisor("{}", 2, python="/nonexistent/python3", shutdown_timeout=1.0, log=log)
    code = sup.run()
    print("EXIT", code, "CRASHES", [c.crashes for c in sup.children])
    """
)


def test_a_failed_spawn_is_retried_and_the_supervisor_stops_cleanly() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("EXIT 0 CRASHES"), proc.stdout
    crashes = ast.literal_eval(last.split("CRASHES", 1)[1].strip())
    assert all(n >= 2 for n in crashes), crashes  # retried with backoff: 0.5 s, then 1 s
    errors = [line for line in proc.stderr.splitlines() if "could not start" in line]
    assert len(errors) == sum(crashes), proc.stderr[-3000:]
    assert "/nonexistent/python3" in errors[0]
