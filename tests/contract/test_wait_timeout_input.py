"""Contract: ``wait(timeout=)`` is checked the same way on a job and on a workflow.

``WorkflowHandle.wait`` did ``float(timeout)`` itself: NaN timed out at once, ``"soon"`` raised
a raw ValueError, ``-1`` and ``True`` were taken as seconds. ``JobHandle.wait`` took ``"5"``,
``-1`` and ``True`` as seconds too. Each is now a ValidationError naming ``timeout``, raised
before anything waits; ``0`` (poll once), a positive number and None (for ever) still work.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conveyor import Conveyor, ValidationError, WaitTimeout, chain

BAD = [float("nan"), -1, -0.5, "soon", "5", True, False, [1]]


def _handle(app: Conveyor, kind: str) -> Any:
    """A job's handle, or a two-step workflow's (skipped where workflows are refused: Redis
    Cluster, docs/workflows.md)."""

    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    if kind == "job":
        return add.enqueue(1, 2)
    try:
        return chain(add.partial(1, 2), add.partial(3)).enqueue()
    except ValidationError as exc:
        if exc.field != "workflow":
            raise
        pytest.skip(str(exc))


@pytest.mark.parametrize("kind", ["job", "workflow"])
@pytest.mark.parametrize("timeout", BAD, ids=repr)
def test_wait_refuses_a_bad_timeout_by_name(app: Conveyor, kind: str, timeout: Any) -> None:
    handle = _handle(app, kind)
    with pytest.raises(ValidationError, match=r"^timeout: "):
        handle.wait(timeout=timeout)
    with pytest.raises(ValidationError, match=r"^timeout: "):
        asyncio.run(handle.wait_async(timeout=timeout))


@pytest.mark.parametrize("kind", ["job", "workflow"])
def test_wait_with_a_zero_timeout_polls_once(app: Conveyor, kind: str) -> None:
    handle = _handle(app, kind)
    with pytest.raises(WaitTimeout):
        handle.wait(timeout=0)
    app.worker().run_until_idle()
    assert handle.wait(timeout=0) in (3, 6)
    assert handle.wait(timeout=None) in (3, 6)
    assert asyncio.run(handle.wait_async(timeout=5)) in (3, 6)
