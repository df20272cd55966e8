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

With ``--one-server`` each crawlq server serves every round (new URLs each time): the
steady state of a server that stays up, as a reference server given with ``--reference``
is run, each round's figures printed beside the medians (a JVM's warm-up shows there).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

from bench_crawl import cpu_seconds
from bench_serve import in_process, urls
from grpc import aio

from crawlq.serve.grpc_server import native_server
from crawlq.serve.grpc_wire import load_proto

# (the JSON API's benchmark's policy, URLs and in-process loop: the same work)
POLICY = {"min_delay": 0, "max_delay": 0, "delay_factor": 0, "concurrency": 1000}


JAVA_JARS = ("grpc-api", "grpc-context", "grpc-core", "grpc-netty", "grpc-protobuf",
             "grpc-protobuf-lite", "grpc-stub", "protobuf", "guava", "perfmark-api",
             "geronimo-annotation-1.3-spec", "error_prone_annotations", "jsr305",
             "netty-buffer", "netty-codec", "netty-codec-http", "netty-codec-http2",
             "netty-common", "netty-handler", "netty-handler-proxy", "netty-codec-socks",
             "netty-resolver", "netty-transport", "netty-transport-native-unix-common",
             "netty-transport-native-epoll")
"""Debian's jars (in /usr/share/java) the Java client is compiled and run with."""
JAVA_PACKAGES = ("openjdk-17-jdk-headless libgrpc-java protobuf-compiler "
                 "protobuf-compiler-grpc-java-plugin libprotobuf-java libguava-java "
                 "libnetty-java libperfmark-java libgeronimo-annotation-1.3-spec-java")


class Run(NamedTuple):
    """One client's run against one server: URLs/s and the server's CPU µs per URL."""

    put: float  # (PutDiscovered, URLs/s)
    getack: float  # (GetURLs + ack, URLs/s)
    cpu: float  # (the server's, per URL in the get+ack phase)
    rss: float  # (the server's resident memory after it, MB)
    put_cpu: float  # (the server's, per URL in the PutDiscovered phase)


def java_client(work: str) -> tuple[list[str] | None, str]:
    """Build bench/java/UfClient.java (its stubs made by protoc from crawlq's proto):
    the command that runs it, or None and what is missing."""
    here = Path(__file__).resolve().parent
    proto = here.parent / "src" / "crawlq" / "serve" / "urlfrontier.proto"
    jars = [Path("/usr/share/java") / f"{j}.jar" for j in JAVA_JARS]
    tools = [shutil.which(t) for t in ("java", "javac", "protoc")]
    plugin = Path("/usr/bin/grpc_java_plugin")
    missing = [str(j) for j in jars if not j.exists()] + [
        t for t, found in zip(("java", "javac", "protoc"), tools) if not found] + (
        [] if plugin.exists() else [str(plugin)])
    if missing:
        return None, (f"missing {', '.join(missing)} (Debian/Ubuntu: apt-get install "
                      f"{JAVA_PACKAGES})")
    gen, classes = Path(work) / "java-gen", Path(work) / "java-classes"
    gen.mkdir(exist_ok=True)
    classes.mkdir(exist_ok=True)
    cp = ":".join(map(str, jars))
    protoc = ["protoc", f"-I{proto.parent}", f"--java_out={gen}",
              f"--plugin=protoc-gen-grpc-java={plugin}", f"--grpc-java_out={gen}",
              str(proto)]
    for step in (protoc, None):
        step = step or ["javac", "-nowarn", "-encoding", "UTF-8", "--release", "11", "-cp",
                        cp, "-d", str(classes), *map(str, gen.rglob("*.java")),
                        str(here / "java" / "UfClient.java")]  # (after protoc: its stubs)
        run = subprocess.run(step, capture_output=True, text=True)
        if run.returncode != 0:
            return None, f"{step[0]} failed: {run.stderr.strip()[-500:]}"
    return ["java", "-cp", f"{classes}:{cp}", "UfClient"], ""


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid`` now, in MB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def served(target: str, n: int, batch: int, pid: int, client: str,
           tag: str = "", java: list[str] | None = None) -> Run:
    """The client's PutDiscovered, then GetURLs + ack, against ``target`` (the server's
    process ``pid``): their rates, the server's CPU per URL in each and its memory
    after (a :class:`Run`). ``tag``: in the URLs' paths, to make them new to a server
    that has served before. ``client``: pb, raw or java (``java``: the command that
    runs it)."""
    if client == "java":
        assert java is not None
        return _served_java(java, target, n, batch, pid, tag)
    return asyncio.run(_served(target, n, batch, pid, client, tag))


