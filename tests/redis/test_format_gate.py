"""The ready-member format gate (issue 18): fresh members ``<seq>.<id>`` only once ``<p>:format``
says every worker understands them.

A worker of the previous version parses ready members with ``^%x{16}:.``; a ``.`` member does not
match, so it looks for ``job:<seq>.<id>``, finds nothing and drops the entry: the job is lost. So
enqueue writes ``.`` members only when the gate is on: set by ``conveyor migrate`` (after every
worker runs this version) or, on a fresh deployment (nothing stored yet), by the first process.
A producer re-reads the gate at most every 30 s (``FormatGate``, injectable clock).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from conveyor.broker.records import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.fmtgate import REFRESH_SECONDS
from conveyor.core.clock import FakeClock
from conveyor.core.job import Job
from tests.cli.conftest import run

from .conftest import T0

ROOT = Path(__file__).resolve().parents[2]
#: the last commit before fresh members (main when branch s9-rdrain started)
OLD_COMMIT = "bf6b91254bfe986a4e4e70d1f2b236130789fe79"
COLON = re.compile(rb"^[0-9a-f]{16}:")
DOT = re.compile(rb"^[0-9a-f]{16}\.")


def _job(job_id: str, **kw: Any) -> Job:
    return Job(id=job_id, task="mod.work", queue="default", created_at=T0, run_at=T0, **kw)


def _members(broker: RedisBroker) -> dict[str, bytes]:
    """id -> ready member of every pending job of queue ``default``."""
    out = {}
    for member in broker.client.zrange(broker.keys.queue_key("default", "ready"), 0, -1):
        out[member[17:].decode()] = member
    return out


def _existing_deployment(broker: RedisBroker) -> None:
    """A server an earlier version used: a registered queue, no format key."""
    broker.client.sadd(broker.keys.queues, "default")


def test_an_existing_deployment_keeps_colon_members(rbroker: RedisBroker) -> None:
    _existing_deployment(rbroker)
    rbroker.enqueue([_job("one")], T0)  # enqueue_one.lua
    rbroker.enqueue([_job("b1"), _job("b2")], T0)  # enqueue.lua
    members = _members(rbroker)
    assert sorted(members) == ["b1", "b2", "one"]
    assert all(COLON.match(m) for m in members.values()), members
    assert rbroker.client.get(rbroker.keys.format) is None  # nobody turned it on


def test_a_fresh_server_turns_the_gate_on_at_the_first_enqueue(rbroker: RedisBroker) -> None:
    rbroker.enqueue([_job("one")], T0)
    rbroker.enqueue([_job("b1"), _job("b2")], T0)
    assert rbroker.client.get(rbroker.keys.format) == b"2"
    assert all(DOT.match(m) for m in _members(rbroker).values())


def test_a_fresh_server_whose_first_process_is_a_new_worker_turns_it_on(
    rbroker: RedisBroker, redis_server: Any
) -> None:
    rbroker.docs.put("workers", "w-new", {"pid": 1}, T0, ttl=60)  # a worker's presence
    producer = RedisBroker.from_url(redis_server.url)
    producer.enqueue([_job("one")], T0)
    assert DOT.match(_members(producer)["one"])


def test_an_older_workers_document_keeps_the_gate_off(rbroker: RedisBroker) -> None:
    # what an earlier version's worker leaves: its document, no format key
    rbroker.client.sadd(rbroker.keys.doc_index("workers"), "w-old")
    rbroker.enqueue([_job("one")], T0)
    assert COLON.match(_members(rbroker)["one"])
    assert rbroker.client.get(rbroker.keys.format) is None


def test_migrate_turns_it_on_and_a_running_producer_follows_within_the_refresh_interval(
    rbroker: RedisBroker, redis_server: Any
) -> None:
    _existing_deployment(rbroker)
    clock = FakeClock(100.0)
    producer = RedisBroker.from_url(redis_server.url)
    producer.gate.clock = clock.now
    producer.enqueue([_job("before")], T0)
    operator = RedisBroker.from_url(redis_server.url)
    assert operator.migrate_format() == {
        "backend": "redis",
        "key": "conveyor:format",
        "found": "1",
        "version": "2",
        "migrated": True,
        "behind": False,
    }
    clock.advance(REFRESH_SECONDS - 1)
    producer.enqueue([_job("not_yet")], T0)
    producer.enqueue([_job("not_yet_b1"), _job("not_yet_b2")], T0)
    clock.advance(1)
    producer.enqueue([_job("after")], T0)
    producer.enqueue([_job("after_b1"), _job("after_b2")], T0)
    operator.enqueue([_job("operator")], T0)  # the process that migrated: at once
    members = _members(rbroker)
    for name in ("before", "not_yet", "not_yet_b1", "not_yet_b2"):
        assert COLON.match(members[name]), name
    for name in ("after", "after_b1", "after_b2", "operator"):
        assert DOT.match(members[name]), name


def test_an_unknown_format_value_is_left_alone_and_keeps_fresh_members_off(
    rbroker: RedisBroker, redis_server: Any
) -> None:
    rbroker.client.set(rbroker.keys.format, "3")  # a later version's value
    out = run("migrate", "--url", redis_server.url)
    assert "redis: ready-member format '3' is not this version's (2): left as is" in out.output
    assert rbroker.client.get(rbroker.keys.format) == b"3"
    rbroker.enqueue([_job("one")], T0)
    assert COLON.match(_members(rbroker)["one"])


def test_migrate_check_does_not_write(rbroker: RedisBroker) -> None:
    _existing_deployment(rbroker)
    out = rbroker.migrate_format(check=True)
    assert out["found"] == "1" and out["behind"] is True and out["migrated"] is False
    assert rbroker.client.get(rbroker.keys.format) is None


@pytest.fixture
def old_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source tree of the previous version (before fresh members): $CONVEYOR_OLD_SRC, the
    A/B base tree, or extracted from git."""
    for candidate in (os.environ.get("CONVEYOR_OLD_SRC"), "/tmp/s9-rdrain_base/src"):
        if candidate and (Path(candidate) / "conveyor").is_dir():
            return Path(candidate)
    dest = tmp_path_factory.mktemp("old_tree")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", OLD_COMMIT, "src"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        pytest.skip(f"the previous version's tree is not available: {archive.stderr[:200]!r}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest / "src"


