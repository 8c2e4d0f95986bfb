"""An integer beyond 64 bits in ``--args`` / ``--kwargs`` is refused naming the option, as
``enqueue`` refuses it from Python (``UNENCODABLE``; the API: ``test_api_big_ints.py``).

orjson reads such an integer as a float without a word: ``conveyor enqueue add --args
'[18446744073709551616]'`` stored the argument ``1.8446744073709552e+19`` (another value, and a
float where the task expected an int).
"""

from __future__ import annotations

import pytest

from conveyor import Conveyor

from .conftest import run

BIG = ["18446744073709551616", "-9223372036854775809", "1" + "0" * 40]


@pytest.mark.parametrize("number", BIG)
def test_the_cli_refuses_an_integer_beyond_64_bits(
    cli_app: tuple[Conveyor, str], number: str
) -> None:
    app, target = cli_app
    for option, raw in (("--args", f"[1, {number}]"), ("--kwargs", f'{{"a": {{"b": {number}}}}}')):
        result = run("enqueue", "add", option, raw, "--app", target)
        assert result.exit_code == 2, (result.exit_code, result.output[-500:])
        assert f"'{option}'" in result.output and "64 bits" in result.output, result.output
    assert app.search().total == 0


def test_the_cli_keeps_64_bit_integers_exact(cli_app: tuple[Conveyor, str]) -> None:
    app, target = cli_app
    result = run(
        "enqueue", "add", "--args", "[18446744073709551615, -9223372036854775808]", "--app", target
    )
    assert result.exit_code == 0, result.output
    (job,) = app.search().items
    assert job.args == [2**64 - 1, -(2**63)]
