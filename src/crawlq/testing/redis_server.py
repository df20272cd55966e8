"""Throwaway ``redis-server`` processes on free loopback ports, for tests and benchmarks.

Nothing here is faked: :class:`LocalRedis` starts the real server binary (found on
``$PATH`` or in ``$CRAWLQ_REDIS_SERVER``) in a folder of its own, and
:class:`LocalCluster` starts several with ``--cluster-enabled yes`` and joins them
with ``redis-cli --cluster create``. When the binary is missing, :class:`RedisUnavailable`
says how to install it; the test suite lets that fail the run rather than skip.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

from ..errors import CrawlqError


class RedisUnavailable(CrawlqError):
    """redis-server could not be found or started."""


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now. A cluster node also
    needs its bus port (port + 10000) free, so the port must be at most 55535."""
    if not cluster:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20000, 55535)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RedisUnavailable("no free pair of loopback ports for a Redis Cluster node")


def _binary(name: str) -> str:
    env = os.environ.get("CRAWLQ_REDIS_SERVER") if name == "redis-server" else None
    path = env or shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(
        f"/usr/bin/{name}") else None)
    if not path:
        raise RedisUnavailable(
            f"{name} not found: install it (Debian/Ubuntu: apt-get install redis-server; "
            "scripts/test.sh does this when run as root) or set $CRAWLQ_REDIS_SERVER")
    return path


class LocalRedis:
    """One redis-server on 127.0.0.1, its data in ``folder``; stop() or use ``with``."""

    def __init__(self, folder: Path, *, port: int | None = None,
                 appendonly: bool = False, appendfsync: str = "everysec",
                 extra: tuple[str, ...] = ()) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(cluster="--cluster-enabled" in extra)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        """The command line of the server."""
        return [
            _binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.folder), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync, "--protected-mode", "yes",
            "--logfile", str(self.folder / "redis.log"), *self.extra,
        ]

    def start(self, timeout: float = 20.0) -> LocalRedis:
        """Start the server and wait until it answers PING."""
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else b"").decode()
                log = (self.folder / "redis.log")
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RedisUnavailable(f"redis-server exited with {self.proc.returncode}: "
                                       f"{err}{tail}")
            if self.ping():
                return self
            time.sleep(0.05)
        self.stop()
        raise RedisUnavailable(f"redis-server did not answer on port {self.port} "
                               f"within {timeout:g} s")

    def ping(self) -> bool:
        """True if the server answers PING (and has loaded its data)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server: no shutdown save, only what the AOF already has."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> LocalRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalCluster:
    """A Redis Cluster of ``masters`` nodes, each with ``replicas`` replicas, on
    loopback. ``node_timeout``: milliseconds before a silent node counts as failing
    (its replica then takes over)."""

    def __init__(self, folder: Path, masters: int = 3, replicas: int = 0,
                 node_timeout: int = 5000) -> None:
        self.replicas = replicas
        self.node_timeout = node_timeout
        self.nodes = [self._node(Path(folder) / f"node{i}")
                      for i in range(masters * (1 + replicas))]

    def _node(self, folder: Path) -> LocalRedis:
        return LocalRedis(folder, extra=(
            "--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout)))

    @property
    def url(self) -> str:
        """A crawlq store URL that reaches the cluster through its first node."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0?cluster=1"

    def start(self, timeout: float = 30.0) -> LocalCluster:
        """Start every node, create the cluster and wait until it serves all slots."""
        for n in self.nodes:
            n.start()
        cli = _binary("redis-cli")
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        res = subprocess.run([cli, "--cluster", "create", *addrs, "--cluster-replicas",
                              str(self.replicas), "--cluster-yes"], capture_output=True,
                             timeout=60)
        if res.returncode != 0:
            self.stop()
            raise RedisUnavailable(f"redis-cli --cluster create failed: "
                                   f"{res.stdout.decode()[-1000:]}{res.stderr.decode()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run([cli, "-p", str(self.nodes[0].port), "cluster", "info"],
                                 capture_output=True, timeout=10).stdout
            # (and, with replicas, every replica in sync with its master)
            infos = [subprocess.run([cli, "-p", str(n.port), "info", "replication"],
                                    capture_output=True, timeout=10).stdout
                     for n in self.nodes] if self.replicas else []
            if b"cluster_state:ok" in out and all(
                    b"role:master" in i or b"master_link_status:up" in i for i in infos):
                return self
            time.sleep(0.1)
        self.stop()
        raise RedisUnavailable("the Redis cluster did not reach cluster_state:ok")

    def cli(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[bytes]:
        """Run ``redis-cli`` with ``args`` (e.g. ``--cluster reshard ...``); its output
        is captured."""
        return subprocess.run([_binary("redis-cli"), *args], capture_output=True,
                              timeout=timeout)

    def add_node(self, timeout: float = 30.0) -> LocalRedis:
        """Start one more master, without slots, and join it to the cluster (``redis-cli
        --cluster add-node``); returns it once every node knows it."""
        node = self._node(self.nodes[0].folder.parent / f"node{len(self.nodes)}").start()
        self.nodes.append(node)
        res = self.cli("--cluster", "add-node", f"127.0.0.1:{node.port}",
                       f"127.0.0.1:{self.nodes[0].port}", timeout=60)
        if res.returncode != 0:
            raise RedisUnavailable(f"redis-cli --cluster add-node failed: "
                                   f"{res.stdout.decode()[-1000:]}{res.stderr.decode()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [self.cli("-p", str(n.port), "cluster", "info", timeout=10).stdout
                     for n in self.nodes]
            if all(b"cluster_state:ok" in i and f"cluster_known_nodes:{len(self.nodes)}"
                   .encode() in i for i in infos):
                return node
            time.sleep(0.1)
        raise RedisUnavailable("the new node did not join the cluster")

    def stop(self) -> None:
        """Stop every node."""
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["LocalCluster", "LocalRedis", "RedisUnavailable", "free_port"]
