"""Redis backend: ``RedisBroker`` (standalone, Sentinel, Cluster), one Lua script per transition.

Layout: ``broker.py`` (transitions), ``reads.py`` (inspection), ``side.py`` (the composed side
stores: documents, logs, events, counters), ``lifecycle.py`` (server time, idle waiting, flush,
close), ``plumbing.py`` (shared base, error mapping), ``conn.py`` (URLs, pools, start-up
checks), ``codec.py`` (job hash <-> Job), ``keys.py`` (the whole key schema), ``scripts.py``
+ ``lua/`` (the scripts). See docs/wire-format.md and docs/architecture-redis.md.
"""

from .broker import RedisBroker

__all__ = ["RedisBroker"]
