"""Connections: URL parsing, one shared client (pool) per URL per process, start-up checks.

URLs (query options: ``prefix`` (key prefix, default ``conveyor``), ``socket_timeout``,
``socket_connect_timeout``, ``sentinel_password``; others go to redis-py):

* ``redis://[user:password@]host:port/db`` and ``rediss://`` (TLS) — a Redis Cluster node is
  detected (``INFO cluster``) and the client switches to Cluster mode by itself;
* ``redis+cluster://[user:password@]host:port[,host:port...][/0]``;
* ``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/db]``.

Clients use the hiredis parser when installed, short connect/read timeouts, and retry a command
once after a broken connection, so a Redis that is down surfaces as ``BrokerUnavailable`` in
well under a second instead of hanging.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

import redis

from ...errors import ValidationError
from .keys import DEFAULT_PREFIX

log = logging.getLogger("conveyor.redis")
#: The start-up check warnings (persistence off, eviction), once per process: long-running
#: processes show them; the CLI's one-shot commands quiet this logger.
checks_log = logging.getLogger("conveyor.redis.checks")

MIN_VERSION = (6, 2, 0)
SOCKET_TIMEOUT = 10.0
CONNECT_TIMEOUT = 2.0
_OWN_OPTIONS = ("prefix", "sentinel_password")


@dataclass
class Connection:
    """A client for one URL, shared by every broker of the process that uses that URL."""

    url: str
    client: Any
    cluster: bool
    prefix: str
    socket_timeout: float
    users: int = 0
    checked: bool = False
    registered: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    runner: Any = None  # the ScriptRunner of ``client`` (shared by the brokers of this URL)


_SHARED: dict[tuple[int, str], Connection] = {}
_SHARED_LOCK = threading.Lock()


def acquire(url: str) -> Connection:
    """The process-wide connection for ``url`` (created on first use; no I/O happens here)."""
    key = (os.getpid(), url)
    with _SHARED_LOCK:
        conn = _SHARED.get(key)
        if conn is None:
            conn = _connect(url)
            _SHARED[key] = conn
        conn.users += 1
        return conn


def release(conn: Connection) -> None:
    """Drop one user; the last one closes the client's connections."""
    with _SHARED_LOCK:
        conn.users -= 1
        if conn.users > 0:
            return
        _SHARED.pop((os.getpid(), conn.url), None)
    try:
        if conn.runner is not None:
            conn.runner.close()
        conn.client.close()
    except Exception:  # pragma: no cover - closing a broken client
        log.debug("closing redis client failed", exc_info=True)


def _retry() -> Retry:
    return Retry(
        ExponentialBackoff(cap=0.25, base=0.025), 1, supported_errors=(RedisConnectionError,)
    )


def _options(query: dict[str, str]) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "socket_timeout": float(query.pop("socket_timeout", SOCKET_TIMEOUT)),
        "socket_connect_timeout": float(query.pop("socket_connect_timeout", CONNECT_TIMEOUT)),
        "retry": _retry(),
        "client_name": "conveyor",
    }
    return opts


def _split(url: str) -> tuple[str, str, str, str, dict[str, str]]:
    """scheme, userinfo, hosts, path, query (own options included) of a possibly multi-host URL."""
    scheme, rest = url.split("://", 1)
    rest, _, query_text = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    return scheme.lower(), userinfo, hosts, path, dict(parse_qsl(query_text))


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, sep, password = userinfo.partition(":")
    if not sep:
        return None, unquote(user) or None
    return unquote(user) or None, unquote(password) or None


def _hosts(hosts: str, default_port: int) -> list[tuple[str, int]]:
    out = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":") if ":" in item else (item, "", "")
        try:
            out.append((host or "localhost", int(port or default_port)))
        except ValueError as exc:
            raise ValidationError("url", f"bad host:port {item!r}") from exc
    if not out:
        raise ValidationError("url", "no host given")
    return out


def _connect(url: str) -> Connection:
    try:
        scheme, userinfo, hosts, path, query = _split(url)
    except ValueError as exc:
        raise ValidationError("url", f"cannot parse {url!r}") from exc
    prefix = query.pop("prefix", DEFAULT_PREFIX)
    sentinel_password = query.pop("sentinel_password", None)
    return _client(url, scheme, userinfo, hosts, path, query, prefix, sentinel_password)


def _client(
    url: str,
    scheme: str,
    userinfo: str,
    hosts: str,
    path: str,
    query: dict[str, str],
    prefix: str,
    sentinel_password: str | None,
) -> Connection:
    opts = _options(query)
    timeout = float(opts["socket_timeout"])
    username, password = _credentials(userinfo)
    if scheme == "redis+cluster":
        node_cls: Any = redis.cluster.ClusterNode
        nodes = [node_cls(h, p) for h, p in _hosts(hosts, 6379)]
        client: Any = redis.RedisCluster(
            startup_nodes=nodes, username=username, password=password, **_cluster_opts(opts, query)
        )
        return Connection(url, client, True, prefix, timeout)
    if scheme == "redis+sentinel":
        return _sentinel(url, hosts, path, username, password, sentinel_password, opts, prefix)
    if scheme not in ("redis", "rediss"):
        raise ValidationError("url", f"unsupported scheme {scheme!r}")
    _drop_decode_responses(query)
    parts = urlsplit(url)
    plain = urlunsplit(parts._replace(query=urlencode(query)))
    client = redis.Redis.from_url(plain, **opts)
    return Connection(plain, client, False, prefix, timeout)