def _served_java(java: list[str], target: str, n: int, batch: int, pid: int,
                 tag: str) -> Run:
    """:func:`served` by the Java client; the server's CPU taken when the client says
    it is ready (its JVM up), when its PutDiscovered is over, and at its end."""
    p = subprocess.Popen([*java, target, str(n), str(batch), f"{tag}p"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdin is not None and p.stdout is not None
    ready = p.stdout.readline()  # (its JVM up, its channel made: PutDiscovered next)
    assert ready.startswith("ready"), ready
    put_cpu = cpu_seconds(pid)
    line = p.stdout.readline()
    assert line.startswith("put="), line
    cpu = cpu_seconds(pid)
    put_cpu = cpu - put_cpu
    p.stdin.write("go\n")
    p.stdin.flush()
    last = p.stdout.readline()
    cpu = cpu_seconds(pid) - cpu
    assert p.wait(60) == 0 and last.startswith("ok="), last
    got = dict(x.split("=") for x in (line + " " + last).split())
    assert int(got["ok"]) == n, f"{got['ok']} of {n} URLs taken"
    return Run(float(got["put"]), float(got["getack"]), cpu / n * 1e6, rss_mb(pid),
               put_cpu / n * 1e6)


async def _served(target: str, n: int, batch: int, pid: int,
                  client: str, tag: str) -> Run:
    pb, services = load_proto()
    todo = [u.replace(".example/p/", f".example/{tag}p/") for u in urls(n)]
    async with aio.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", 64 << 20)]) as channel:
        stub = services.URLFrontierStub(channel)
        t = time.perf_counter()
        put_cpu = cpu_seconds(pid)
        batches = (pb.DiscoveredBatch(ID=str(i), items=[pb.URLInfo(url=u) for u in
                                                        todo[i:i + batch]])
                   for i in range(0, n, batch))
        acks = [a async for a in stub.PutDiscovered(batches)]
        add_s = time.perf_counter() - t
        put_cpu = cpu_seconds(pid) - put_cpu
        ok = sum(list(a.statuses).count(pb.AckMessage.OK) for a in acks)
        assert ok == n, f"{ok} of {n} URLs taken"
        t = time.perf_counter()
        cpu = cpu_seconds(pid)
        if client == "raw":
            done = await _get_and_ack_raw(pb, channel, n, batch)
        else:
            done = await _get_and_ack(pb, stub, n, batch)
        cpu = cpu_seconds(pid) - cpu
        return Run(n / add_s, done / (time.perf_counter() - t), cpu / max(done, 1) * 1e6,
                   rss_mb(pid), put_cpu / n * 1e6)


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
                client: str, java: list[str] | None) -> Run:
    """Start a server process, run the client against it (see :func:`served`), stop
    the server."""
    p = start(args, target_of)
    try:
        return served(p.target, n, batch, p.process.pid, client, java=java)
    finally:
        p.stop()


class Started:
    """A server process started by :func:`start`, and the address it serves on."""

    def __init__(self, process: subprocess.Popen[str], target: str) -> None:
        self.process = process
        self.target = target

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)


