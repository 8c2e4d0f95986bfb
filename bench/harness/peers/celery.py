"""Celery 5 on Redis.

default: ``celery worker -c 1`` (prefork pool, one child: one process does the work; CLI
defaults otherwise: prefetch multiplier 4, gossip/mingle/heartbeat on).
best: ``--pool solo`` (the job runs in the consumer process) with prefetch multiplier 64 and
gossip/mingle/heartbeat off (tried: solo with prefetch 16/64/256, prefork -c 1 and threads -c 4
with prefetch 64). io: ``--pool threads -c 100``.
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.adapter import Adapter

_QUIET = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


class CeleryAdapter(Adapter):
    """Celery with the Redis transport, no result backend."""

    name = "celery"
    package = "celery"
    db = 1
    client_module = "bench.peer_tasks.celery_tasks"
    bulk_api = "group().apply_async() (no bulk API; publishes one message per job)"
    count_caps: ClassVar[dict[str, int]] = {
        "enqueue": 5000,
        "bulk": 5000,
        "drain:default": 5000,
        "drain:best": 10000,
    }
    tuning_modes: ClassVar[tuple[str, ...]] = (
        "solo-p16",
        "solo-p256",
        "prefork1-p64",
        "threads4-p64",
    )

    def worker_command(self, mode: str) -> list[str]:
        base = [
            self.bin("celery"),
            "-A",
            self.client_module,
            "worker",
            "-Q",
            "bench",
            "-n",
            f"bench{self._spawned}@%h",
            "--loglevel",
            "WARNING",
        ]
        if mode == "default":
            return [*base, "-c", "1"]
        if mode in ("best", "solo-p16", "solo-p256"):
            return [*base, "--pool", "solo", *_QUIET]
        if mode == "prefork1-p64":
            return [*base, "-c", "1", *_QUIET]
        if mode == "threads4-p64":
            return [*base, "--pool", "threads", "-c", "4", *_QUIET]
        if mode == "io":
            return [*base, "--pool", "threads", "-c", "100"]
        raise ValueError(f"celery: unknown mode {mode!r}")

    def worker_env(self, mode: str) -> dict[str, str]:
        prefetch = {
            "best": "64",
            "solo-p16": "16",
            "solo-p256": "256",
            "prefork1-p64": "64",
            "threads4-p64": "64",
        }
        return {"BENCH_CELERY_PREFETCH": prefetch[mode]} if mode in prefetch else {}
