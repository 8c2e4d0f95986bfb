"""The format gate's auto-enable against an older worker starting at the same moment.

On a brand-new Redis shared by two versions, the first process of this version turns
``<p>:format`` on only if nothing was ever registered (no queue, no worker document). That check
and the write must be ONE step: an older worker that registers between them (its document and
its queue) would otherwise find the gate on and drop every fresh ``.`` member it claims. Here a
real worker process of the previous tree registers just before this version's write of the
gate (whatever command carries it), then claims.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor.broker.redis import RedisBroker

from .conftest import T0
from .test_format_gate import COLON, _job, _members, _old_worker_claims, old_src  # noqa: F401

#: what an older worker does first: its presence document, then its queue in the registry
_OLD_WORKER_STARTS = """
import sys
from conveyor.broker.redis import RedisBroker
broker = RedisBroker.from_url(sys.argv[1])
broker.docs.put("workers", "old-worker", {"pid": 1}, float(sys.argv[2]), ttl=600)
broker.register(["default"])
"""

#: commands that may write the gate (a plain SET, or a script that checks and sets)
_WRITES = frozenset({"SET", "SETNX", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL"})


def _text(arg: Any) -> str:
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def _old_worker_starts(old_src: Path, url: str) -> None:  # noqa: F811
    env = {**os.environ, "PYTHONPATH": str(old_src)}
    subprocess.run(
        [sys.executable, "-c", _OLD_WORKER_STARTS, url, str(T0)],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )


def _just_before_the_gate_write(
    broker: RedisBroker, monkeypatch: pytest.MonkeyPatch, act: Any
) -> list[str]:
    """Run ``act`` once, right before ``broker`` sends the first command that could write
    ``<p>:format``; returns a list that names that command once ``act`` ran."""
    client: Any = broker.client
    real = client.execute_command
    key = broker.keys.format
    fired: list[str] = []

    def execute_command(*args: Any, **options: Any) -> Any:
        name = _text(args[0]).upper()
        if not fired and name in _WRITES and key in map(_text, args[1:]):
            fired.append(name)
            act()
        return real(*args, **options)

    monkeypatch.setattr(client, "execute_command", execute_command)
    return fired


def test_an_older_worker_registering_as_the_gate_is_decided_keeps_it_off(
    rbroker: RedisBroker,
    redis_server: Any,
    old_src: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = redis_server.url
    producer = RedisBroker.from_url(url)
    try:
        fired = _just_before_the_gate_write(
            producer, monkeypatch, lambda: _old_worker_starts(old_src, url)
        )
        producer.enqueue([_job("one")], T0)  # enqueue_one.lua
        producer.enqueue([_job("b1"), _job("b2")], T0)  # enqueue.lua
    finally:
        producer.close()
    assert fired, "this version never tried to turn the gate on (not a fresh server?)"
    assert rbroker.client.sismember(rbroker.keys.queues, "default")  # the old worker registered
    assert rbroker.client.get(rbroker.keys.format) is None, "the gate turned on over an old worker"
    assert all(COLON.match(m) for m in _members(rbroker).values())
    claimed = _old_worker_claims(old_src, url)
    assert sorted(claimed) == ["b1", "b2", "one"]  # with the gate on it drops them all


def test_a_fresh_server_with_no_other_process_still_turns_the_gate_on(
    rbroker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard on the other side: nobody races, the first process of this version turns
    the gate on in the same step that found the server pristine."""
    fired = _just_before_the_gate_write(rbroker, monkeypatch, lambda: None)
    rbroker.enqueue([_job("one")], T0)
    assert fired
    assert rbroker.client.get(rbroker.keys.format) == b"2"
    assert all(not COLON.match(m) for m in _members(rbroker).values())


def test_a_worker_document_of_any_version_alone_keeps_the_gate_off(
    rbroker: RedisBroker, redis_server: Any
) -> None:
    """A worker document (even a later version's, with fields this one does not know) and
    no queue: the server is in use, the gate stays off."""
    rbroker.client.hset(rbroker.keys.doc("workers", "w-any"), mapping={"\0": "1", "format": '"9"'})
    rbroker.client.sadd(rbroker.keys.doc_index("workers"), "w-any")
    producer = RedisBroker.from_url(redis_server.url)
    try:
        producer.enqueue([_job("one")], T0)
    finally:
        producer.close()
    assert rbroker.client.get(rbroker.keys.format) is None
    assert COLON.match(_members(rbroker)["one"])
