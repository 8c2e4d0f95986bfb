"""The seed exercises, done with Conveyor (tests/seeds/seed*.py), give the outcomes they state.

Each example exposes its scenario as functions returning the observed facts; these tests
assert what the exercise says must happen. The last test runs every script as a user would.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SEEDS = Path(__file__).resolve().parent
ROOT = SEEDS.parents[1]
SCRIPTS = [
    "seed000_state_machine.py",
    "seed001_retry_backoff.py",
    "seed002_priority_pool.py",
    "seed004_visibility_timeout.py",
]


def load(name: str) -> ModuleType:
    """Import a seed script by path (as a user runs it, not as a package module)."""
    path = SEEDS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"conveyor_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------- seed 000
@pytest.fixture(scope="module")
def seed000() -> dict[str, dict[str, Any]]:
    return load("seed000_state_machine").run_scenario()


def test_000_example_1_success(seed000: dict[str, dict[str, Any]]) -> None:
    f = seed000["example_1"]
    assert f["returns"] == [(0, True)]
    assert f["state"] == "completed" and f["seed_state"] == "succeeded"
    assert f["attempts"] == 1 and f["calls"] == 1
    assert f["payload_seen"] == {"to": "a@x.com"}


def test_000_example_2_transient_then_success(seed000: dict[str, dict[str, Any]]) -> None:
    f = seed000["example_2"]
    # fails at t=0 (retry at t=5), nothing runnable at t=4, succeeds at t=5
    assert f["returns"] == [(0, True), (4, False), (5, True)]
    assert f["after_first"] == {"state": "retry_scheduled", "attempts": 1, "next_attempt_at": 5.0}
    assert f["state"] == "completed" and f["seed_state"] == "succeeded"
    assert f["attempts"] == 2 and f["calls"] == 2
    assert f["errors"] == [(1, "error", "smtp timeout")]


def test_000_example_3_permanent_error(seed000: dict[str, dict[str, Any]]) -> None:
    f = seed000["example_3"]
    assert f["returns"] == [(0, True)]
    assert f["state"] == "dead_letter" and f["attempts"] == 1 and f["calls"] == 1
    assert "invalid recipient address 'nobody@'" in f["last_error"]
    assert f["errors"][0][1] == "permanent"


def test_000_retry_cap_then_dead_letter(seed000: dict[str, dict[str, Any]]) -> None:
    f = seed000["exhausted"]
    # max_retries=3: the first run plus 3 retries, 5 s apart; the next failure is final
    assert f["call_times"] == [0, 5, 10, 15]
    assert f["returns"][-1] == (20, False)
    assert f["state"] == "dead_letter" and f["attempts"] == 4
    assert "upstream 503" in f["last_error"]


@pytest.mark.parametrize("case", ["example_1", "example_2", "example_3", "exhausted"])
def test_000_finished_jobs_never_run_again(seed000: dict[str, dict[str, Any]], case: str) -> None:
    f = seed000[case]
    assert f["state"] in ("completed", "dead_letter")
    assert f["rerun_returned"] is False
    assert f["calls_after_rerun"] == f["calls"]
    assert f["state_after_rerun"] == f["state"]


# ---------------------------------------------------------------------------- seed 001
@pytest.fixture(scope="module")
def seed001() -> dict[str, dict[str, Any]]:
    return load("seed001_retry_backoff").run_scenario()


def test_001_tarea_ok(seed001: dict[str, dict[str, Any]]) -> None:
    f = seed001["tarea_ok"]
    assert f["status"]["state"] == "DONE" and f["status"]["conveyor_state"] == "completed"
    assert f["status"]["attempts"] == 1
    assert f["calls"] == 1


def test_001_reintentos_con_backoff_at_exact_times(seed001: dict[str, dict[str, Any]]) -> None:
    f = seed001["reintentos_con_backoff"]
    steps = dict(f["steps"])
    first = steps["tick at t=0"]
    assert (first["state"], first["attempts"], first["retries_left"]) == ("RETRY", 1, 1)
    assert first["next_run_at"] == 1.0  # delay_inicial
    assert f["ran_early"] is False
    assert steps["tick at t=0 again"]["attempts"] == 1
    second = steps["tick at t=1"]
    assert (second["state"], second["attempts"], second["retries_left"]) == ("RETRY", 2, 0)
    assert second["next_run_at"] == 3.0  # 1 + delay_inicial * factor
    done = steps["tick at t=3"]
    assert (done["state"], done["attempts"]) == ("DONE", 3)
    assert f["call_times"] == [0.0, 1.0, 3.0]


def test_001_agota_reintentos_y_falla(seed001: dict[str, dict[str, Any]]) -> None:
    f = seed001["agota_reintentos"]
    assert f["first"]["state"] == "RETRY"
    assert f["final"]["state"] == "FAILED" and f["final"]["conveyor_state"] == "dead_letter"
    assert f["final"]["attempts"] == 2 and f["final"]["retries_left"] == 0
    assert f["final"]["last_error"] == "ValueError: siempre"
    assert f["rerun"] is False
    assert f["dead_letters"] == [f["final"]["task_id"]]
    assert f["errors"] == 2


def test_001_excepcion_no_reintentable(seed001: dict[str, dict[str, Any]]) -> None:
    f = seed001["no_reintentable"]
    assert f["status"]["state"] == "FAILED" and f["status"]["attempts"] == 1
    assert f["status"]["retries_left"] == 3  # untouched: no retry was ever scheduled
    assert f["status"]["last_error"] == "KeyError: 'no reintentable'"
    assert f["error_kind"] == "permanent"


def test_001_metrics_from_stats(seed001: dict[str, dict[str, Any]]) -> None:
    f = seed001["metrics"]
    assert f["before"] == {"pending": 2, "retry": 0, "done": 0, "failed": 0, "total": 2}
    assert f["metrics"]["done"] == 1
    assert f["metrics"]["failed"] == 1
    assert f["metrics"]["total"] == 2
    assert f["a"]["state"] == "DONE" and f["b"]["state"] == "FAILED"


def test_001_fifo_respecting_next_run_at(seed001: dict[str, dict[str, Any]]) -> None:
    f = seed001["fifo"]
    assert f["order"] == [("t1", 0.0), ("t2", 0.0), ("t3", 0.0), ("t1", 1.0)]
    assert [ran for _, ran in f["ticks"]] == [True, True, True, False, True]
    assert f["metrics"]["done"] == 3 and f["metrics"]["total"] == 3


# ---------------------------------------------------------------------------- seed 002
@pytest.fixture(scope="module")
def seed002_module() -> ModuleType:
    return load("seed002_priority_pool")


@pytest.fixture(scope="module")
def seed002(seed002_module: ModuleType) -> dict[str, dict[str, Any]]:
    return seed002_module.run_scenario()


def test_002_priorities_lower_first(seed002: dict[str, dict[str, Any]]) -> None:
    f = seed002["priority"]
    assert f["submitted"] == [3, 1, 2]
    assert f["order"] == [1, 2, 3]


def test_002_concurrent_submit_all_run_once(seed002: dict[str, dict[str, Any]]) -> None:
    f = seed002["pool"]
    assert f["results"] == 200 and f["distinct_results"] == 200
    assert f["completed"] == 200


def test_002_retry_then_dead_letter(seed002: dict[str, dict[str, Any]]) -> None:
    f = seed002["pool"]
    assert f["failing_calls"] == 3  # max_attempts=3
    assert len(f["dead_letters"]) == 1
    failed = f["dead_letters"][0]
    assert failed["id"] == f["failing_id"] and failed["task"] == "always_fail"
    assert failed["attempts"] == 3
    assert failed["last_error"] == "RuntimeError: boom"
    assert failed["errors"] == [(n, "error", "boom") for n in (1, 2, 3)]
    # exponential backoff: waits of at least the scheduled delays (10 ms, then 20 ms, ±10 %)
    assert f["retry_gaps"][0] >= 0.008 and f["retry_gaps"][1] >= 0.016


def test_002_bounded_graceful_shutdown(seed002: dict[str, dict[str, Any]]) -> None:
    f = seed002["shutdown"]
    # the job running when stop() was called finished and was recorded
    assert f["finishes"]["state"] == "completed" and f["finishes"]["attempts"] == 1
    # the job that outlasted the timeout was handed back, without charging an attempt
    assert f["stuck"]["state"] == "pending" and f["stuck"]["attempts"] == 0
    assert f["stuck"]["history"] == ["released"]
    assert f["timeout"] <= f["stuck_released_after"] < f["timeout"] + 5.0
    assert f["run_exited"]
    # no new claims once draining: the queued jobs never started; nothing was dead-lettered
    assert f["queued"] == [{"state": "pending", "attempts": 0, "history": []}] * 2
    assert f["dead_letters"] == 0


def test_002_stop_returns_after_drain_or_timeout(seed002: dict[str, dict[str, Any]]) -> None:
    # docs/design.md section 11: stop(timeout) returns when the worker has drained or the timeout
    # passed; here a job outlasts the timeout, so it returns after about `timeout` seconds.
    f = seed002["shutdown"]
    assert f["timeout"] * 0.9 <= f["stop_call_seconds"] < f["timeout"] + 5.0
    assert f["run_alive_when_stop_returned"] is False


# ---------------------------------------------------------------------------- seed 004
@pytest.fixture(scope="module")
def seed004() -> dict[str, dict[str, Any]]:
    return load("seed004_visibility_timeout").run_scenario()


def test_004_enqueue_dequeue_ack(seed004: dict[str, dict[str, Any]]) -> None:
    f = seed004["basic"]
    assert f["delivered"] == {"id": f["job_id"], "payload": "hello", "delivery_count": 1}
    assert f["after_ack"] is None  # ack removed it from the queue
    assert f["state"] == "completed"


def test_004_idempotency_key_returns_same_id(seed004: dict[str, dict[str, Any]]) -> None:
    f = seed004["idempotency"]
    first_id, first_dup = f["first"]
    assert first_dup is False
    assert f["second"] == (first_id, True)
    assert f["pending_after_two"] == 1
    third_id, third_dup = f["third_after_ttl"]
    assert third_id != first_id and third_dup is False  # the key expired with its TTL


def test_004_redelivery_after_visibility_timeout(seed004: dict[str, dict[str, Any]]) -> None:
    f = seed004["redelivery"]
    assert f["first_delivery_count"] == 1
    assert f["visible_before_timeout"] is False
    assert f["reaped"] == 1
    assert f["redelivered_id"] == f["job_id"] and f["redelivered_payload"] == "x"
    assert f["second_delivery_count"] == 2
    assert f["zombie_ack"] == "LeaseLost"
    assert f["state_after_extend"] == "active"
    assert f["final_state"] == "completed"
    assert f["lost_deliveries"] == 1 and f["error_kinds"] == ["worker_lost"]


def test_004_nack_requeues(seed004: dict[str, dict[str, Any]]) -> None:
    f = seed004["nack"]
    assert f["state_after_nack"] == "pending"
    assert f["redelivered_id"] == f["job_id"]
    assert f["delivery_count"] == 2


def test_004_nack_with_delay(seed004: dict[str, dict[str, Any]]) -> None:
    f = seed004["nack_delay"]
    assert f["state_after_nack"] == "scheduled"
    assert f["visible_at_once"] is False and f["visible_just_before"] is False
    assert f["redelivered_id"] == f["job_id"] and f["delivery_count"] == 2
    assert f["final_state"] == "completed"


def test_004_poison_pill_dead_letters(seed004: dict[str, dict[str, Any]]) -> None:
    f = seed004["poison"]
    assert f["delivery_counts"] == [1, 2, 3]
    assert f["state"] == "dead_letter" and f["lost"] == 3 and f["in_dead_letters"]


# ---------------------------------------------------------------------------- scripts
def test_every_script_runs() -> None:
    failures = []
    for script in SCRIPTS:
        proc = subprocess.run(
            [sys.executable, str(SEEDS / script)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        if proc.returncode != 0 or not proc.stdout.startswith("Seed 00"):
            failures.append(f"{script}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    assert not failures, "\n\n".join(failures)
