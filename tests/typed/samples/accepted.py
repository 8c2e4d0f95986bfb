"""Typed-task code mypy --strict must accept (tests/typed/test_mypy.py)."""

from __future__ import annotations

import datetime as dt

from conveyor import Conveyor, JobHandle, JobSpec, chain, chord, group

app = Conveyor("memory://")


@app.task
def add(x: int, y: int = 0) -> int:
    return x + y


@app.task(queue="emails", max_attempts=3)
def send(to: str, *, subject: str) -> None:
    return None


@app.task()
async def fetch(url: str) -> bytes:
    return url.encode()


handle: JobHandle[int] = add.enqueue(1, y=2)
total: int = handle.wait(timeout=1)
spec: JobSpec = add.s(1, 2)
specs: list[JobSpec] = [add.spec(1), send.s("a@example.com", subject="hi")]
later: JobHandle[int] = add.enqueue_in(5, 1)
at: JobHandle[int] = add.enqueue_at(dt.datetime.now(dt.UTC), 1, 2)
routed: int = add.options(queue="high", priority=-1).enqueue(3).wait()
send.enqueue("a@example.com", subject="hi")
data: bytes = fetch.enqueue("https://example.com").wait()
by_name: JobHandle[object] = app.enqueue("add", args=[1, 2])
direct: int = add(1, 2)
# workflow steps: after another step, .s() may leave its first argument to the upstream result
flow = chain(fetch.s("https://example.com"), add.s(), send.s(subject="hi"))
both = chord(group(add.s(i) for i in range(3)), add.s(y=1))
still: JobSpec = send.options(queue="q").s(subject="hi")
fixed = add.si(1, 2)


async def main() -> int:
    h = await add.enqueue_async(1)
    n: int = await h.wait_async(timeout=5)
    many = await app.enqueue_many_async([add.s(1), add.s(2)])
    return n + len(many)
