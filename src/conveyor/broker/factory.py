"""Pick a broker from a URL: ``memory://``, ``sqlite:///path.db``, ``postgresql://…``,
``redis://…`` and friends."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ..config import Retention
from ..errors import ValidationError
from .base import Broker

SCHEMES = (
    "memory",
    "sqlite",
    "postgresql",
    "postgres",
    "redis",
    "rediss",
    "redis+sentinel",
    "redis+cluster",
)


def broker_from_url(url: str, retention: Retention | None = None) -> Broker:
    """Build the broker a URL names; unknown schemes and malformed URLs (a port past 65535,
    an unclosed IPv6 bracket, an option that is not a number) raise ``ValidationError``."""
    try:
        return _from_url(url, retention)
    except ValidationError:
        raise
    except ValueError as exc:  # urllib / redis-py / psycopg parsing: was a bare traceback
        raise ValidationError("url", f"is malformed: {exc}") from exc


def _from_url(url: str, retention: Retention | None) -> Broker:
    if not isinstance(url, str) or "://" not in url:
        raise ValidationError("url", f"{url!r} must look like scheme://..., e.g. sqlite:///jobs.db")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        from .memory import MemoryBroker

        return MemoryBroker(retention, url)
    if scheme == "sqlite":
        from .sqlite import SqliteBroker

        return SqliteBroker.from_url(url, retention)
    if scheme in ("postgresql", "postgres"):
        try:
            from .postgres.broker import PostgresBroker
        except ImportError as exc:  # the postgres extra is optional
            hint = "postgresql URLs need: pip install 'conveyor-jobs[postgres]'"
            raise ValidationError("url", hint) from exc
        return PostgresBroker.from_url(url, retention)
    if scheme in ("redis", "rediss", "redis+sentinel", "redis+cluster"):
        try:
            from .redis.broker import RedisBroker
        except ImportError as exc:  # the redis extra is optional
            hint = "redis URLs need: pip install 'conveyor-jobs[redis]'"
            raise ValidationError("url", hint) from exc
        if scheme in ("redis", "rediss"):
            _check_redis_db(url)
        return RedisBroker.from_url(url, retention)
    raise ValidationError("url", f"unknown scheme {scheme!r}; use one of {', '.join(SCHEMES)}")


def _check_redis_db(url: str) -> None:
    """The path of a redis:// URL is the database number or nothing: redis-py silently used
    db 0 for ``/abc`` or ``/1/extra`` (jobs written where no worker of db 1 looks)."""
    path = urlsplit(url).path
    if path not in ("", "/") and not re.fullmatch(r"/\d+/?", path):
        raise ValidationError("url", f"the path must be a database number, got {path!r:.60}")
