"""Fixtures of the integration tests: private redis-servers (as in tests/redis)."""

from __future__ import annotations

from tests.redis.conftest import make_server

__all__ = ["make_server"]
