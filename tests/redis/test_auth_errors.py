"""Wrong credentials or configuration fail fast with their own error, not BrokerUnavailable."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor import BrokerAuthError, BrokerConfigError, BrokerUnavailable, Conveyor
from conveyor.worker.loop import EXIT_CONFIG
from tests.support.redis_proc import RedisServer

PASSWORD = "s3cret-pw"


def _url(server: RedisServer, auth: str, db: int = 0) -> str:
    return f"redis://{auth}127.0.0.1:{server.port}/{db}"


def test_wrong_or_missing_password_raises_broker_auth_error(
    make_server: Callable[..., RedisServer],
) -> None:
    server = make_server(password=PASSWORD)
    for auth in (":wrong@", ""):
        app = Conveyor(_url(server, auth))
        began = time.monotonic()
        with pytest.raises(BrokerAuthError) as info:
            app.enqueue("t")
        assert time.monotonic() - began < 5
        assert not isinstance(info.value, BrokerUnavailable | ConnectionError)
        assert "credentials" in str(info.value)
        app.close()
    good = Conveyor(_url(server, f":{PASSWORD}@"))
    assert good.enqueue("t").id  # the right password works
    good.close()


def test_a_database_the_server_does_not_have_is_a_config_error(
    make_server: Callable[..., RedisServer],
) -> None:
    server = make_server(password=PASSWORD)
    app = Conveyor(_url(server, f":{PASSWORD}@", db=999))
    with pytest.raises(BrokerConfigError) as info:
        app.enqueue("t")
    assert not isinstance(info.value, BrokerUnavailable)
    app.close()


def test_worker_exits_at_once_with_a_clear_message(
    make_server: Callable[..., RedisServer], tmp_path: Path
) -> None:
    server = make_server(password=PASSWORD)
    (tmp_path / "authapp.py").write_text(
        textwrap.dedent(f"""
        from conveyor import Conveyor
        app = Conveyor({_url(server, ":wrong@")!r})

        @app.task
        def t() -> None:
            pass
    """)
    )
    for extra in ([], ["--no-supervisor"]):
        began = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "conveyor.cli.main", "worker", "authapp:app", *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == EXIT_CONFIG, (proc.returncode, proc.stderr[-2000:])
        assert time.monotonic() - began < 30
        assert "refused the credentials" in proc.stderr
        assert proc.stderr.count("Traceback") == 0, proc.stderr[-3000:]
