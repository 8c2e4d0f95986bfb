"""The Lua scripts: headers, NOSCRIPT recovery after SCRIPT FLUSH, one Cluster slot per call."""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis
from conveyor.broker.base import Ack, SearchQuery
from conveyor.broker.flow import FlowEdge, FlowNode
from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.keys import KEYS_PER_QUEUE, key_slot
from conveyor.broker.redis.scripts import SCRIPT_NAMES, ScriptRunner
from conveyor.core.job import Job
from conveyor.core.serialization import encode_envelope
from conveyor.core.state import JobState

from .conftest import T0


def job(job_id: str, queue: str = "default", **kw: Any) -> Job:
    kw.setdefault("run_at", T0)
    return Job(id=job_id, task="t", queue=queue, created_at=T0, **kw)


def test_every_script_has_a_header() -> None:
    lua = resources.files("conveyor.broker.redis").joinpath("lua")
    files = {p.name for p in lua.iterdir() if p.name.endswith(".lua")}
    assert {f"{name}.lua" for name in SCRIPT_NAMES} <= files
    for name in SCRIPT_NAMES:
        text = lua.joinpath(f"{name}.lua").read_text()
        head = text.split("\n\n", 1)[0] if not text.startswith("--") else text[:3000]
        assert text.startswith(f"-- {name}.lua: "), name
        for part in (r"Input$", r"  KEYS:", r"  ARGV:", r"Output:"):
            assert re.search(rf"^-- {part}", head, re.M), f"{name}.lua header lacks {part}"


def test_noscript_after_script_flush_is_recovered(rbroker: RedisBroker) -> None:
    client = redis.Redis.from_url(rbroker.url)
    rbroker.enqueue([job("a"), job("b", queue="other"), job("c")], T0)
    client.script_flush()
    leases = rbroker.claim(["default", "other"], T0, limit=3)  # single EVALSHA path
    assert sorted(lease.id for lease in leases) == ["a", "b", "c"]
    client.script_flush()
    acks = [Ack(lease.id, lease.token) for lease in leases]
    assert rbroker.complete(acks, T0) == [True, True, True]  # pipelined path, two queues
    client.script_flush()
    assert rbroker.reap_expired(T0 + 1000) == 0
    sha = rbroker.runner.scripts["reap"].sha
    assert client.script_exists(sha) == [True]
    assert rbroker.counts()["default"]["completed"] == 2


