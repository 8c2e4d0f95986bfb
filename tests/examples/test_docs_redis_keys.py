"""The Redis key schema is stated three times — ``broker/redis/keys.py``'s module docstring (THE
schema), the key table of docs/wire-format.md (for producers in other languages) and the
``KeySchema`` code — and they must name the same keys.

A key added to the code and not to both documents (or documented and never built) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from conveyor.broker.redis import keys

ROOT = Path(__file__).resolve().parents[2]
_PLACEHOLDER = re.compile(r"<[^>]+>")


def _norm(key: str) -> str:
    """One spelling per key: ``{q}`` = ``{<queue>}``, every ``<placeholder>`` alike."""
    return _PLACEHOLDER.sub("<x>", key.replace("{q}", "{<q>}"))


def docstring_keys() -> set[str]:
    """The keys ``keys.py``'s docstring lists (``f:...`` lines are keys of a queue)."""
    found = set()
    for line in (keys.__doc__ or "").splitlines():
        match = re.match(
            r"\s+(<p>:\S+(?: id>)?|f:\S+)\s+(?:HASH|STRING|ZSET|SET|LIST|STREAM)\b", line
        )
        if match:
            key = match.group(1)
            found.add(_norm(f"<p>:{{<q>}}:{key}" if key.startswith("f:") else key))
    return found


def wire_format_keys() -> set[str]:
    """The keys of docs/wire-format.md's table "2. Redis keys"."""
    text = (ROOT / "docs" / "wire-format.md").read_text(encoding="utf-8")
    section = text.split("## 2. Redis keys", 1)[1].split("\n### ", 1)[0]
    cells = re.findall(r"^\| (`<p>[^|]*?`(?: / `[^`]*`)?) \|", section, re.M)
    return {_norm(key) for cell in cells for key in re.findall(r"`([^`]+)`", cell)}


def code_keys() -> set[str]:
    """Every key ``KeySchema`` builds (the flow-control prefix ``f:`` stands for its keys)."""
    schema = keys.KeySchema("<p>")
    per_queue = [
        schema.tag("<q>") + suffix + ("<x>" if suffix.endswith(":") else "")
        for suffix in keys.QUEUE_KEY_SUFFIXES + keys.WORKFLOW_SUFFIXES + (keys.RUN,)
        if suffix != "f:"
    ]
    built = [
        schema.queues,
        schema.events,
        schema.global_wake,
        schema.flow_overrides,
        schema.flow_seq,
        schema.flow_adopted,
        schema.format,
        schema.log("<n>"),
        schema.counters("<b>"),
        schema.workflow("<id>"),
        schema.workflows(),
        schema.id_lock("<id>"),
        "<p>:doc:{<c>}",
        "<p>:doc:{<c>}:<name>",  # doc_index/doc hex-encode "<c>": spelt here
    ]
    return {_norm(k) for k in per_queue + built}


def test_every_key_the_code_builds_is_in_the_docstring_schema() -> None:
    assert code_keys() - docstring_keys() == set()


def test_the_docstring_schema_keys_are_built_by_the_code() -> None:
    flow = {k for k in docstring_keys() if ":f:" in k}  # built in Lua from the f: prefix
    assert docstring_keys() - flow - code_keys() == set()
    assert len(flow) >= 10


def test_the_wire_format_table_lists_every_key() -> None:
    assert wire_format_keys() == docstring_keys()


def test_the_wire_format_table_names_only_real_keys() -> None:
    flow = {k for k in wire_format_keys() if ":f:" in k}  # built in Lua from the f: prefix
    assert wire_format_keys() - flow - code_keys() == set()
