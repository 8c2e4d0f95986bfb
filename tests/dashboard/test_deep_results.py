"""The deepest result a backend stores and reads back (``MAX_RESULT_DEPTH`` levels on every
backend; a deeper one is refused when the job completes): the API's job answer and ``conveyor job
--json`` wrap it in one or two more objects, which orjson refused ("Recursion limit reached": a
500, a TypeError traceback). Both now fall back to the standard library's encoder."""

from __future__ import annotations

import sys
import types

import orjson
from click.testing import CliRunner
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.cli.main import cli
from tests.support.hostile import deep_list

DEPTH = 253


def test_the_deepest_storable_result_reads_back_as_json(
    api: TestClient, dash_app: Conveyor, backend: str
) -> None:
    @dash_app.task(name="deep")
    def deep(n: int) -> object:
        return deep_list(n)

    for depth in range(DEPTH, DEPTH - 6, -1):  # the deepest result this backend reads back
        job = deep.enqueue(depth)
        dash_app.worker().run_until_idle()
        if dash_app.get_job(job.id).result == deep_list(depth):
            break
    assert depth >= DEPTH - 4, depth
    r = api.get(f"/api/v1/jobs/{job.id}")
    assert r.status_code == 200, r.text[:300]
    assert r.json()["result"] == deep_list(depth)
    module = types.ModuleType(f"_deep_{id(dash_app)}")
    module.app = dash_app  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        result = CliRunner().invoke(
            cli, ["job", job.id, "--json", "--app", f"{module.__name__}:app"]
        )
    finally:
        sys.modules.pop(module.__name__, None)
    assert result.exit_code == 0, repr(result.exception)
    assert orjson.loads(result.output)["result"] == deep_list(depth)
