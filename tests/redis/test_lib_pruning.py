"""Each job script carries only the prelude helpers it uses (``scripts.lib_for``); the prelude
files (``scripts.PRELUDE``) define every helper before the helpers that call it."""

from __future__ import annotations

import re

from conveyor.broker.redis.scripts import PRELUDE, _read, lib_for, load_all, prelude

LIB = """-- header
local LIMIT = 16

local function a(x)
  return x + LIMIT
end

local function b(x)
  return a(x) * 2
end

local function c()
  return 1
end
"""


def _defined(source: str) -> list[str]:
    return re.findall(r"^local (?:function )?(\w+)", source, re.MULTILINE)


def test_only_used_helpers_and_their_dependencies_in_order() -> None:
    assert _defined(lib_for(LIB, "return b(1)")) == ["LIMIT", "a", "b"]
    assert _defined(lib_for(LIB, "return c()")) == ["c"]
    assert lib_for(LIB, "return c()").startswith("-- header\n")
    assert _defined(lib_for(LIB, "return 1")) == []


def test_every_job_script_defines_what_it_calls() -> None:
    lib_names = set(_defined(prelude()))
    for name, script in load_all().items():
        source = script.source.decode()
        defined = set(_defined(source))
        called = set(re.findall(r"\b(\w+)\(", source)) & lib_names
        assert called <= defined, (name, called - defined)
    assert "promote" not in _defined(load_all()["enqueue"].source.decode())


def test_prelude_helpers_are_defined_before_their_callers() -> None:
    """A Lua local is visible only below its definition: a helper that names one defined later
    (in its file or a later prelude file) would call a nil global."""
    chunks = re.split(r"^(?=local (?:function )?\w+)", prelude(), flags=re.MULTILINE)[1:]
    names = [_defined(chunk)[0] for chunk in chunks]
    for i, chunk in enumerate(chunks):
        code = "\n".join(line.split("--")[0] for line in chunk.splitlines())
        # a use, not a table field (``wake = KEYS[...]``, ``q.wake``) of the same name
        later = {n for n in names[i + 1 :] if re.search(rf"(?<![.\w]){n}\b(?!\s*=[^=])", code)}
        assert not later, (names[i], later)
    assert PRELUDE == ("_lib", "_run", "_wf", "_timers", "_flow")
    assert "flow_take" in _defined(_read("_flow")) and "wf_done" in _defined(_read("_wf"))
