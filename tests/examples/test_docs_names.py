"""Every environment variable, Prometheus metric and log field README.md and docs/*.md name is
real: the variable is read (setting it changes what the code does, or it is refused by name),
the metric is emitted with that name, type and labels, and the JSON log line has those keys;
operations.md's worker exit codes and tuning numbers are the constants that set them.

Each check parses the docs, so a doc that names something the code lacks, or code that emits a
metric the table does not list, fails here.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, PermanentError, configure_logging
from conveyor.config import ENV_VARIABLES, Settings
from conveyor.dashboard.security import DashboardConfig
from conveyor.errors import ValidationError
from conveyor.worker.logs import reset_logging

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SRC = ROOT / "src" / "conveyor"
#: names the docs spell that are not variables the library reads, and why
NOT_READ = {
    "CONVEYOR_VISIBILTY_TIMEOUT": "operations.md's example of a misspelt name (logged, below)",
    "CONVEYOR_SOAK": "the test suite's soak switch (tests/reliability/conftest.py reads it)",
}


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Settings.from_env`` warns once per process and name: keep these probes from using up
    warnings other tests (tests/core/test_settings.py) expect to see."""
    from conveyor import config

    monkeypatch.setattr(config, "_warned", set())


def documented_variables() -> set[str]:
    found = set()
    for doc in DOCS:
        found |= set(re.findall(r"\bCONVEYOR_[A-Z0-9_]*[A-Z0-9]\b", doc.read_text("utf-8")))
    return found


def _settings_reads(name: str) -> bool:
    """A settings variable with a value against its rule is refused naming it."""
    try:
        Settings.from_env({name: "-1e999x"})
    except ValidationError as exc:
        return name in str(exc)
    return False


#: dashboard variable suffix -> (a value, the DashboardConfig field it must set, to what)
_DASHBOARD = {
    "TOKEN": ("t" * 16, "token", "t" * 16),
    "USERNAME": ("ops", "username", "ops"),
    "PASSWORD": ("p" * 8, "password", "p" * 8),
    "SECRET": ("s3", "secret", b"s3"),
    "READ_ONLY": ("1", "read_only", True),
    "RATE_LIMIT": ("7", "rate_limit", 7.0),
    "ALLOWED_HOSTS": ("x.example", "allowed_hosts", ("x.example",)),
    "FORWARDED_ALLOW_IPS": ("10.0.0.1", "forwarded_allow_ips", ("10.0.0.1",)),
}


def _dashboard_reads(name: str) -> bool:
    """A dashboard variable sets its field of ``DashboardConfig.from_env``."""
    value, field, expected = _DASHBOARD.get(name.removeprefix("CONVEYOR_DASHBOARD_"), ("", "", 0))
    env = {"CONVEYOR_DASHBOARD_PASSWORD": "q" * 8, name: value or "x"}  # USERNAME needs one
    return bool(field) and getattr(DashboardConfig.from_env(env), field) == expected


def _flask_reads(name: str) -> bool:
    """A Flask config key: ``CONVEYOR_SETTINGS`` overrides the app's settings."""
    from flask import Flask

    from conveyor.contrib.flask import FlaskConveyor

    flask_app = Flask("docs")
    flask_app.config.update(CONVEYOR_URL="memory://", **{name: {"visibility_timeout": 31.0}})
    return FlaskConveyor().init_app(flask_app).settings.visibility_timeout == 31.0


def _alerts_read(name: str) -> bool:
    manager = Conveyor("memory://").alerts
    before = (len(manager.rules), len(manager.notifiers))
    value = '[{"type": "queue_depth", "threshold": 5}]' if name == "CONVEYOR_ALERTS" else ""
    manager.configure_from_env({name: value or "https://hooks.example/x"})
    return (len(manager.rules), len(manager.notifiers)) != before


def _read_in_source(name: str) -> bool:
    """A process-level switch: the source reads it from ``os.environ`` or as a click option's
    ``envvar`` (spelled out, or through a module constant holding the name)."""
    texts = [path.read_text("utf-8") for path in SRC.rglob("*.py")]
    spelled = [f'"{name}"']
    spelled += [c for t in texts for c in re.findall(rf'^([A-Z_]+) = "{name}"$', t, re.M)]
    reads = re.compile(rf"(environ\.get\(|envvar=|environ\[)({'|'.join(spelled)})(?!\w)")
    return any(reads.search(text) for text in texts)


def _probe(name: str) -> Callable[[str], bool]:
    if name in ENV_VARIABLES:
        return _settings_reads
    if name.startswith("CONVEYOR_DASHBOARD_"):
        return _dashboard_reads
    if name in ("CONVEYOR_ALERTS", "CONVEYOR_ALERT_WEBHOOK"):
        return _alerts_read
    if name == "CONVEYOR_SETTINGS":
        return _flask_reads
    return _read_in_source


@pytest.mark.parametrize("name", sorted(documented_variables() - set(NOT_READ)))
def test_every_documented_variable_is_read(name: str) -> None:
    assert _probe(name)(name), f"{name} is documented but nothing reads it"


def test_the_misspelt_example_is_logged_with_the_real_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="conveyor"):
        Settings.from_env({"CONVEYOR_VISIBILTY_TIMEOUT": "5"})
    assert "did you mean CONVEYOR_VISIBILITY_TIMEOUT" in caplog.text


def test_the_probes_catch_a_variable_nothing_reads() -> None:
    """The checks themselves: planted names that no code reads are caught by each probe."""
    for name in ("CONVEYOR_VISIBILITY_TIMEOUTS", "CONVEYOR_DASHBOARD_TOKENS", "CONVEYOR_ALERT"):
        assert not _probe(name)(name)
    assert not _settings_reads("CONVEYOR_RETENTION_COMPLETED")
    assert _read_in_source("CONVEYOR_WORKER_EXEC") and _read_in_source("CONVEYOR_APP")


