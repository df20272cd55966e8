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
(it answers from memory, each PutURLs message as it comes: grpcio's own cost per
message as a plain servicer spends it). Reported: URLs/s of each, the ratios, and
each server's CPU per URL in the GetURLs + ack phase.

The GetURLs + ack phase runs with two clients, each against a fresh server: grpcio's
generated stubs and message classes ("pb", what a Python crawler writes), and a client
that reads GetURLs' answers as bytes and writes each KnownURLItem by hand ("raw": the
least client CPU per URL grpcio allows, standing in for a client in a compiled
language). Client and server share the machine's cores, so a client's own CPU per URL
can bound the rate.

    python bench/bench_urlfrontier.py --urls 100000 --batch 1000 --store sqlite
    python bench/bench_urlfrontier.py --urls 50000 --rounds 5   # alternated, medians
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
from statistics import median
from typing import Any

from bench_crawl import cpu_seconds
from bench_serve import in_process, urls
from grpc import aio

from crawlq.serve.grpc_server import native_server
from crawlq.serve.grpc_wire import load_proto

# (the JSON API's benchmark's policy, URLs and in-process loop: the same work)
POLICY = {"min_delay": 0, "max_delay": 0, "delay_factor": 0, "concurrency": 1000}


def served(target: str, n: int, batch: int, pid: int,
           client: str) -> tuple[float, float, float]:
    return asyncio.run(_served(target, n, batch, pid, client))


async def _served(target: str, n: int, batch: int, pid: int,
                  client: str) -> tuple[float, float, float]:
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
        if client == "raw":
            done = await _get_and_ack_raw(pb, channel, n, batch)
        else:
            done = await _get_and_ack(pb, stub, n, batch)
        cpu = cpu_seconds(pid) - cpu
        return n / add_s, done / (time.perf_counter() - t), cpu / max(done, 1) * 1e6


async def _get_and_ack(pb: Any, stub: Any, n: int, batch: int) -> int:
    """GetURLs calls in a loop while one PutURLs stream, open throughout, answers each
    URL as it comes (as a crawler's spout and status updater do); returns the URLs
    answered. grpc.aio on the client: grpcio's synchronous streams cost a thread
    hand-off per message, about a third more client CPU per URL on this machine."""
    return await _stream(stub.GetURLs, stub.PutURLs(),
                         lambda info: pb.URLItem(known=pb.KnownURLItem(info=info)),
                         lambda ack: ack.status == pb.AckMessage.OK, pb, n, batch)


