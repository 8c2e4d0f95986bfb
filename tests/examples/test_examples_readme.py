"""Every code block of README.md runs as written (issue 19 item 1).

The blocks are extracted in order. Python blocks whose first line is ``# name.py`` are files
(written to a fresh directory, then run); the others are scripts run there in order, each in a
fresh interpreter, as a reader pasting them would. Shell lines are run too — the worker of the
quickstart really runs while ``enqueue.py`` waits for its job — or, when they cannot run here
(``pip install`` from PyPI, ``make``, servers that run until stopped), are parsed by the real
CLI or listed in ``NOT_RUN`` with the reason. A block or line that is neither run nor listed
fails the test: nothing is skipped silently.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.examples.helpers import parse_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONVEYOR = str(Path(sys.executable).with_name("conveyor"))

#: shell lines that are not run here, and why (matched by their command's first words)
NOT_RUN = {
    "pip install": "installs from PyPI; CI installs this checkout with the same extras "
    "(test_every_extra_named_exists checks the names)",
    "make demo": "installs system packages; CI runs `make check` itself",
    "make check": "installs system packages; CI runs `make check` itself",
    "conveyor scheduler": "runs until stopped: parsed by the real CLI here (tests/scheduler)",
    "conveyor dashboard": "serves until stopped: parsed by the real CLI here (tests/dashboard)",
}
#: what a Python script block must print (its first line identifies it)
EXPECTED_OUTPUT = {
    "# enqueue.py": "completed 1 sent",
    "from jobs import app, send_email": "completed",
    "from conveyor import Conveyor, current_job": "1 resized 2 of 2",
    "from conveyor import Conveyor, chain, chord, group": "['stored 32', 6] 2",
}


@dataclass
class Block:
    """One fenced code block: its language, text and line number in README.md."""

    lang: str
    code: str
    line: int

    @property
    def first(self) -> str:
        return self.code.splitlines()[0].strip() if self.code.strip() else ""

    @property
    def filename(self) -> str | None:
        match = re.fullmatch(r"# (\w+\.py)", self.first)
        return match.group(1) if match else None


def blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match.group(1), match.group(2), line))
    return found


def shell_lines(block: Block) -> list[str]:
    return [ln.split("  #")[0].strip() for ln in block.code.splitlines() if ln.strip()]


def reason_not_run(line: str) -> str | None:
    return next((why for cmd, why in NOT_RUN.items() if line.startswith(cmd)), None)


def run_python(block: Block, workdir: Path, n: int) -> str:
    name = block.filename or f"block{n}_line{block.line}.py"
    (workdir / name).write_text(block.code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, name], cwd=workdir, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"README.md:{block.line} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


def printed_comments(block: Block) -> list[re.Pattern[str]]:
    """What the block's comments say its prints show: ``print(x)  # shown`` (also on an
    ``asyncio.run(...)`` line whose coroutine prints), ``...``/``…`` standing for anything."""
    import ast

    in_defs = {  # a print inside a task or function shows when a worker runs it, elsewhere
        n
        for node in ast.walk(ast.parse(block.code))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    found = []
    for number, line in enumerate(block.code.splitlines(), 1):
        code, sep, comment = line.partition("  # ")
        shows = "print(" in code or code.startswith("asyncio.run(")
        if sep and shows and comment.strip() and number not in in_defs:
            parts = re.split(r"\.\.\.|…", comment.strip())
            found.append(re.compile(".*".join(map(re.escape, parts))))
    return found


def check_printed(block: Block, out: str) -> None:
    """Each commented print's text appears, in order, as a line of the output."""
    lines = out.splitlines()
    at = 0
    for pattern in printed_comments(block):
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        assert at < len(lines), (
            f"README.md:{block.line}: no printed line like {pattern.pattern!r}:\n{out}"
        )
        at += 1


def start_worker(line: str, workdir: Path) -> subprocess.Popen[str]:
    args = shlex.split(line)
    assert args[:2] == ["conveyor", "worker"]
    return subprocess.Popen(
        [CONVEYOR, *args[1:]],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # drains, as Ctrl-C would
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.stdout.read() if proc.stdout else ""


def test_every_readme_block_runs_or_says_why_not(tmp_path: Path) -> None:
    env_note = []  # what ran, for the failure message
    worker: subprocess.Popen[str] | None = None
    try:
        for n, block in enumerate(blocks()):
            if block.lang == "python":
                out = run_python(block, tmp_path, n)
                expected = EXPECTED_OUTPUT.get(block.first)
                if expected is not None:
                    assert out.strip().endswith(expected), (block.line, out)
                check_printed(block, out)
                env_note.append(f"ran python block at line {block.line}")
            elif block.lang == "bash":
                for line in shell_lines(block):
                    why = reason_not_run(line)
                    if line.startswith("conveyor worker"):
                        worker = start_worker(line, tmp_path)  # enqueue.py waits for it
                    elif why is not None:
                        if line.startswith("conveyor "):
                            parse_cli(line)
                    elif line.startswith("conveyor "):
                        args = shlex.split(line)[1:]
                        proc = subprocess.run(
                            [CONVEYOR, *args],
                            cwd=tmp_path,
                            capture_output=True,
                            text=True,
                            timeout=120,
                        )
                        assert proc.returncode == 0, f"{line}:\n{proc.stderr[-2000:]}"
                    else:
                        pytest.fail(
                            f"README.md:{block.line}: {line!r} is neither run nor in NOT_RUN"
                        )
            elif block.lang:
                pytest.fail(f"README.md:{block.line}: a {block.lang} block the test does not know")
            else:  # plain text (diagrams): nothing to run
                continue
    finally:
        if worker is not None:
            log = stop(worker)
            assert worker.returncode == 0, log[-3000:]


def test_the_quickstart_worker_serves_and_the_blocks_are_all_seen() -> None:
    found = blocks()
    langs = [b.lang for b in found]
    assert langs.count("python") >= 4 and "bash" in langs
    lines = [ln for b in found if b.lang == "bash" for ln in shell_lines(b)]
    assert any(ln.startswith("conveyor worker jobs:app") for ln in lines)
    # no literal ellipsis standing in for code a reader would have to guess
    for block in found:
        if block.lang == "python":
            assert not re.search(r"\(\.\.\.\)|^\s*\.\.\.\s*$", block.code, re.M), block.line


def test_every_extra_named_exists() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = set(re.findall(r"conveyor-jobs\[([\w,]+)\]", README.read_text()))
    for group in named:
        for extra in group.split(","):
            assert extra in extras, f"README names extra {extra!r}, pyproject.toml lacks it"
    assert {"redis", "dashboard", "fastapi", "django", "flask"} <= {
        e for g in named for e in g.split(",")
    }


def test_integration_doc_blocks_are_valid_python_and_name_real_modules() -> None:
    """docs/integrations.md shows excerpts (``...`` bodies): each parses, each import resolves."""
    import ast
    import importlib
    import importlib.util

    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    found = re.findall(r"^ *```python\n(.*?)^ *```", text, re.M | re.S)
    assert len(found) >= 5
    for code in found:
        tree = ast.parse(textwrap.dedent(code))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "conveyor" in node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if node.module != "conveyor.contrib.django" or alias.name != "app":
                        assert hasattr(module, alias.name) or importlib.util.find_spec(
                            f"{node.module}.{alias.name}"
                        ), f"{node.module}.{alias.name}"