# ---------------------------------------------------------------------- Prometheus
def documented_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    """monitoring.md's table: name -> (type, labels)."""
    text = (ROOT / "docs" / "monitoring.md").read_text("utf-8")
    section = text.split("### Prometheus", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(conveyor_\w+)` \| (\w+) \| (.*) \|$", section, re.M)
    return {
        name: (kind, tuple(re.findall(r"`(\w+)`", re.sub(r"\(.*?\)", "", labels))))
        for name, kind, labels in rows
    }


def emitted_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    """What a scrape of a memory app with every kind of data returns."""
    from conveyor.monitoring.prometheus import registry_for

    clock = FakeClock(1_700_000_000.0)
    app = Conveyor("memory://", clock=clock)
    app.alerts.add_rule({"type": "queue_depth", "threshold": 0})

    @app.task(rate_limit="10/s", concurrency=ConcurrencyLimit(1, key="k"))
    def limited(k: str) -> None:
        pass

    @app.task(fair_by="tenant")
    def fair(tenant: str) -> None:
        raise PermanentError("no")

    for i in range(3):
        limited.enqueue(f"k{i % 2}")
        fair.enqueue(f"t{i}")
    app.broker.claim(["default"], clock.now(), limit=1)  # one slot taken, the rest waiting
    app.worker(["default"]).process_next()
    app.alerts.evaluate(clock.now())
    found = {}
    for family in registry_for(app).collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        found[name] = (family.type, tuple(sorted(labels)))
    return found


def test_every_metric_of_the_table_is_emitted_and_nothing_else() -> None:
    documented = {k: (t, tuple(sorted(lbl))) for k, (t, lbl) in documented_metrics().items()}
    assert len(documented) >= 16
    assert emitted_metrics() == documented


# ---------------------------------------------------------------------- log fields
def documented_log_keys() -> list[set[str]]:
    """The keys of each JSON log line operations.md shows."""
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    section = text.split("## Logs", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```json\n(.*?)^```", section, re.M | re.S)
    return [set(json.loads(block)) for block in blocks]


def test_the_json_log_lines_have_the_documented_keys() -> None:
    job_line, handler_line = documented_log_keys()
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    failure_keys = set(
        re.findall(r"`(\w+)`", text.split("Failures add ", 1)[1].split(" the traceback", 1)[0])
    )
    app = Conveyor("memory://")
    log = logging.getLogger("myapp.billing")

    @app.task
    def charge(amount: str) -> None:
        log.info("charged %s", amount)
        if amount == "bad":
            raise PermanentError("card declined")

    stream = io.StringIO()
    configure_logging("json", "DEBUG", stream=stream)
    try:
        charge.enqueue("12.00")
        charge.enqueue("bad")
        app.worker().run_until_idle()
    finally:
        reset_logging()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    outcomes = {
        line.get("outcome"): set(line) for line in lines if line["logger"] == "conveyor.worker"
    }
    handler = [set(line) for line in lines if line["logger"] == "myapp.billing"]
    assert job_line <= outcomes["completed"]
    assert job_line | failure_keys <= outcomes["dead_letter"]
    assert failure_keys == {"error_kind", "error", "message", "exc"}
    assert handler and all(handler_line <= keys for keys in handler)


def test_the_worker_exit_codes_are_the_code_s() -> None:
    """operations.md's exit codes of a worker process are the ``EXIT_*`` constants (6 is a
    process-pool child's own code, never a worker process's: see worker/mainguard.py)."""
    from conveyor.worker import procutil

    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    section = text.split("**Exit codes of a worker process**", 1)[1].split("\n\n", 1)[0]
    documented = {int(n) for n in re.findall(r"(?:^: |; |\. )(\d) ", section)}
    documented |= {int(n) for n in re.findall(r"\b(\d): an operator", section)}
    codes = {v for k, v in vars(procutil).items() if k.startswith("EXIT_")}
    assert documented == codes - {procutil.EXIT_UNGUARDED_MAIN}


def test_the_numbers_operations_md_states_are_the_code_s() -> None:
    """Each tuning number operations.md states, built from the constant that sets it."""
    from conveyor import AutoBatch
    from conveyor.broker.jobdocs import CANCEL_TTL
    from conveyor.worker import recorder, slots
    from conveyor.worker.cancel import WATCH_INTERVAL

    s = Settings()
    text = " ".join((ROOT / "docs" / "operations.md").read_text("utf-8").split())
    stated = [
        f"or a free slot has waited {slots.LINGER * 1000:g} ms)",
        f"at most `max(concurrency / 4, {slots.MIN_BATCH})` jobs per call",
        f"keeps retrying it, every ≤ {recorder.MAX_DELAY:g} s,",
        f"requests every {WATCH_INTERVAL:g} s",
        f"by the job id, kept {CANCEL_TTL / 3600:g} h)",
        f"`CONVEYOR_HEARTBEAT_INTERVAL` ({s.heartbeat_interval:g} s)",
        f"disappears within {2 * s.heartbeat_interval:g} s",
        f"`CONVEYOR_POLL_INTERVAL` ({s.poll_interval:g} s)",
        f"`reap_interval` (default {s.reap_interval:g} s)",
        f"`CONVEYOR_TIMEOUT_GRACE` seconds (default {s.timeout_grace:g})",
        f"`visibility_timeout` ({s.visibility_timeout:g} s with the defaults)",
        f"`max_lost` times (default {s.max_lost})",
        f"the default `max_delay={AutoBatch().max_delay:g}` never waits for company",
    ]
    assert [claim for claim in stated if claim not in text] == []
