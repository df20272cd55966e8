#!/usr/bin/env python3
"""``crawlq serve``'s URLFrontier gRPC API against the same store called in-process.

A ``crawlq serve`` process on free loopback ports and one grpcio client in this
process, politeness off (as the figures URLFrontier's reference server reports):

- **PutDiscovered**: URLs over 500 hosts sent as batches of ``--batch`` (one stream);
- **GetURLs + ack**: GetURLs calls of up to ``--batch`` URLs in a loop while one PutURLs
  stream, open throughout, answers each URL with one KnownURLItem message (done for
  good) as it comes, until every URL is done.

The same work is then done in-process on a store of the same kind (``add`` in batches;
``next(batch)`` and ``done``), and over gRPC against a server that does no work at all
(it answers from memory: grpcio's own cost per message, the floor of any Python
URLFrontier server). Reported: URLs/s of each, the ratios, and each server's CPU per
URL in the GetURLs + ack phase.

    python bench/bench_urlfrontier.py --urls 100000 --batch 1000 --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_serve import in_process, urls
from grpc import aio

from crawlq.serve.grpc_base import load_proto

# (the JSON API's benchmark's policy, URLs and in-process loop: the same work)
POLICY = {"min_delay": 0, "max_delay": 0, "delay_factor": 0, "concurrency": 1000}


def served(target: str, n: int, batch: int, pid: int) -> tuple[float, float, float]:
    return asyncio.run(_served(target, n, batch, pid))


async def _served(target: str, n: int, batch: int, pid: int) -> tuple[float, float, float]:
    pb, services = load_proto()
    todo = urls(n)
    async with aio.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 64 << 20)]) as channel:
        stub = services.URLFrontierStub(channel)
        t = time.perf_counter()
        batches = (pb.DiscoveredBatch(ID=str(i), items=[pb.URLInfo(url=u) for u in
                                                        todo[i:i + batch]])
                   for i in range(0, n, batch))
        acks = [a async for a in stub.PutDiscovered(batches)]
        add_s = time.perf_counter() - t
        ok = sum(list(a.statuses).count(pb.AckMessage.OK) for a in acks)
        assert ok == n, f"{ok} of {n} URLs taken"
        t = time.perf_counter()
        cpu = cpu_seconds(pid)
        done = await _get_and_ack(pb, stub, n, batch)
        cpu = cpu_seconds(pid) - cpu
        return n / add_s, done / (time.perf_counter() - t), cpu / max(done, 1) * 1e6


async def _get_and_ack(pb: Any, stub: Any, n: int, batch: int) -> int:
    """GetURLs calls in a loop while one PutURLs stream, open throughout, answers each
    URL as it comes (as a crawler's spout and status updater do); returns the URLs
    answered OK. grpc.aio on the client: grpcio's synchronous streams cost a thread
    hand-off per message, about a third more client CPU per URL on this machine."""
    call = stub.PutURLs()
    done = 0

    async def acks() -> None:
        nonlocal done
        async for ack in call:
            assert ack.status == pb.AckMessage.OK
            done += 1
            if done == n:
                return

    reader = asyncio.ensure_future(acks())
    handed = 0
    while handed < n:
        got = 0
        async for info in stub.GetURLs(pb.GetParams(max_queues=batch)):
            got += 1
            await call.write(pb.URLItem(known=pb.KnownURLItem(info=info)))
        handed += got
        if not got:
            await asyncio.sleep(0.001)
    await reader
    await call.done_writing()
    return done


def floor_server(port_file: str, n: int) -> None:
    """A URLFrontier server that does nothing: it hands out ``n`` made-up URLs and acks
    whatever comes (run in a process of its own by ``--floor-server``)."""
    import asyncio

    from grpc import aio

    pb, services = load_proto()
    left = [pb.URLInfo(url=u, key=u.split("/")[2], crawlID="DEFAULT") for u in urls(n)]

    class Nothing(services.URLFrontierServicer):  # type: ignore[misc,name-defined]
        async def PutDiscovered(self, batches: Any, context: Any) -> Any:
            async for b in batches:
                yield pb.BatchAck(ID=b.ID, statuses=[pb.AckMessage.OK] * len(b.items))

        async def GetURLs(self, params: Any, context: Any) -> Any:
            take = min(len(left), params.max_queues or 10_000)
            for info in left[:take]:
                yield info
            del left[:take]

        async def PutURLs(self, items: Any, context: Any) -> Any:
            async for m in items:
                yield pb.AckMessage(ID=m.ID or m.known.info.url, status=pb.AckMessage.OK)

    async def run() -> None:
        server = aio.server()
        services.add_URLFrontierServicer_to_server(Nothing(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        with open(port_file, "w") as fh:
            fh.write(str(port))
        await server.wait_for_termination()

    asyncio.run(run())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_against(args: list[str], target_of: Any, n: int, batch: int,
                ) -> tuple[float, float, float]:
    """Start a server process, run the client against it: (put/s, get+ack/s, the
    server's CPU µs per URL in the get+ack phase)."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        target = target_of(p)
        return served(target, n, batch, p.pid)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    ap.add_argument("--floor-server", metavar="PORT_FILE", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.floor_server:
        floor_server(a.floor_server, a.urls)
        return
    tmp = tempfile.mkdtemp(prefix="crawlq-bench-uf-")
    store = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/served.db"
    opts = [x for k, v in POLICY.items() for x in ("-o", f"{k}={v}")]

    def crawlq_target(p: subprocess.Popen[str]) -> str:
        assert p.stdout is not None
        p.stdout.readline()
        return p.stdout.readline().split(" on ", 1)[1].split()[0]

    s_add, s_lease, s_cpu = run_against(
        [sys.executable, "-m", "crawlq.cli", "--store", store, *opts, "serve", "--port",
         "0", "--grpc-port", "0"], crawlq_target, a.urls, a.batch)
    port_file = os.path.join(tmp, "floor.port")

    def floor_target(p: subprocess.Popen[str]) -> str:
        deadline = time.monotonic() + 30
        path = Path(port_file)
        while not path.exists() or not path.read_text():
            assert time.monotonic() < deadline and p.poll() is None, "no floor server"
            time.sleep(0.05)
        return f"127.0.0.1:{path.read_text()}"

    f_add, f_lease, f_cpu = run_against(
        [sys.executable, __file__, "--urls", str(a.urls), "--floor-server", port_file],
        floor_target, a.urls, a.batch)
    local = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/local.db"
    l_add, l_lease = in_process(local, a.urls, a.batch)
    print(f"{a.urls:,} URLs over 500 hosts, batches of {a.batch}, store {a.store}, "
          "politeness off; one client")
    print(f"{'':<22} {'put/s':>10} {'get+ack/s':>10} {'server CPU/URL':>15}")
    print(f"{'crawlq serve (gRPC)':<22} {s_add:>10,.0f} {s_lease:>10,.0f} {s_cpu:>12.0f} µs")
    print(f"{'do-nothing gRPC server':<22} {f_add:>10,.0f} {f_lease:>10,.0f} {f_cpu:>12.0f} µs")
    print(f"{'in-process':<22} {l_add:>10,.0f} {l_lease:>10,.0f}")
    print(f"  crawlq over gRPC: {s_add / l_add:.2f}x in-process add (PutDiscovered), "
          f"{s_lease / l_lease:.2f}x next+done (GetURLs + one PutURLs message per URL)")
    print(f"  crawlq over gRPC: {s_add / f_add:.2f}x and {s_lease / f_lease:.2f}x the "
          f"do-nothing server's rates; its own work: {s_cpu - f_cpu:.0f} µs of server "
          "CPU per URL")

if __name__ == "__main__":
    main()
