"""Each job script carries only the ``_lib.lua`` helpers it uses (``scripts.lib_for``)."""

from __future__ import annotations

import re

from conveyor.broker.redis.scripts import _read, lib_for, load_all

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
    lib_names = set(_defined(_read("_lib")))
    for name, script in load_all().items():
        source = script.source.decode()
        defined = set(_defined(source))
        called = set(re.findall(r"\b(\w+)\(", source)) & lib_names
        assert called <= defined, (name, called - defined)
    assert "promote" not in _defined(load_all()["enqueue"].source.decode())