def _drop_decode_responses(query: dict[str, str]) -> None:
    """Conveyor's client reads bytes (payloads, fields, stream entries are decoded by the codec),
    so a ``decode_responses`` URL option is ignored (with a warning) rather than let it break
    every read; the client is Conveyor's own and never handed to user code."""
    value = query.pop("decode_responses", None)
    if value is not None and value.lower() not in ("0", "false", "no", "off", ""):
        log.warning("redis URL option decode_responses=%s ignored: Conveyor reads bytes", value)


def _cluster_opts(opts: dict[str, Any], query: dict[str, str]) -> dict[str, Any]:
    out = dict(opts)
    out["retry"] = Retry(ExponentialBackoff(cap=0.5, base=0.05), 3)
    if query.get("ssl") in ("1", "true", "yes"):
        out["ssl"] = True
    return out


def _sentinel(
    url: str,
    hosts: str,
    path: str,
    username: str | None,
    password: str | None,
    sentinel_password: str | None,
    opts: dict[str, Any],
    prefix: str,
) -> Connection:
    from redis.sentinel import Sentinel

    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ValidationError("url", "redis+sentinel:// needs the master name: .../<name>[/db]")
    db = int(parts[1]) if len(parts) > 1 else 0
    sentinel_kwargs = {
        "socket_timeout": opts["socket_timeout"],
        "socket_connect_timeout": opts["socket_connect_timeout"],
    }
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    sentinel_cls: Any = Sentinel
    sentinel = sentinel_cls(_hosts(hosts, 26379), sentinel_kwargs=sentinel_kwargs)
    client = sentinel.master_for(parts[0], db=db, username=username, password=password, **opts)
    return Connection(url, client, False, prefix, float(opts["socket_timeout"]))


def ensure_ready(conn: Connection) -> None:
    """Once per connection: switch to Cluster mode if needed, then run the start-up checks."""
    if conn.checked:
        return
    with conn.lock:
        if conn.checked:
            return
        if not conn.cluster and str(conn.client.info("cluster").get("cluster_enabled")) == "1":
            _switch_to_cluster(conn)
        run_checks(conn)
        conn.checked = True


_KEPT = (
    "username",
    "password",
    "socket_timeout",
    "socket_connect_timeout",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
)


def _switch_to_cluster(conn: Connection) -> None:
    """A plain URL pointed at a cluster node: replace the client by a Cluster client."""
    old = conn.client
    kwargs = old.connection_pool.connection_kwargs
    opts = {k: kwargs[k] for k in _KEPT if k in kwargs}
    if conn.url.lower().startswith("rediss://"):
        opts["ssl"] = True
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    conn.client = redis.RedisCluster(host=host, port=port, **_cluster_opts(opts, {}))
    conn.cluster = True
    old.close()


def run_checks(conn: Connection) -> None:
    """Refuse Redis < 6.2; warn about eviction and missing persistence (on every primary)."""
    clients = (
        [n.redis_connection for n in conn.client.get_primaries()] if conn.cluster else [conn.client]
    )
    for client in clients:
        info = client.info()
        save: str | None = None
        try:
            raw = client.config_get("save")
            save = str(raw.get("save", "")) if isinstance(raw, dict) else None
        except redis.RedisError:  # CONFIG may be forbidden by ACLs
            save = None
        for warning in check_server(info, save):
            checks_log.warning(warning)


def check_server(info: dict[str, Any], save_config: str | None) -> list[str]:
    """Pure start-up check of one ``INFO`` reply: raise if too old, return warnings."""
    version_text = str(info.get("redis_version", "0"))
    try:
        version = tuple(int(x) for x in version_text.split(".")[:3])
    except ValueError:
        version = (0,)
    if version < MIN_VERSION:
        raise ValidationError(
            "url",
            f"Redis {version_text} is too old: Conveyor needs Redis 6.2 or newer"
            " (ZSET/LIST commands and scripting semantics it relies on)",
        )
    warnings = []
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        warnings.append(
            f"Redis maxmemory-policy is {policy!r}: Redis may evict job data under memory"
            " pressure; set maxmemory-policy noeviction"
        )
    aof = str(info.get("aof_enabled", "0")) == "1"
    if not aof and save_config is not None and not save_config.strip():
        warnings.append(
            "Redis persistence is off (appendonly no and no RDB save points): a restart loses"
            " every job; enable appendonly yes (appendfsync everysec or always)"
        )
    return warnings
