"""The Lua scripts: loaded from ``lua/*.lua``, run with EVALSHA, reloaded on NOSCRIPT.

Every job script is ``lua/_lib.lua`` (shared helpers) followed by the script's own file; its
SHA1 is computed here, so EVALSHA works without a prior SCRIPT LOAD. When the server answers
NOSCRIPT (restart, failover, ``SCRIPT FLUSH``) the script is loaded and the call repeated; in a
pipeline only the calls that failed with NOSCRIPT are repeated (a NOSCRIPT call never ran).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

#: Scripts that are not job transitions and do not get the shared prelude.
_STANDALONE = frozenset({"doc_cas"})
SCRIPT_NAMES = (
    "enqueue", "claim", "complete", "fail", "release", "extend", "promote", "reap", "cancel",
    "requeue", "purge", "oldest", "search", "doc_cas",
)  # fmt: skip


@dataclass(frozen=True)
class Script:
    """One loaded script: its name, full source and SHA1."""

    name: str
    source: bytes
    sha: str


@dataclass(frozen=True)
class Call:
    """One script invocation for a pipeline: script name, KEYS and ARGV."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any]


def _read(name: str) -> str:
    return (
        resources.files("conveyor.broker.redis").joinpath("lua", f"{name}.lua").read_text("utf-8")
    )


def load_all() -> dict[str, Script]:
    """Read every script from the package and compute its SHA1."""
    lib = _read("_lib")
    out = {}
    for name in SCRIPT_NAMES:
        body = _read(name)
        source = (body if name in _STANDALONE else f"{lib}\n{body}").encode("utf-8")
        out[name] = Script(name, source, hashlib.sha1(source).hexdigest())
    return out


class ScriptRunner:
    """Runs scripts on one redis-py client (plain, Sentinel-managed or Cluster)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.scripts = load_all()

    def _load(self, names: set[str]) -> None:
        for name in names:
            self.client.script_load(self.scripts[name].source)

    def _args(self, call: Call) -> list[Any]:
        return [self.scripts[call.name].sha, len(call.keys), *call.keys, *call.args]

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA one script; on NOSCRIPT load it and try once more."""
        call = Call(name, keys, args)
        try:
            return self.client.execute_command("EVALSHA", *self._args(call))
        except NoScriptError:
            self._load({name})
            return self.client.execute_command("EVALSHA", *self._args(call))

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Pipeline several script calls (one round trip per node); results in order.

        Errors other than NOSCRIPT are raised after the pipeline ran (the other calls did run).
        """
        if not calls:
            return []
        if len(calls) == 1:
            return [self.run(calls[0].name, calls[0].keys, calls[0].args)]
        results = self._pipeline(calls)
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:
            self._load({calls[i].name for i in missing})
            again = self._pipeline([calls[i] for i in missing])
            for i, result in zip(missing, again, strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command("EVALSHA", *self._args(call))
        return list(pipe.execute(raise_on_error=False))
