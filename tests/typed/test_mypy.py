"""Issue 19 item 2: mypy checks task calls against the function (``Task[P, R]``).

Runs the project's mypy (``--strict``) on two sample modules: ``samples/accepted.py`` must
type-check cleanly; ``samples/refused.py`` must give exactly the errors its ``# E: code``
comments name (wrong argument type, missing argument, unknown keyword, wrong use of the result
of ``wait()``), line by line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
_ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")

pytestmark = pytest.mark.slow


def _mypy(tmp_path: Path, *files: Path) -> list[tuple[str, int, str]]:
    # TYPED_TEST_SRC: point mypy at another source tree (to see this test fail on an old one)
    # TYPED_TEST_SRC: check against another source tree (to watch this test fail on an old one)
    env = {**os.environ, "MYPYPATH": os.environ.get("TYPED_TEST_SRC", str(SRC))}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--show-error-codes",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
        timeout=240,
    )
    found = []
    for line in proc.stdout.splitlines():
        m = _ERROR.match(line)
        if m:
            found.append((Path(m["file"]).name, int(m["line"]), m["code"]))
        elif ": error:" in line:
            raise AssertionError(f"unparsed mypy error: {line}")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return found


def _expected(path: Path) -> list[tuple[str, int, str]]:
    out = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"# E: ([a-z-]+)$", text)
        if m:
            out.append((path.name, number, m[1]))
    return out


def test_mypy_accepts_typed_use_and_reports_each_misuse(tmp_path: Path) -> None:
    accepted, refused = HERE / "samples" / "accepted.py", HERE / "samples" / "refused.py"
    found = _mypy(tmp_path, accepted, refused)
    assert [f for f in found if f[0] == "accepted.py"] == []
    expected = _expected(refused)
    assert len(expected) == 10
    # one error per line (an overloaded call, e.g. ``.s``, may report its mismatch twice)
    assert sorted({f for f in found if f[0] == "refused.py"}) == sorted(expected)