def _varint(n: int) -> bytes:
    """Protocol Buffers' base-128 varint of ``n`` >= 0."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


async def _get_and_ack_raw(pb: Any, channel: Any, n: int, batch: int) -> int:
    """:func:`_get_and_ack` with the messages as bytes: each URLInfo received is sent
    back as is inside a URLItem's KnownURLItem (field 2, then field 1: the info;
    refetchable_from_date left 0, done for good), and the acks are counted unread."""
    get = channel.unary_stream("/urlfrontier.URLFrontier/GetURLs",
                               request_serializer=pb.GetParams.SerializeToString,
                               response_deserializer=None)
    call = channel.stream_stream("/urlfrontier.URLFrontier/PutURLs",
                                 request_serializer=None, response_deserializer=None)()

    def known(info: bytes) -> bytes:
        item = b"\x0a" + _varint(len(info)) + info
        return b"\x12" + _varint(len(item)) + item

    return await _stream(get, call, known, lambda ack: True, pb, n, batch)


async def _stream(get: Any, call: Any, known: Any, ok: Any, pb: Any, n: int,
                  batch: int) -> int:
    """The loop of both clients: ``get`` (GetURLs) in a loop, each URL it hands out
    written to ``call`` (PutURLs) as ``known(info)``, until ``n`` acks came back."""
    done = 0

    async def acks() -> None:
        nonlocal done
        async for ack in call:
            assert ok(ack), ack
            done += 1
            if done == n:
                return

    reader = asyncio.ensure_future(acks())
    handed = 0
    while handed < n:
        got = 0
        async for info in get(pb.GetParams(max_queues=batch)):
            got += 1
            await call.write(known(info))
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
    left = urls(n)

    class Nothing(services.URLFrontierServicer):  # type: ignore[misc,name-defined]
        async def PutDiscovered(self, batches: Any, context: Any) -> Any:
            async for b in batches:
                yield pb.BatchAck(ID=b.ID, statuses=[pb.AckMessage.OK] * len(b.items))

        async def GetURLs(self, params: Any, context: Any) -> Any:
            # (each message made as it is sent, as any server must make the URLInfo
            # of the URLs it hands out)
            take = min(len(left), params.max_queues or 10_000)
            for u in left[:take]:
                yield pb.URLInfo(url=u, key=u.split("/")[2], crawlID="DEFAULT")
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


def run_against(args: list[str], target_of: Any, n: int, batch: int,
                client: str) -> tuple[float, float, float]:
    """Start a server process, run the client against it: (put/s, get+ack/s, the
    server's CPU µs per URL in the get+ack phase)."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        target = target_of(p)
        return served(target, n, batch, p.pid, client)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    ap.add_argument("--client", choices=["pb", "raw", "both"], default="both",
                    help="the GetURLs + ack client(s): grpcio's message classes, "
                         "hand-written bytes, or each in turn (default)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of crawlq and the do-nothing server, alternated; "
                         "medians reported (the ratio: of each round's)")
    ap.add_argument("--grpc-server", action="append", choices=["native", "grpcio"],
                    help="crawlq serve's gRPC server(s) to run, each in turn (repeat; "
                         "default: native where it was built, and grpcio)")
    ap.add_argument("--floor-server", metavar="PORT_FILE", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.floor_server:
        floor_server(a.floor_server, a.urls)
        return
    tmp = tempfile.mkdtemp(prefix="crawlq-bench-uf-")
    opts = [x for k, v in POLICY.items() for x in ("-o", f"{k}={v}")]

    def crawlq_target(p: subprocess.Popen[str]) -> str:
        assert p.stdout is not None
        p.stdout.readline()
        return p.stdout.readline().split(" on ", 1)[1].split()[0]

    port_file = os.path.join(tmp, "floor.port")

    def floor_target(p: subprocess.Popen[str]) -> str:
        deadline = time.monotonic() + 30
        path = Path(port_file)
        while not path.exists() or not path.read_text():
            assert time.monotonic() < deadline and p.poll() is None, "no floor server"
            time.sleep(0.05)
        return f"127.0.0.1:{path.read_text()}"

    clients = ["pb", "raw"] if a.client == "both" else [a.client]
    kinds = a.grpc_server or (["native", "grpcio"] if native_server() else ["grpcio"])
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for r in range(a.rounds):  # (crawlq and the floor alternate: a slow spell hits both)
        for client in clients:
            store = ("memory://" if a.store == "memory"
                     else f"sqlite:///{tmp}/served-{client}-{r}.db")
            for kind in kinds:
                rows.setdefault((f"crawlq-{kind}", client), []).append(run_against(
                    [sys.executable, "-m", "crawlq.cli", "--store",
                     store.replace(".db", f"-{kind}.db"), *opts, "serve", "--port", "0",
                     "--grpc-port", "0", "--grpc-server", kind], crawlq_target, a.urls,
                    a.batch, client))
            Path(port_file).unlink(missing_ok=True)
            rows.setdefault(("floor", client), []).append(run_against(
                [sys.executable, __file__, "--urls", str(a.urls), "--floor-server",
                 port_file], floor_target, a.urls, a.batch, client))
    local = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/local.db"
    l_add, l_lease = in_process(local, a.urls, a.batch)
    print(f"{a.urls:,} URLs over 500 hosts, batches of {a.batch}, store {a.store}, "
          f"politeness off; one client; {a.rounds} round(s)"
          + (", medians" if a.rounds > 1 else ""))
    print(f"{'':<30} {'put/s':>10} {'get+ack/s':>10} {'server CPU/URL':>15}")
    names = {f"crawlq-{k}": f"crawlq serve ({k})" for k in kinds}
    names["floor"] = "do-nothing grpcio server"
    for (server, client), runs in rows.items():
        add, lease, cpu = (median(x[k] for x in runs) for k in range(3))
        label = f"{names[server]}, {client}"
        print(f"{label:<30} {add:>10,.0f} {lease:>10,.0f} {cpu:>12.0f} µs")
    print(f"{'in-process':<30} {l_add:>10,.0f} {l_lease:>10,.0f}")
    for kind, client in ((k, c) for k in kinds for c in clients):
        served_runs, floor_runs = rows[f"crawlq-{kind}", client], rows["floor", client]
        # (each round's ratio against the floor run beside it, then their median)
        ratios = [s[1] / f[1] for s, f in zip(served_runs, floor_runs)]
        s_add, s_lease, s_cpu = (median(x[k] for x in served_runs) for k in range(3))
        f_cpu = median(x[2] for x in floor_runs)
        each = (" (rounds: " + ", ".join(f"{x:.2f}" for x in ratios) + ")"
                if len(ratios) > 1 else "")
        print(f"  {kind}, {client} client: crawlq over gRPC {s_add / l_add:.2f}x in-process add "
              f"(PutDiscovered), {s_lease / l_lease:.2f}x next+done (GetURLs + one PutURLs "
              f"message per URL); {median(ratios):.2f}x the do-nothing server's "
              f"get+ack{each}; its own work: {s_cpu - f_cpu:.0f} µs of server CPU per URL")


if __name__ == "__main__":
    main()
