"""The Redis broker's ``redis.asyncio`` clients (aio.py) are closed explicitly: when the event
loop that opened them ends (``asyncio.run``) and by ``broker.close()`` while their loop is
still open, so no ``unclosed Connection`` ResourceWarning is left for the garbage collector
(checked on the client's pool: no connection still holds a socket)."""

from __future__ import annotations

import asyncio
from typing import Any

from conveyor import Conveyor
from conveyor.broker.redis import RedisBroker


def _connected(client: Any) -> int:
    """Connections of an async client's pool that still hold a socket."""
    pool = client.connection_pool
    conns = [*pool._available_connections, *pool._in_use_connections]
    return sum(1 for c in conns if getattr(c, "_writer", None) is not None)


def test_clients_close_when_asyncio_run_ends(redis_server: Any) -> None:
    broker = RedisBroker.from_url(redis_server.url)
    broker.flush_all()
    app = Conveyor(broker)
    clients: list[Any] = []

    async def main() -> None:
        handle = await app.enqueue_async("t", [1])
        assert await broker.get_async(handle.id) is not None
        clients.extend(broker.aclients.by_loop.values())

    asyncio.run(main())
    [client] = clients
    assert _connected(client) == 0, "the loop ended with its client's connections open"
    app.close()


def test_broker_close_closes_a_client_of_an_open_loop(redis_server: Any) -> None:
    broker = RedisBroker.from_url(redis_server.url)
    app = Conveyor(broker)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(app.enqueue_async("t", [2]))
        [client] = list(broker.aclients.by_loop.values())
        assert _connected(client) == 1
        app.close()
        assert _connected(client) == 0
    finally:
        loop.close()
