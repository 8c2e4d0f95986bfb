"""The scripts' calling convention: one packed options argument, one enum of return codes.

* Scripts with many scalar arguments (``PACKED``) take them as ONE JSON object in ``ARGV[1]``
  (decoded once per call with ``cjson``); per-job records stay positional after it.
* Their return codes are ``ScriptCode`` (broker/redis/codes.py), mirrored by the ``CODE_*``
  constants of ``lua/_lib.lua``; Python call sites compare replies with the enum only.
"""

from __future__ import annotations

import ast
import re
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from conveyor.broker.redis import RedisBroker
from conveyor.broker.redis.codes import PACKED, ScriptCode
from conveyor.broker.redis.scripts import SCRIPT_NAMES
from conveyor.core.job import Job

from .conftest import T0

LUA = resources.files("conveyor.broker.redis").joinpath("lua")
SRC = Path(__file__).resolve().parents[2] / "src" / "conveyor" / "broker" / "redis"


def test_lua_constants_mirror_the_enum() -> None:
    lib = LUA.joinpath("_lib.lua").read_text()
    lua = {m[1]: int(m[2]) for m in re.finditer(r"^local CODE_([A-Z_]+) = (-?\d+)\b", lib, re.M)}
    assert lua == {name: int(code) for name, code in ScriptCode.__members__.items()}


def test_packed_scripts_document_their_options() -> None:
    assert set(PACKED) <= set(SCRIPT_NAMES)
    for name in PACKED:
        text = LUA.joinpath(f"{name}.lua").read_text()
        assert re.search(r"^--\s+ARGV: \[1\] options \(JSON object\)", text, re.M), name
        assert "cjson.decode(ARGV[1])" in text, name


def test_claim_takes_one_json_options_argument(rbroker: RedisBroker) -> None:
    rbroker.enqueue([Job(id="a", task="t", queue="default", created_at=T0, run_at=T0)], T0)
    options = {
        "queue": "default",
        "now": repr(T0),
        "deadline": repr(T0 + 30),
        "limit": 5,
        "worker": "w",
        "events_max": 100,
        "promote_max": 10,
        "dead_max": 10,
        "max_lost": 3,
    }
    reply = rbroker.runner.run("claim", rbroker.qkeys("default"), [orjson.dumps(options)])
    # short (1 of 5): next_due too, here the new lease's deadline (issue 18: the worker waits next)
    assert reply[0] == ScriptCode.NO and float(reply[1]) == T0 + 30
    # flat: 3 values per job, after the hash values of the jobs that are not fresh (issue 18)
    assert len(reply) == 3 + 3 and reply[2] is None and reply[3] == b"a"
    got = rbroker.get("a")
    assert got is not None and got.worker_id == "w" and got.lease_expires_at == T0 + 30


def test_stale_fail_and_release_answer_lease_lost(rbroker: RedisBroker) -> None:
    keys = rbroker.qkeys("default")
    common: dict[str, Any] = {"queue": "default", "now": repr(T0), "events_max": 100}
    fail = {**common, "retry_at": "", "kind": "error", "dead_max": 10, "has_attempt": "0"}
    reply = rbroker.runner.run("fail", keys, [orjson.dumps(fail), "x", "1:default", "{}", "e", ""])
    assert reply == [ScriptCode.LEASE_LOST]
    release = {**common, "run_at": "", "penalize": "1", "note": "n"}
    reply = rbroker.runner.run("release", keys, [orjson.dumps(release), "x", "1:default"])
    assert reply == [ScriptCode.LEASE_LOST]


def _int_compares(path: Path) -> list[str]:
    """Comparisons of something other than ``len(...)`` with -2, -1 or 1 (bare script codes)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        ints = [
            s
            for s in sides
            if isinstance(s, ast.UnaryOp | ast.Constant)
            and ast.literal_eval(s) in (-2, -1, 1)
            and type(ast.literal_eval(s)) is int
        ]
        lens = [s for s in sides if isinstance(s, ast.Call) and getattr(s.func, "id", "") == "len"]
        if ints and not lens:
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_call_sites_decode_replies_through_the_enum() -> None:
    files = ("broker.py", "reads.py", "side.py", "lifecycle.py", "plumbing.py")
    assert [hit for name in files for hit in _int_compares(SRC / name)] == []


def test_complete_takes_the_documented_options_object(rbroker: RedisBroker) -> None:
    jobs = [Job(id=i, task="t", queue="default", created_at=T0, run_at=T0) for i in "ab"]
    rbroker.enqueue(jobs, T0)
    leases = {x.job.id: x.token for x in rbroker.claim(["default"], T0, limit=2)}
    options = {"queue": "default", "now": repr(T0), "completed_max": 10, "events_max": "100"}
    args: list[Any] = [orjson.dumps(options)]
    args += ("a", leases["a"], b"7", "", "", "b", "9:default", b"", "", "")
    reply = rbroker.runner.run("complete", rbroker.qkeys("default"), args)
    assert reply == [ScriptCode.OK, ScriptCode.NO]  # b: a stale token
    assert rbroker.get("a").result == 7  # type: ignore[union-attr]
