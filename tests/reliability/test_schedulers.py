"""R6: three ``conveyor scheduler`` processes share an every-second schedule; every few seconds
the one that enqueued the latest tick is killed with SIGKILL and a fresh one is started in its
place. Pass: exactly one job per tick (none doubled) and no tick missing, for the whole run.

The app and the idea come from tests/scheduler/test_processes.py (one kill, a few ticks); this is
the longer version with repeated kills: 20 s with a kill every 5 s in the quick profile, 60 s
with a kill every 15 s (on Redis and on SQLite) in the soak profile.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.reliability.harness import checker_app, publish, sleep_until, wait_until
from tests.scheduler.test_processes import APP_MODULE

pytestmark = pytest.mark.slow

CONVEYOR = str(Path(sys.executable).parent / "conveyor")


def schedulers(
    name: str,
    url: str,
    tmp_path: Path,
    *,
    seconds: float,
    every: float,
    count: int = 3,
    seed: int = 6,
) -> None:
    """Run the scenario and assert the R6 pass criteria."""
    (tmp_path / "beat_app.py").write_text(APP_MODULE)
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": str(tmp_path)}
    started: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"scheduler-{len(logs)}.log"
        logs.append(log)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [CONVEYOR, "scheduler", "beat_app:app", "--interval", "0.2"],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        return proc

    reader = checker_app(url)

    def fires() -> Counter[float]:
        page = reader.search(task="beat", page_size=1000)
        assert page.pages <= 1
        return Counter(float(j.metadata["fire_at"]) for j in page.items)

    rng = random.Random(seed)
    kills = 0
    try:
        live = [start() for _ in range(count)]
        wait_until(lambda: len(fires()) >= 2, 60, "the first ticks")
        began = time.monotonic()
        end = began + seconds
        while (next_kill := began + every * (kills + 1)) < end:
            sleep_until(next_kill)
            # The scheduler that enqueued the latest tick (the one doing the work), if known.
            latest = next(
                (e for e in reader.schedules.history("beat", 50) if e["outcome"] == "enqueued"),
                None,
            )
            ids = [
                i
                for i, p in enumerate(live)
                if latest is not None and f"-{p.pid}-" in str(latest["scheduler"])
            ]
            victim = ids[0] if ids else rng.randrange(count)
            live[victim].send_signal(signal.SIGKILL)
            live[victim].wait(10)
            live[victim] = start()
            kills += 1
        sleep_until(end)
        stopped_at = time.time()
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(15) for proc in live]
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    output = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in logs)
    assert codes == [0] * count, output
    counts = fires()
    times = sorted(counts)
    doubled = {t: c for t, c in counts.items() if c != 1}
    missing = sorted(set(range(int(times[0]), int(times[-1]) + 1)) - {int(t) for t in times})
    publish(
        {
            "test": f"{name} ({url.split(':', 1)[0]})",
            "ticks": len(times),
            "kills": kills,
            "doubled": len(doubled),
            "missing": len(missing),
            "seconds": seconds,
        }
    )
    assert not doubled, f"doubled ticks: {doubled}"
    assert not missing, f"missing ticks: {missing}"
    assert all(t == int(t) for t in times)
    assert kills == int((seconds - 1e-9) // every)
    assert len(times) >= seconds  # the ticks cover the whole run ...
    assert times[-1] >= stopped_at - 3  # ... up to its end
    history = reader.schedules.history("beat", 1000)
    by_scheduler = Counter(e["scheduler"] for e in history if e["outcome"] == "enqueued")
    assert len(by_scheduler) >= 2, by_scheduler  # others took over from the killed ones
    reader.close()


def test_r6_schedulers(redis_url: str, tmp_path: Path) -> None:
    schedulers("R6 schedulers", redis_url, tmp_path, seconds=20, every=5)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_r6_schedulers_soak(shared_url: str, tmp_path: Path) -> None:
    schedulers("R6 schedulers soak", shared_url, tmp_path, seconds=60, every=15)
