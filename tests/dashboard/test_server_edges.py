"""The dashboard behind a real uvicorn: body caps (memory stays flat under a 64 MiB body),
forwarded headers trusted only from configured proxies, and the command line's options.

The body tests run ``conveyor dashboard`` in a subprocess so its RSS can be measured; the
hostile bodies are streamed from a generator, so the test never holds 64 MiB either.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.broker.memory import MemoryBroker
from conveyor.dashboard import create_app
from conveyor.dashboard.hardening import check_hosts
from conveyor.dashboard.security import DashboardConfig
from conveyor.dashboard.server import BackgroundServer
from conveyor.errors import ValidationError
from tests.support.hostile import HUGE_BODY_BYTES

from .conftest import AUTH, PASSWORD, TOKEN, USER, make_client

CHUNK = 64 * 1024
CONVEYOR = str(Path(sys.executable).parent / "conveyor")


def huge_body(total: int = HUGE_BODY_BYTES) -> Iterator[bytes]:
    """``total`` bytes of a JSON-looking body, one 64 KiB chunk at a time."""
    yield b'{"username": "'
    for _ in range(total // CHUNK):
        yield b"A" * CHUNK


def send_raw(port: int, path: str, headers: dict[str, str], chunked: bool) -> tuple[int, int]:
    """POST a huge streamed body; stop as soon as the server answers. (status, bytes sent)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += (
        "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {HUGE_BODY_BYTES}\r\n"
    )
    sock.sendall((head + "\r\n").encode())
    sent = 0
    sock.settimeout(3)
    try:
        for chunk in huge_body():
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered (or closed): stop sending
            sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if chunked else chunk)
            sent += len(chunk)
        else:
            sock.sendall(b"0\r\n\r\n" if chunked else b"")
    except OSError:  # reset, broken pipe or a full window: the server stopped reading
        pass
    sock.settimeout(10)
    reply = b""
    while b"\r\n" not in reply:
        data = sock.recv(4096)
        if not data:
            break
        reply += data
    sock.close()
    return int(reply.split(b" ", 2)[1]), sent


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dashboard_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``conveyor dashboard`` in a subprocess on a free loopback port."""
    port = free_port()
    env = dict(os.environ, CONVEYOR_DASHBOARD_TOKEN=TOKEN, CONVEYOR_DASHBOARD_PASSWORD=PASSWORD)
    cmd = [CONVEYOR, "dashboard", "--url", "memory://", "--port", str(port)]
    cmd += ["--allowed-host", "dash.example.com", "--forwarded-allow-ips", "10.9.8.7"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.1)
    yield proc, port
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def test_huge_bodies_are_refused_without_being_read(
    dashboard_process: tuple[subprocess.Popen[bytes], int],
) -> None:
    proc, port = dashboard_process
    json_ct = {"Content-Type": "application/json"}
    form_ct = {"Content-Type": "application/x-www-form-urlencoded"}
    api = {**json_ct, "Authorization": f"Bearer {TOKEN}"}
    send_raw(port, "/login", json_ct, chunked=False)  # warm up the code paths once
    before = rss_kib(proc.pid)
    for path, headers in (("/login", json_ct), ("/login", form_ct), ("/api/v1/jobs", api)):
        for chunked in (False, True):
            status, sent = send_raw(port, path, headers, chunked)
            assert status == 413, (path, chunked, status)
            assert sent < 16 * 1024 * 1024, (path, chunked, sent)  # stopped long before 64 MiB
    grown = rss_kib(proc.pid) - before
    assert grown < 8 * 1024, f"the dashboard's RSS grew by {grown} KiB"
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200


def test_the_command_line_options_reach_the_server(
    dashboard_process: tuple[subprocess.Popen[bytes], int],
) -> None:
    _, port = dashboard_process
    url = f"http://127.0.0.1:{port}/healthz"
    assert httpx.get(url, headers={"Host": "dash.example.com"}).status_code == 200
    assert httpx.get(url, headers={"Host": "rebind.attacker.example"}).status_code == 400


def test_body_caps_by_path(dash_app: Conveyor) -> None:
    with make_client(dash_app, max_api_body=200_000) as client:
        big_args = {"task": "add", "args": ["x" * 100_000, 1]}
        r = client.post("/api/v1/jobs", json=big_args, headers=AUTH)
        assert r.status_code == 201, r.text  # over the form cap, under the API cap
        r = client.post("/api/v1/jobs", json={"task": "add", "args": ["x" * 300_000]}, headers=AUTH)
        assert r.status_code == 413 and r.json()["field"] == "body"
        r = client.post("/login", data={"username": "u" * 70_000, "password": "p"})
        assert r.status_code == 413
        r = client.post("/login", content=b"{}", headers={"Content-Length": "12x"})
        assert r.status_code in (400, 413)


def start(app: Conveyor, **settings: Any) -> BackgroundServer:
    config = DashboardConfig(token=TOKEN, username=USER, password=PASSWORD, **settings)
    return BackgroundServer(app, "127.0.0.1", 0, config).start()


def bad_logins(server: BackgroundServer, n: int) -> list[int]:
    """``n`` wrong-password log-ins, each claiming another address in X-Forwarded-For."""
    codes = []
    with httpx.Client(base_url=server.url, timeout=10) as client:
        page = client.get("/login").text
        token = page.split('name="csrf_token" value="')[1].split('"')[0]
        for i in range(n):
            r = client.post(
                "/login",
                data={"username": USER, "password": "wrong-pass", "csrf_token": token},
                headers={"X-Forwarded-For": f"203.0.113.{i}"},
            )
            codes.append(r.status_code)
    return codes


def test_forwarded_for_from_loopback_is_not_trusted_by_default() -> None:
    app = Conveyor(MemoryBroker())
    server = start(app, login_per_minute=3)
    try:
        codes = bad_logins(server, 5)
    finally:
        server.stop()
    assert codes[:3] == [401, 401, 401] and codes[3:] == [429, 429], codes
    sources = {e["source"] for e in app.broker.log_read("audit") if e["action"] == "login"}
    assert sources == {"127.0.0.1"}


def test_forwarded_for_is_honoured_from_a_configured_proxy() -> None:
    app = Conveyor(MemoryBroker())
    server = start(app, login_per_minute=3, forwarded_allow_ips=("127.0.0.1",))
    try:
        codes = bad_logins(server, 5)
    finally:
        server.stop()
    assert codes == [401] * 5, codes  # each forwarded address has its own bucket
    sources = {e["source"] for e in app.broker.log_read("audit") if e["action"] == "login"}
    assert sources == {f"203.0.113.{i}" for i in range(5)}


def test_a_wildcard_bind_needs_allowed_hosts(dash_app: Conveyor) -> None:
    with pytest.raises(ValidationError, match="allowed-host"):
        BackgroundServer(dash_app, "0.0.0.0", 0, DashboardConfig(token=TOKEN))
    config = DashboardConfig(token=TOKEN, allowed_hosts=("dash.example.com",))
    check_hosts("0.0.0.0", config)
    web = create_app(dash_app, config, host="0.0.0.0")
    with TestClient(web, base_url="http://dash.example.com") as client:
        assert client.get("/healthz").status_code == 200
        for host in ("127.0.0.1", "0.0.0.0", "localhost"):
            assert client.get("/healthz", headers={"host": host}).status_code == 400