_OLD_WORKER = """
import sys, orjson
from conveyor.broker.records import Ack
from conveyor.broker.redis import RedisBroker
broker = RedisBroker.from_url(sys.argv[1])
leases = broker.claim(["default"], float(sys.argv[2]), limit=100, worker_id="old-worker")
print(orjson.dumps([lease.job.id for lease in leases]).decode())
"""


def _old_worker_claims(old_src: Path, url: str) -> list[str]:
    """One claim by a worker process of the previous version (its own tree on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(old_src)}
    done = subprocess.run(
        [sys.executable, "-c", _OLD_WORKER, url, str(T0 + 1)],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    ids: list[str] = orjson.loads(done.stdout)
    return ids


def test_an_older_worker_claims_every_job_this_version_enqueues_with_the_gate_off(
    rbroker: RedisBroker, redis_server: Any, old_src: Path
) -> None:
    """The rolling deploy: new producers, old workers. With the gate off every job reaches the
    old worker. With the gate on (after migrate) the old worker DROPS them -- the reason the
    gate exists and why ``conveyor migrate`` waits until every worker runs this version."""
    _existing_deployment(rbroker)
    rbroker.enqueue([_job("single")], T0)
    rbroker.enqueue([_job(f"bulk-{i}") for i in range(20)], T0)
    claimed = _old_worker_claims(old_src, redis_server.url)
    assert sorted(claimed) == sorted(["single"] + [f"bulk-{i}" for i in range(20)])
    assert _members(rbroker) == {}

    rbroker.migrate_format()
    rbroker.enqueue([_job("lost-1")], T0)
    rbroker.enqueue([_job("lost-2"), _job("lost-3")], T0)
    assert _old_worker_claims(old_src, redis_server.url) == []
    assert _members(rbroker) == {}  # dropped from the ready set: lost to every worker
    assert rbroker.get("lost-1").state.value == "pending"  # stranded: nothing will run it


def test_cli_migrate_sets_the_format_and_check_reports_it(
    rbroker: RedisBroker, redis_server: Any
) -> None:
    _existing_deployment(rbroker)
    url = redis_server.url
    before = run("migrate", "--url", url, "--check")
    assert before.exit_code == 1
    assert "redis: ready-member format 1 -> 2 (not migrated: --check)" in before.output
    assert rbroker.client.get(rbroker.keys.format) is None
    done = run("migrate", "--url", url)
    assert done.exit_code == 0
    assert "redis: ready-member format 1 -> 2" in done.output
    assert rbroker.client.get(rbroker.keys.format) == b"2"
    assert "redis: ready-member format 2 (current)" in run("migrate", "--url", url).output
    after = run("migrate", "--url", url, "--check", "--json")
    assert after.exit_code == 0
    assert orjson.loads(after.output) == {
        "backend": "redis",
        "key": "conveyor:format",
        "found": "2",
        "version": "2",
        "migrated": False,
        "behind": False,
    }


def test_on_a_cluster_the_gate_decides_the_members_and_both_kinds_run(redis_cluster: Any) -> None:
    """Redis Cluster: ``<p>:format`` lives in its own slot (read and written outside the job
    scripts); a fresh cluster turns it on, an existing one keeps ``:``, and jobs of both kinds
    are claimed and completed."""
    broker = RedisBroker.from_url(redis_cluster.url)
    broker.flush_all()
    try:
        broker.enqueue([_job("fresh")], T0)
        assert broker.client.get(broker.keys.format) == b"2"
        assert DOT.match(_members(broker)["fresh"])
        broker.flush_all()
        _existing_deployment(broker)
        broker.enqueue([_job("c1"), _job("c2")], T0)
        assert all(COLON.match(m) for m in _members(broker).values())
        assert broker.migrate_format()["migrated"] is True
        broker.enqueue([_job("d1"), _job("d2")], T0)
        assert [DOT.match(_members(broker)[i]) is not None for i in ("d1", "d2")] == [True, True]
        leases = broker.claim(["default"], T0, limit=10, visibility_timeout=30, worker_id="w")
        assert sorted(lease.job.id for lease in leases) == ["c1", "c2", "d1", "d2"]
        acks = [Ack(lease.job.id, lease.token) for lease in leases]
        assert broker.complete(acks, T0 + 1) == [True] * 4
        assert {broker.get(i).state.value for i in ("c1", "d1")} == {"completed"}  # type: ignore[union-attr]
    finally:
        broker.flush_all()
        broker.close()
