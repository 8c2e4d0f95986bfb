"""Typed-task code mypy --strict must refuse: each ``# E: code`` line is one expected error."""

from __future__ import annotations

from conveyor import Conveyor

app = Conveyor("memory://")


@app.task
def add(x: int, y: int = 0) -> int:
    return x + y


@app.task(queue="emails")
def send(to: str, *, subject: str) -> None:
    return None


@app.task
async def fetch(url: str) -> bytes:
    return url.encode()


add.enqueue("one")  # E: arg-type
add.enqueue()  # E: call-arg
wrong: str = add.enqueue(1).wait()  # E: assignment
send.enqueue("a@example.com")  # E: call-arg
add.s(1, z=3)  # E: call-overload
add.options(queue="high").enqueue("one")  # E: arg-type
add.enqueue_in(5, "one")  # E: arg-type
raw: str = fetch.enqueue("https://example.com").wait()  # E: assignment


async def main() -> None:
    handle = await add.enqueue_async("one")  # E: arg-type
    text: str = await handle.wait_async()  # E: assignment
    print(text)
