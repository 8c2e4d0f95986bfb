"""Every ``conveyor`` command line README.md and docs/*.md show names a real command and real
options of it, checked against the click command tree (the same object ``conveyor --help``
prints), not by eye.

A command line is a code span or a line of a non-Python code block that starts with
``conveyor`` (after ``$``, ``VAR=value`` assignments or a path such as ``.venv/bin/``), or a
YAML ``command: ["conveyor", ...]`` list. Its words are walked down the command groups; every
word starting with ``-`` must be an option of the command reached (or of ``conveyor`` itself
before the command). A code span that is only an option (``--metrics-port``) must be an option
of some command, unless it belongs to another program (``OTHER_PROGRAMS``).
docs/benchmarks.md is left out: it names the benchmark scripts' options, not the CLI's.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from conveyor.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS.remove(ROOT / "docs" / "benchmarks.md")
#: options in code spans that belong to another program, and which
OTHER_PROGRAMS = {
    "--preload": "gunicorn (docs/design.md: a forked child's auto-batching buffer)",
    "--workers": "bench/cluster_scale.py (docs/scaling.md: its drain scenario)",
}
_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)


def _segments(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every code-block line (Python blocks excepted) and code span."""
    text = path.read_text(encoding="utf-8")
    for match in _FENCE.finditer(text):
        lang, body = match.group(2), match.group(3)
        line = text.count("\n", 0, match.start()) + 1
        if lang == "python":
            continue
        if lang == "yaml":
            for listed in re.finditer(r'\[("conveyor",[^\]]*)\]', body):
                yield line, " ".join(json.loads(f"[{listed.group(1)}]"))
            continue
        for i, code_line in enumerate(body.splitlines()):
            yield line + 1 + i, code_line
    for line, span in _spans(text):
        yield line, span


def _spans(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every code span outside fenced blocks."""
    prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for match in re.finditer(r"`([^`\n]+)`", prose):
        yield prose.count("\n", 0, match.start()) + 1, match.group(1)


def _command_lines(segment: str) -> Iterator[list[str]]:
    """The words after ``conveyor`` of every command in one segment."""
    segment = re.split(r"(?:^|\s)#|→", segment.replace("\\|", "|"))[0]
    for part in re.split(r"&&|;|\s\|\s", segment):
        words = part.split()
        while words and (re.fullmatch(r"\w+=\S*", words[0]) or words[0] in ("$", "exec")):
            words = words[1:]
        if words and words[0].startswith("ExecStart="):
            words[0] = words[0].split("=", 1)[1]
        if words and (words[0] == "conveyor" or words[0].endswith("/conveyor")):
            yield [w for word in words[1:] for w in word.strip("[]").split("|") if w]


def _options(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(param.opts + param.secondary_opts)
    return names


def problems(words: list[str]) -> list[str]:
    """What is wrong with ``conveyor <words>``: unknown commands and options."""
    command: click.Command = cli
    path = ["conveyor"]
    found = []
    for word in words:
        if word.startswith("-"):
            if word.split("=", 1)[0] not in _options(command):
                found.append(f"{' '.join(path)} has no option {word.split('=', 1)[0]}")
        elif isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), word)
            if sub is None:
                if word not in ("...", "…"):
                    found.append(f"{' '.join(path)} has no command {word!r}")
                break
            command, path = sub, [*path, word]
    return found


def _every_option() -> set[str]:
    names: set[str] = set()
    stack: list[click.Command] = [cli]
    while stack:
        command = stack.pop()
        names |= _options(command)
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            stack += [command.get_command(ctx, n) for n in command.list_commands(ctx)]  # type: ignore[misc]
    return names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_line_names_real_commands_and_options(doc: Path) -> None:
    wrong = [
        f"{doc.name}:{line}: {problem}  <- {segment.strip()}"
        for line, segment in _segments(doc)
        for words in _command_lines(segment)
        for problem in problems(words)
    ]
    assert wrong == []


def test_the_docs_show_many_command_lines() -> None:
    """The extraction finds the commands (a broken pattern would make the test above vacuous)."""
    lines = [w for doc in DOCS for _, s in _segments(doc) for w in _command_lines(s)]
    assert len(lines) > 100
    assert {words[0] for words in lines if words} >= {
        "worker",
        "scheduler",
        "dashboard",
        "status",
        "dlq",
        "limits",
        "migrate",
        "relay",
    }


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_option_span_is_an_option_of_some_command(doc: Path) -> None:
    known = _every_option() | set(OTHER_PROGRAMS)
    text = doc.read_text(encoding="utf-8")
    unknown = [
        f"{doc.name}:{line}: `{span}`"
        for line, span in _spans(text)
        if (name := re.match(r"--[a-z][\w-]*", span)) and name.group(0) not in known
    ]
    assert unknown == []


def test_a_misspelt_option_or_command_is_caught() -> None:
    """The check itself: planted mistakes are reported, real lines are not."""
    assert problems(["worker", "jobs:app", "--queues", "a:5,b", "-c", "8"]) == []
    assert problems(["dlq", "purge", "--older-than", "7d"]) == []
    assert problems(["worker", "--concurency", "8"]) == [
        "conveyor worker has no option --concurency"
    ]
    assert problems(["inspect", "ID"]) == ["conveyor has no command 'inspect'"]
    assert problems(["--url", "status"]) == ["conveyor has no option --url"]
    assert problems(["dlq", "show"]) == ["conveyor dlq has no command 'show'"]
    assert list(_command_lines("conveyor pause q && conveyor resume q  # --force")) == [
        ["pause", "q"],
        ["resume", "q"],
    ]


def _message_strings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal of a module that is not a docstring (messages the
    user reads: errors, log lines, help); f-strings with their placeholders kept as words."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    parts = {
        id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
    }
    skip = docstrings | parts  # an f-string's pieces are read with it
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{x}" for v in node.values)
            yield node.lineno, text
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        ):
            yield node.lineno, node.value


def test_the_commands_the_code_tells_users_to_run_exist() -> None:
    """An error message naming a command (``run `conveyor migrate --url <url>```) must name
    a real one: the outdated-schema error said ``--broker``, which `conveyor migrate` lacks."""
    assert _problems_under(ROOT / "src" / "conveyor") == []


def test_a_wrong_command_in_a_message_is_caught(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""Docstrings are not messages: `conveyor --nope`."""\n'
        'N = 5\nMSG = f"schema v{N}: run `conveyor migrate --broker <url>`"\n',
        encoding="utf-8",
    )
    found = [p.split(": ", 1)[1] for p in _problems_under(tmp_path)]
    assert found == ["conveyor migrate has no option --broker"]