class RecordingRunner(ScriptRunner):
    """Records the KEYS of every script call (the calls still go to the real server)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.seen: list[tuple[str, list[str]]] = []

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        self.seen.append((name, list(keys)))
        return super().run(name, keys, args)

    def _pipeline(self, calls: Sequence[Any]) -> list[Any]:
        self.seen.extend((c.name, list(c.keys)) for c in calls)
        return super()._pipeline(calls)


def test_every_script_call_touches_one_slot(rbroker: RedisBroker) -> None:
    recorder = RecordingRunner(rbroker.client)
    rbroker._runner = recorder
    b = rbroker
    b.enqueue([job("j1", idempotency_key="k"), job("j2"), job("j3", queue="mail")], T0)
    b.enqueue([job("later", state=_scheduled(), run_at=T0 + 5)], T0)
    leases = b.claim(["default", "mail"], T0, limit=3, worker_id="w")
    assert b.extend([(x.id, x.token) for x in leases], T0, 30) == [True] * 3
    b.complete([Ack(leases[0].id, leases[0].token, {"ok": 1})], T0)
    b.fail(leases[1].id, leases[1].token, T0, error={"kind": "error"}, retry_at=None)
    b.release(leases[2].id, leases[2].token, T0)
    running = b.claim(["default", "mail"], T0, limit=1, worker_id="w")[0]
    b.cancel_running(running.id, running.token, T0)  # issue 16
    b.promote_due(T0 + 10)
    b.reap_expired(T0 + 1000)
    b.cancel("later", T0)
    b.requeue(leases[1].id, T0)
    b.purge(T0, queue="default")
    b.clear_queue("mail", T0)
    b.enqueue([job("soon", state=_scheduled(), run_at=T0 + 50)], T0)
    b.enqueue([job("later2", state=_scheduled(), run_at=T0 + 50)], T0)
    assert b.replace_waiting("later2", job("later2", run_at=T0 + 60), T0)  # debounce.lua
    assert b.run_now("soon", T0) and b.delete_job("soon", T0)
    b.oldest_pending("default")
    assert b.search(SearchQuery(task="t", text="zzz")).total == 0
    b.doc_put("c", "d", {"x": 1}, T0)
    b.doc_update_if("c", "d", "x", 1, {"x": 2}, T0)
    b.flow_set_limit("rate:t", [1.0, 1.0, 1.0])  # flow_limit.lua, once per known queue
    # a workflow: its script declares only the index key (nodes may span queues: no Cluster)
    nodes = [job("w1"), job("w2", state=JobState.WAITING)]
    b.enqueue_workflow(
        nodes,
        [encode_envelope(n) for n in nodes],
        [FlowNode("w1", "wf", 0), FlowNode("w2", "wf", 1, "one")],
        [FlowEdge("w1", "w2")],
        T0,
    )
    b.cancel("w2", T0)  # a waiting node cancelled: its requeue gives it its parent's result
    b.complete([Ack(lease.id, lease.token) for lease in b.claim(["default"], T0, limit=9)], T0)
    assert b.requeue_node("w2", T0)
    used = {name for name, _ in recorder.seen}
    assert used == set(SCRIPT_NAMES), set(SCRIPT_NAMES) - used
    for name, keys in recorder.seen:
        # enqueue takes one group of KEYS_PER_QUEUE keys per queue: a multi-queue batch on a
        # standalone server is one atomic script; Redis Cluster only ever gets one group
        n = KEYS_PER_QUEUE
        groups = [keys[i : i + n] for i in range(0, len(keys), n)] if name == "enqueue" else [keys]
        for group in groups:
            assert len({key_slot(k) for k in group}) == 1, (name, group)
    # and every key in the database sits in the slot of its hash tag
    client = redis.Redis.from_url(rbroker.url)
    for key in client.scan_iter(match="conveyor:*"):
        tag = re.search(rb"\{([^}]*)\}", key)
        if tag:
            assert key_slot(key) == key_slot(tag.group(1)), key


def test_key_slot_matches_the_server(redis_cluster: Any) -> None:
    node = redis.Redis(port=redis_cluster.nodes[0].port)
    for key in ["conveyor:{default}:ready", "conveyor:{mail}:job:x{y}", "plain", "{}x", "a{b"]:
        assert key_slot(key) == node.cluster("KEYSLOT", key), key


def _scheduled() -> Any:
    from conveyor.core.state import JobState

    return JobState.SCHEDULED


def test_workflow_keys_built_in_lua_mirror_keys_py(rbroker: RedisBroker) -> None:
    """wf_qkeys (lua/_wf.lua) builds other queues' keys: they must be keys.py's."""
    lib = resources.files("conveyor.broker.redis").joinpath("lua", "_wf.lua").read_text()
    start = lib.index("local function wf_qkeys")
    body = lib[start : lib.index("\nend\n", start) + 5]
    script = (
        body
        + "local k = wf_qkeys(ARGV[1], ARGV[2])\n"
        + (
            "return {k.job, k.ready, k.scheduled, k.retry, k.leases, k.completed, k.dead,"
            " k.cancelled, k.seq, k.events, k.wake, k.paused, k.idem, k.payloads, k.expired,"
            " k.flow, k.waiting, k.wf}"
        )
    )
    client = redis.Redis.from_url(rbroker.url)
    got = [k.decode() for k in client.eval(script, 0, "conveyor", "mail")]
    schema = rbroker.keys
    n = len(schema.queue_keys("mail"))
    assert n == 16 and got[:n] == schema.queue_keys("mail")  # flow control's two included
    assert got[n] == schema.state_set("mail", "waiting")
    assert got[n + 1] + "x" == schema.wf_node("mail", "x")
