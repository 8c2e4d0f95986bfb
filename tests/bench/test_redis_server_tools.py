"""The parsers of the Redis server-cost A/B tools: bench/redis_cpu.py ``--commandstats`` and
bench/redis_instr.py (callgrind dumps)."""

from __future__ import annotations

import pytest

from bench import redis_cpu, redis_instr


def _row(calls: int, usec: int) -> dict[str, float]:
    return {"calls": calls, "usec": usec, "usec_per_call": usec / calls}


def test_breakdown_splits_script_time_into_commands_and_glue() -> None:
    stats = {
        "cmdstat_evalsha": _row(10, 900),  # includes the 600 µs of the commands it ran
        "cmdstat_hset": _row(20, 400),
        "cmdstat_xadd": _row(10, 200),
        "cmdstat_info": _row(2, 30),  # the meter's own calls are left out
        "cmdstat_config|resetstat": _row(1, 20),
    }
    out = redis_cpu.breakdown(stats, jobs=100, server_us=15.0)
    assert out["hset"] == pytest.approx(4.0)
    assert out["xadd"] == pytest.approx(2.0)
    assert out["script glue"] == pytest.approx(3.0)  # (900 - 600) / 100
    assert out["request"] == pytest.approx(6.0)  # 15 - 900 / 100
    assert "info" not in out and "evalsha" not in out


def test_breakdown_of_bare_commands_has_no_glue() -> None:
    out = redis_cpu.breakdown({"cmdstat_lpush": _row(100, 50)}, jobs=100, server_us=9.0)
    assert out == {"lpush": 0.5, "script glue": 0.0, "request": pytest.approx(8.5)}


def test_totals_reads_a_callgrind_dump() -> None:
    dump = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=main\n3 7\ntotals: 123456\n"
    assert redis_instr.totals(dump) == 123456
    assert redis_instr.totals("events: Ir\nsummary: 42\n") == 42
    with pytest.raises(ValueError):
        redis_instr.totals("events: Ir\n")
