"""Start and stop real ``redis-server`` processes for tests: single nodes and a 3-node cluster.

Each server runs Debian's ``redis-server`` binary on a free 127.0.0.1 port, in its own temp
directory, and is stopped by pid. Never a mock: the Redis backend is tested against the real thing.

* ``RedisServer(tmpdir, aof=True)`` — optional AOF with ``appendfsync always``; ``kill()``
  (SIGKILL, like a crash) and ``start()`` again on the same port and directory.
* ``RedisCluster(tmpdir)`` — three ``--cluster-enabled yes`` nodes joined with
  ``redis-cli --cluster create … --cluster-replicas 0 --cluster-yes``; ready when CLUSTER INFO
  says ``cluster_state:ok`` on every node.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def available() -> bool:
    """True when the redis-server and redis-cli binaries are installed."""
    return os.access(REDIS_SERVER, os.X_OK) and os.access(REDIS_CLI, os.X_OK)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(cluster: bool = False) -> int:
    """A free loopback port; for cluster nodes also ``port + 10000`` (the bus port) is free."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(20000, 55000)
        if _port_free(port) and (not cluster or _port_free(port + 10000)):
            return port
    raise RuntimeError("no free port found")


def cli(
    port: int, *args: str, timeout: float = 10.0, tls: bool = False, password: str | None = None
) -> str:
    """Run ``redis-cli -p port args...`` and return its stdout (raises on a non-zero exit)."""
    extra = ["--tls", "--insecure"] if tls else []
    if password is not None:
        extra += ["-a", password, "--no-auth-warning"]
    out = subprocess.run(
        [REDIS_CLI, "-h", "127.0.0.1", "-p", str(port), *extra, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return out.stdout


class RedisServer:
    """One redis-server process on loopback; ``url`` is ``redis://127.0.0.1:<port>/0``."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        aof: bool = False,
        extra: Sequence[str] = (),
        cluster: bool = False,
        tls: bool = False,
        password: str | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(cluster)
        self.aof = aof
        self.extra = list(extra)
        self.cluster = cluster
        self.tls = tls
        self.password = password  # --requirepass; ``url`` carries it
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL a broker connects to (``rediss://`` without certificate checks for TLS)."""
        auth = f":{self.password}@" if self.password is not None else ""
        if self.tls:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_cert_reqs=none"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self.proc.pid if self.proc else None

    def args(self) -> list[str]:
        """The command line."""
        port = (
            ["--port", "0", "--tls-port", str(self.port), *self._tls_files()]
            if self.tls
            else ["--port", str(self.port)]
        )
        argv = [
            REDIS_SERVER,
            *port,
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--save",
            "",
            "--logfile",
            str(self.dir / "redis.log"),
            "--protected-mode",
            "no",
        ]
        if self.aof:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        if self.cluster:
            config = str(self.dir / f"nodes-{self.port}.conf")
            argv += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                config,
                "--cluster-node-timeout",
                "5000",
            ]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        return argv + self.extra

    def _tls_files(self) -> list[str]:
        """A self-signed certificate (made with openssl on first use); clients need no cert."""
        cert, key = self.dir / "cert.pem", self.dir / "key.pem"
        if not cert.exists():
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    "/CN=127.0.0.1",
                    "-keyout",
                    str(key),
                    "-out",
                    str(cert),
                ],
                capture_output=True,
                check=True,
                timeout=60,
            )
        return [
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(cert),
            "--tls-auth-clients",
            "no",
        ]

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the process and wait until it answers PING (and has loaded its data)."""
        self.proc = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.dir
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {log}")
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                reply = cli(self.port, "PING", timeout=2, tls=self.tls, password=self.password)
                if reply.strip() == "PONG":
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed beyond what fsync already wrote)."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        """Stop the server by pid (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisSentinel:
    """One ``redis-server --sentinel`` process monitoring a master as ``mymaster``."""

    def __init__(self, directory: Path, master_port: int, name: str = "mymaster") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.name = name
        self.master_port = master_port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> RedisSentinel:
        """Write the config, start the sentinel, wait until it knows the master."""
        conf = self.dir / "sentinel.conf"
        monitor = f"sentinel monitor {self.name} 127.0.0.1 {self.master_port} 1"
        conf.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n{monitor}\n")
        quiet = subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [REDIS_SERVER, str(conf), "--sentinel"], stdout=quiet, stderr=quiet
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                reply = cli(self.port, "SENTINEL", "get-master-addr-by-name", self.name, timeout=2)
                if str(self.master_port) in reply:
                    return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("sentinel did not start")

    def stop(self) -> None:
        """Stop the sentinel by pid."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None


class RedisCluster:
    """Three cluster-enabled nodes joined into one cluster (no replicas)."""

    def __init__(self, directory: Path, nodes: int = 3) -> None:
        ports: list[int] = []
        while len(ports) < nodes:
            port = free_port(cluster=True)
            if all(abs(port - p) > 1 and port + 10000 != p and p + 10000 != port for p in ports):
                ports.append(port)
        self.nodes = [
            RedisServer(Path(directory) / f"node{p}", port=p, cluster=True) for p in ports
        ]

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL listing every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/0"

    @property
    def plain_url(self) -> str:
        """A plain ``redis://`` URL of the first node (cluster mode is auto-detected)."""
        return self.nodes[0].url

    def start(self, timeout: float = 30.0) -> RedisCluster:
        """Start the nodes, create the cluster, wait for ``cluster_state:ok`` on every node."""
        for node in self.nodes:
            node.start()
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            check=True,
            timeout=60,
        )
        deadline = time.monotonic() + timeout
        while True:
            infos = [cli(n.port, "CLUSTER", "INFO") for n in self.nodes]
            if all(
                "cluster_state:ok" in i
                and "cluster_slots_assigned:16384" in i
                and f"cluster_known_nodes:{len(self.nodes)}" in i
                for i in infos
            ):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"cluster did not become ok: {infos}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop every node by pid."""
        for node in self.nodes:
            node.stop()
