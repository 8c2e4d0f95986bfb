"""A private redis-server on a free loopback port, a tiny RESP client, and the Redis ceiling.

The harness never touches a Redis it did not start: it launches ``redis-server`` bound to
127.0.0.1 on a free port, in a temporary directory, with persistence off (``--save ''
--appendonly no``), waits until PING answers, and stops it by pid.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _encode(*args: str | int) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def redis_command(port: int, *args: str | int, timeout: float = 5.0) -> str:
    """Send one command to 127.0.0.1:port and return the raw first reply (simple/bulk/int)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(_encode(*args))
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, rest = buf.partition(b"\r\n")
        kind, value = head[:1], head[1:].decode()
        if kind == b"-":
            raise RuntimeError(f"redis error: {value}")
        if kind == b"$":
            size = int(value)
            if size < 0:
                return ""
            while len(rest) < size + 2:
                rest += s.recv(65536)
            return rest[:size].decode(errors="replace")
        return value


@dataclass
class RedisServer:
    """A running redis-server process owned by the harness."""

    port: int
    pid: int
    workdir: Path
    proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT`` (append ``/DB``)."""
        return f"redis://{HOST}:{self.port}"

    def command(self, *args: str | int) -> str:
        """Run one Redis command on this server."""
        return redis_command(self.port, *args)

    def flushdb(self, db: int) -> None:
        """FLUSHDB on one database (each system has its own DB number)."""
        with socket.create_connection((HOST, self.port), timeout=10) as s:
            s.sendall(_encode("SELECT", db) + _encode("FLUSHDB"))
            data = b""
            while data.count(b"\r\n") < 2:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        if b"-" in data[:1] or b"\r\n-" in data:
            raise RuntimeError(f"FLUSHDB {db} failed: {data!r}")

    def version(self) -> str:
        """The server's ``redis_version`` from INFO."""
        info = self.command("INFO", "server")
        m = re.search(r"redis_version:(\S+)", info)
        return m.group(1) if m else "?"

    def cpu_seconds(self) -> float:
        """The server's CPU time so far: ``used_cpu_sys + used_cpu_user`` from INFO cpu."""
        info = self.command("INFO", "cpu")
        found = dict(re.findall(r"^(used_cpu_(?:sys|user)):([\d.]+)", info, re.M))
        return float(found["used_cpu_sys"]) + float(found["used_cpu_user"])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by pid, SIGKILL after ``timeout``; remove the temp dir."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_redis(binary: str = "redis-server", wait: float = 10.0) -> RedisServer:
    """Start redis-server on a free 127.0.0.1 port in a temp dir and wait until PING answers."""
    exe = shutil.which(binary)
    if exe is None:
        raise RuntimeError("redis-server not found: apt-get install -y redis-server")
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-bench-redis-"))
    port = free_port()
    cmd = [
        exe,
        "--bind",
        HOST,
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
        "--logfile",
        str(workdir / "redis.log"),
        "--daemonize",
        "no",
        "--databases",
        "16",
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = RedisServer(port=port, pid=proc.pid, workdir=workdir, proc=proc)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (workdir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{log}")
        try:
            if redis_command(port, "PING", timeout=1.0) == "PONG":
                return server
        except OSError:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"redis-server on port {port} did not answer PING within {wait}s")


def ping_rtt_us(port: int, count: int = 2000) -> float:
    """Median round trip of PING on one connection, in microseconds (loopback cost here)."""
    samples = []
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            t0 = time.perf_counter()
            s.sendall(b"PING\r\n")
            if not s.recv(64).startswith(b"+PONG"):
                raise RuntimeError("unexpected PING reply")
            samples.append(time.perf_counter() - t0)
    samples.sort()
    return samples[len(samples) // 2] * 1e6


_RPS = re.compile(r"^([A-Za-z_ ]+?): ([\d.]+) requests per second")


def parse_benchmark(output: str) -> dict[str, float]:
    """Parse ``redis-benchmark -q`` output into ``{"SET": rps, "LPUSH": rps, ...}``."""
    result: dict[str, float] = {}
    for line in re.split(r"[\r\n]+", output):
        m = _RPS.match(line.strip())
        if m:
            result[m.group(1).strip().upper()] = float(m.group(2))
    return result


def redis_ceiling(
    port: int, requests: int = 100_000, binary: str = "redis-benchmark"
) -> dict[str, dict[str, float]]:
    """Raw Redis throughput on this machine: SET, LPUSH, RPOP unpipelined and with -P 16.

    Runs ``redis-benchmark -h 127.0.0.1 -p PORT -q -t set,lpush,rpop -n REQUESTS [-P 16]``
    against the harness's own server (on DB 0, flushed afterwards) and returns
    ``{"unpipelined": {...}, "pipelined_16": {...}}`` in requests per second.
    """
    exe = shutil.which(binary)
    if exe is None:
        raise RuntimeError("redis-benchmark not found (it ships with redis-server / redis-tools)")
    out: dict[str, dict[str, float]] = {}
    for label, extra in (("unpipelined", []), ("pipelined_16", ["-P", "16"])):
        cmd = [
            exe,
            "-h",
            HOST,
            "-p",
            str(port),
            "-q",
            "-t",
            "set,lpush,rpop",
            "-n",
            str(requests),
            *extra,
        ]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
        out[label] = parse_benchmark(run.stdout)
    redis_command(port, "FLUSHALL")
    out["ping_rtt_us"] = {"median": ping_rtt_us(port)}
    return out