def start(args: list[str], target_of: Any) -> Started:
    """Start a server process (``args``); ``target_of(process)``: the address it serves."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        return Started(p, target_of(p))
    except BaseException:
        p.kill()
        p.wait()
        raise


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
    ap.add_argument("--java-client", action="store_true",
                    help="also run each round with a Java client (bench/java/UfClient.java, "
                         "built here with javac and Debian's grpc-java jars)")
    ap.add_argument("--reference", metavar="HOST:PORT",
                    help="a URLFrontier server started beforehand (e.g. the reference "
                         "server built from its sources), run against in each round "
                         "beside crawlq with new URLs each time (its first rounds are "
                         "its JVM's warm-up: see the rounds); with --reference-pid")
    ap.add_argument("--reference-pid", type=int, metavar="PID",
                    help="the process of --reference, for its CPU")
    ap.add_argument("--one-server", action="store_true",
                    help="steady state: one crawlq serve process of each kind serves "
                         "every round and client (new URLs each time, as a --reference "
                         "server does), instead of a fresh one each time")
    ap.add_argument("--floor-server", metavar="PORT_FILE", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.reference and not a.reference_pid:
        ap.error("--reference needs --reference-pid (its CPU is measured)")
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
    java = None
    if a.java_client:
        java, why = java_client(tmp)
        if java is None:
            print(f"bench_urlfrontier: no Java client: {why}", flush=True)
        else:
            clients.append("java")
    if not a.reference:
        print("bench_urlfrontier: no reference server given (--reference): crawlq is "
              "measured against grpcio's do-nothing server only", flush=True)
    kinds = a.grpc_server or (["native", "grpcio"] if native_server() else ["grpcio"])
    rows: dict[tuple[str, str], list[Run]] = {}
    run = f"{int(time.time() * 1000) % 10**9:x}"

    def crawlq_args(kind: str, name: str) -> list[str]:
        store = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/{name}-{kind}.db"
        return [sys.executable, "-m", "crawlq.cli", "--store", store, *opts, "serve",
                "--port", "0", "--grpc-port", "0", "--grpc-server", kind]

    kept: dict[str, Started] = {}
    try:
        for kind in kinds if a.one_server else []:
            kept[kind] = start(crawlq_args(kind, "served"), crawlq_target)
        for r in range(a.rounds):  # (crawlq and the floor alternate: a slow spell hits both)
            for client in clients:
                for kind in kinds:
                    one = kept.get(kind)
                    rows.setdefault((f"crawlq-{kind}", client), []).append(
                        run_against(crawlq_args(kind, f"served-{client}-{r}"), crawlq_target,
                                    a.urls, a.batch, client, java) if one is None else
                        served(one.target, a.urls, a.batch, one.process.pid, client,
                               f"{run}r{r}{client}/", java))
                _reference_and_floor(a, r, client, run, rows, java, port_file, floor_target)
    finally:
        for one in kept.values():
            one.stop()
    report(a, rows, kinds, clients, tmp)
    shutil.rmtree(tmp, ignore_errors=True)


def _reference_and_floor(a: argparse.Namespace, r: int, client: str, run: str,
                         rows: dict[tuple[str, str], list[Run]],
                         java: list[str] | None, port_file: str, floor_target: Any) -> None:
    """Round ``r``'s runs of ``client`` against the reference (when given) and the
    do-nothing server."""
    if a.reference:
        rows.setdefault(("reference", client), []).append(served(
            a.reference, a.urls, a.batch, a.reference_pid, client,
            f"{run}r{r}{client}/", java))  # (new URLs to a server that stays up)
    Path(port_file).unlink(missing_ok=True)
    rows.setdefault(("floor", client), []).append(run_against(
        [sys.executable, __file__, "--urls", str(a.urls), "--floor-server",
         port_file], floor_target, a.urls, a.batch, client, java))


def report(a: argparse.Namespace,
           rows: dict[tuple[str, str], list[Run]],
           kinds: list[str], clients: list[str], tmp: str) -> None:
    """Print the table (medians; each round's figures too for a server that served
    every round: crawlq with --one-server, a reference) and the ratios; the in-process
    run's store in ``tmp``."""
    local = "memory://" if a.store == "memory" else f"sqlite:///{tmp}/local.db"
    l_add, l_lease = in_process(local, a.urls, a.batch)
    print(f"{a.urls:,} URLs over 500 hosts, batches of {a.batch}, store {a.store}, "
          f"politeness off; one client; {a.rounds} round(s)"
          + (", medians" if a.rounds > 1 else ""))
    print(f"{'':<30} {'put/s':>10} {'CPU/URL':>8} {'get+ack/s':>10} {'CPU/URL':>8} "
          f"{'RSS after':>10}   (CPU: the server's, µs)")
    names = {f"crawlq-{k}": f"crawlq serve ({k})" for k in kinds}
    names["floor"] = "do-nothing grpcio server"
    names["reference"] = f"reference {a.reference}"
    for (server, client), runs in rows.items():
        add, put_cpu, lease, cpu, rss = (median(getattr(x, k) for x in runs) for k in (
            "put", "put_cpu", "getack", "cpu", "rss"))
        label = f"{names[server]}, {client}"
        print(f"{label:<30} {add:>10,.0f} {put_cpu:>8.0f} {lease:>10,.0f} {cpu:>8.0f} "
              f"{rss:>7.0f} MB")
        if len(runs) > 1 and ((a.one_server and server != "floor") or server == "reference"):
            # (one server through every round: its warm-up shows round by round)
            print(f"{'':<4}rounds: put/s " + ", ".join(f"{x.put:,.0f}" for x in runs)
                  + "; get+ack/s " + ", ".join(f"{x.getack:,.0f}" for x in runs)
                  + "; CPU µs/URL " + ", ".join(f"{x.put_cpu:.0f}/{x.cpu:.0f}" for x in runs))
    print(f"{'in-process':<30} {l_add:>10,.0f} {l_lease:>10,.0f}")
    for kind, client in ((k, c) for k in kinds for c in clients):
        served_runs, floor_runs = rows[f"crawlq-{kind}", client], rows["floor", client]
        # (each round's ratio against the floor run beside it, then their median)
        ratios = [s.getack / f.getack for s, f in zip(served_runs, floor_runs)]
        s_add, s_lease, s_cpu = (median(getattr(x, k) for x in served_runs)
                                 for k in ("put", "getack", "cpu"))
        f_cpu = median(x.cpu for x in floor_runs)
        each = (" (rounds: " + ", ".join(f"{x:.2f}" for x in ratios) + ")"
                if len(ratios) > 1 else "")
        print(f"  {kind}, {client} client: crawlq over gRPC {s_add / l_add:.2f}x in-process add "
              f"(PutDiscovered), {s_lease / l_lease:.2f}x next+done (GetURLs + one PutURLs "
              f"message per URL); {median(ratios):.2f}x the do-nothing server's "
              f"get+ack{each}; its own work: {s_cpu - f_cpu:.0f} µs of server CPU per URL")
        if a.reference:
            ref = rows["reference", client]
            vs = [s.getack / f.getack for s, f in zip(served_runs, ref)]
            cpus = [s.cpu / f.cpu for s, f in zip(served_runs, ref)]
            puts = [s.put / f.put for s, f in zip(served_runs, ref)]
            put_cpus = [s.put_cpu / f.put_cpu if f.put_cpu else math.nan
                        for s, f in zip(served_runs, ref)]
            print(f"  {kind}, {client} client, against the reference: get+ack {_each(vs)}; "
                  f"server CPU per URL {_each(cpus)}; PutDiscovered {_each(puts)}, its "
                  f"server CPU per URL {_each(put_cpus)}")


def _each(ratios: list[float]) -> str:
    """Ratios of each round as the report gives them: their median, then each."""
    return f"{median(ratios):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)})"


if __name__ == "__main__":
    main()