def _problems_under(where: Path) -> list[str]:
    """Unknown commands or options in the ``conveyor ...`` lines the messages of the modules
    under ``where`` show (in backticks, or a whole string starting with ``conveyor``)."""
    found = []
    for path in sorted(where.rglob("*.py")):
        for line, text in _message_strings(path.read_text(encoding="utf-8")):
            for shown in re.findall(r"`(conveyor [^`\n]*)`|^(conveyor [a-z][^\n]*)", text):
                for words in _command_lines(shown[0] or shown[1]):
                    found += [f"{path.name}:{line}: {p}" for p in problems(words)]
    return found


def test_the_flask_command_line_names_real_options() -> None:
    """integrations.md's ``flask conveyor worker [...]`` line, against the group the Flask
    extension registers."""
    from conveyor.contrib.flask import FlaskConveyor, _cli_group

    text = " ".join((ROOT / "docs" / "integrations.md").read_text(encoding="utf-8").split())
    (line,) = re.findall(r"`flask conveyor ([^`]+)`", text)
    group = _cli_group(FlaskConveyor())
    words = [w.strip("[]") for w in line.split()]
    command = group.get_command(click.Context(group), words[0])
    assert command is not None, words[0]
    named = {w for w in words if w.startswith("--")}
    assert named and named <= _options(command)


def test_the_dashboard_address_shown_is_the_default() -> None:
    """``conveyor dashboard APP  # http://HOST:PORT`` in README.md and monitoring.md: the
    address a bare command serves on."""
    command = cli.get_command(click.Context(cli), "dashboard")
    assert command is not None
    defaults = {p.name: p.default for p in command.params}
    shown = {
        address
        for doc in DOCS
        for address in re.findall(
            r"^conveyor dashboard \S+\s+# (http://[\d.:]+)/?$", doc.read_text("utf-8"), re.M
        )
    }
    assert shown == {f"http://{defaults['host']}:{defaults['port']}"}
