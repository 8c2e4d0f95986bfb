"""``executor="process"`` in a script without ``if __name__ == "__main__":`` is detected.

The pool's children re-import the main script; one that starts a worker at import time must
not run (and dead-letter) jobs there: the worker explains the missing guard once, releases the
jobs without charging them and stops.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conveyor import Conveyor

SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    from conveyor import Conveyor

    app = Conveyor("sqlite:///jobs.db")

    @app.task(executor="process", max_attempts=1)
    def square(x: int) -> int:
        return x * x

    square.enqueue(3)
    worker = app.worker(handle_signals=False)  # no __main__ guard: the mistake under test
    code = worker.run()
    print(json.dumps({"exit_code": code}))
""")


def test_unguarded_script_is_explained_and_its_jobs_released(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["exit_code"] == 5, proc.stderr[-3000:]  # stopped (EXIT_CONFIG), not serving
    assert proc.stderr.count('if __name__ == "__main__":') >= 1
    assert proc.stderr.count("missing its `if __name__") == 1, proc.stderr[-3000:]
    assert "bootstrapping phase" not in proc.stderr
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    jobs = app.search().items
    assert jobs, "the script's job is stored"
    for job in jobs:  # released, not dead-lettered, not charged
        assert (str(job.state), job.attempts, job.errors) == ("pending", 0, []), job
    app.close()
