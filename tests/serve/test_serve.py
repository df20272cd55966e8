"""``crawlq serve``: a real server process on a free loopback port, called with a real
HTTP client (urllib); and the CLI's done / fail / retry on the leases next prints."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from crawlq.serve.grpc_wire import load_proto
from crawlq.testing.redis_server import LocalRedis


@contextmanager
def server(store: str, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    p = subprocess.Popen([sys.executable, "-m", "crawlq.cli", "--store", store, *args,
                          "serve", "--port", "0", "--grpc-port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert "on http://127.0.0.1:" in line, (line, p.stderr.read() if p.stderr else "")
        yield line.split(" on ", 1)[1].split()[0].rstrip("/"), p
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(10)


def call(base: str, path: str, body: Any = None, token: str | None = None,
         raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method="POST" if data else "GET")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as exc:
        text, status = exc.read().decode(), exc.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def test_the_json_api_adds_leases_and_answers(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"
    with server(store, "-o", "min_delay=0", "-o", "max_delay=0") as (base, _):
        status, r = call(base, "/v1/add", {"requests": [
            "https://a.example/1", "https://b.example/1", {"url": "https://c.example/1",
                                                          "priority": 5}, "ftp://x/"]})
        assert status == 200 and r["added"] == 3
        assert [x["reason"] for x in r["rejected"]] == ["bad-scheme"]
        status, r = call(base, "/v1/next", {"n": 2})
        leases = r["leases"]
        assert status == 200 and len(leases) == 2
        assert leases[0]["url"] == "https://c.example/1"  # the highest priority first
        status, r = call(base, "/v1/ack", {"leases": [leases[0]["lease"]]})
        assert (status, r["held"]) == (200, 1)
        status, r = call(base, "/v1/ack", {"leases": [leases[1]["lease"]],
                                           "outcome": "failed", "error": "HTTP 500"})
        assert (status, r["held"]) == (200, 1)
        status, r = call(base, "/v1/ack", {"leases": [leases[0]["lease"]]})
        assert (status, r["held"], r["late"]) == (200, 0, 1)  # answered before
        status, s = call(base, "/v1/stats")
        assert (s["done"], s["failed"], s["queued"], s["leased"]) == (1, 1, 2, 0)
        status, qs = call(base, "/v1/queues?n=5")
        assert status == 200 and {q["key"] for q in qs["queues"]} >= {"a.example"}
        # Bad input: a clear status and error, and nothing changed.
        for path, body, want in (
                ("/v1/ack", {"leases": ["nonsense"]}, 400),
                ("/v1/ack", {"leases": ["1.0"], "outcome": "maybe"}, 400),
                ("/v1/next", {"n": 10**9}, 413),
                ("/v1/next", {"n": -1}, 400),
                ("/v1/add", {"requests": [{"url": "https://d.example/", "depth": "x"}]}, 400),
                ("/v1/add", {"requests": "https://d.example/"}, 400),
                ("/v1/nowhere", {}, 404)):
            status, r = call(base, path, body)
            assert status == want and "error" in r, (path, status, r)
        status, r = call(base, "/v1/add", raw=b"{not json")
        assert status == 400 and "not JSON" in r["error"]
        status, text = call(base, "/metrics")
        assert status == 200
        assert "crawlq_done_total 1.0" in text and "crawlq_queued 2.0" in text
        assert 'crawlq_call_seconds_count{call="add"}' in text
        assert 'crawlq_rejected_total{reason="bad-scheme"} 1.0' in text
        assert call(base, "/v1/stats")[1]["added"] == 3  # (the bad calls added nothing)


def test_leases_outlive_a_killed_server_and_a_locked_store_is_a_503(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/s.db"
    with server(store, "-o", "busy_timeout=0.3") as (base, p):
        call(base, "/v1/add", {"requests": ["https://a.example/1", "https://b.example/1"]})
        (lease,) = call(base, "/v1/next", {"n": 1})[1]["leases"]
        p.send_signal(signal.SIGKILL)
        p.wait()
    with server(store, "-o", "busy_timeout=0.3") as (base, _):
        s = call(base, "/v1/stats")[1]
        assert (s["leased"], s["queued"]) == (1, 1)  # the lease survived the kill
        assert call(base, "/v1/ack", {"leases": [lease["lease"]]})[1]["held"] == 1
        holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            status, r = call(base, "/v1/next", {"n": 1})
            assert status == 503 and "locked" in r["error"]
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        status, r = call(base, "/v1/next", {"n": 1})  # the server is still up
        assert status == 200 and r["leases"][0]["url"] == "https://b.example/1"


def test_a_token_is_needed_when_one_is_set(tmp_path: Path) -> None:
    env_token = "s3cret"
    p = subprocess.Popen([sys.executable, "-m", "crawlq.cli", "--store", "memory://",
                          "serve", "--port", "0", "--grpc-port", "0"],
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "CRAWLQ_SERVE_TOKEN": env_token})
    try:
        assert p.stdout is not None
        base = p.stdout.readline().split(" on ", 1)[1].split()[0].rstrip("/")
        status, r = call(base, "/v1/stats")
        assert status == 401 and "Bearer" in r["error"]
        assert call(base, "/v1/stats", token="wrong")[0] == 401
        assert call(base, "/v1/stats", token=env_token)[0] == 200
        assert call(base, "/metrics")[0] == 401
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)


def test_the_cli_answers_what_it_leased(tmp_path: Path) -> None:
    env = {**os.environ, "CRAWLQ_STORE": f"sqlite:///{tmp_path}/c.db"}

    def crawlq(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "crawlq.cli", *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=60)

    assert crawlq("-o", "min_delay=0", "add", "https://a.example/1", "https://b.example/1",
                  "https://c.example/1").returncode == 0
    out = crawlq("next", "-n", "3").stdout.splitlines()
    recs = {json.loads(line)["url"]: json.loads(line) for line in out}
    done = crawlq("done", recs["https://a.example/1"]["lease"])
    assert done.returncode == 0 and "answered 1 lease" in done.stdout
    failed = crawlq("fail", "-", "--error", "HTTP 503",
                    stdin=json.dumps(recs["https://b.example/1"]) + "\n")
    assert failed.returncode == 0 and "answered 1" in failed.stdout
    retried = crawlq("retry", recs["https://c.example/1"]["lease"], "--after", "0")
    assert retried.returncode == 0
    again = crawlq("done", recs["https://a.example/1"]["lease"])
    assert "had expired or were answered before" in again.stdout
    bad = crawlq("done", "not-a-lease")
    assert bad.returncode == 2 and bad.stderr.startswith("crawlq: error: not a lease handle")
    s = json.loads(crawlq("stats", "--json").stdout)
    assert (s["done"], s["failed"], s["retried"], s["leased"]) == (1, 1, 2, 0)


def test_a_servers_pause_stays_out_of_crawlq_dump_and_load(tmp_path: Path) -> None:
    """The active flag is the server's state on its store, not the crawl's: ``crawlq
    dump`` leaves it out, and ``crawlq load`` of a dump that carries one (an older
    crawlq's) leaves the flag of the store loaded into as it was: the load does not
    pause that store's server."""
    paused, other = f"sqlite:///{tmp_path}/paused.db", f"sqlite:///{tmp_path}/other.db"
    with server(paused) as (base, _):
        assert call(base, "/v1/add", {"requests": ["https://a.example/1"]})[1]["added"] == 1
        assert call(base, "/v1/active", {"active": False})[1] == {"active": False}

    def crawlq(store: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "crawlq.cli", "--store", store, *args],
                              capture_output=True, text=True, timeout=60)

    dump = tmp_path / "dump.jsonl"
    assert crawlq(paused, "dump", str(dump)).returncode == 0
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert [r["request"]["url"] for r in records if r["type"] == "entry"] == [
        "https://a.example/1"]
    assert not [r for r in records if r["type"] == "value"]
    records.append({"type": "value", "name": "crawlq:serve:active", "value_b64": "MA==",
                    "expires": None})  # b"0", as a dump of before it was left out
    dump.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert crawlq(other, "load", str(dump)).returncode == 0
    with server(other) as (base, _):
        assert call(base, "/v1/active")[1] == {"active": True}
        assert call(base, "/v1/stats")[1]["queued"] == 1
    with server(paused) as (base, _):
        assert call(base, "/v1/active")[1] == {"active": False}


@pytest.mark.parametrize("missing", ["aiohttp", "prometheus_client", "grpc", "grpc_tools"])
def test_serve_without_its_extra_says_which_to_install(missing: str) -> None:
    code = (f"import sys\nclass No:\n    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.partition('.')[0] == {missing!r}:\n"
            f"            raise ModuleNotFoundError(name)\n"
            f"sys.meta_path.insert(0, No())\nfrom crawlq.cli import main\n"
            f"sys.argv = ['crawlq', '--store', 'memory://', 'serve']\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "pip install 'crawlq[serve]'" in r.stderr, r.stderr


def _chromium() -> str:
    import shutil

    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("chromium is missing: bash scripts/test.sh installs it (apt-get install "
                "chromium)")


def _browse(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                           "--virtual-time-budget=6000", "--enable-logging=stderr", "--v=0",
                           *args, url], capture_output=True, text=True, timeout=120)


def test_the_dashboard_shows_what_the_api_reports_in_a_real_browser(tmp_path: Path) -> None:
    import re
    import shutil

    from crawlq import Frontier, Outcome

    store = f"sqlite:///{tmp_path}/d.db"
    with Frontier.open(store, max_retries=0, min_delay=0, max_delay=0) as f:
        f.add(["https://a.example/1", "https://b.example/1", "https://c.example/1",
               "https://c.example/2"])
        leases = {le.request.url: le for le in f.next(3)}
        f.done(leases["https://a.example/1"])
        f.done(leases["https://b.example/1"], Outcome.FAILED, error="HTTP 500")
    with server(store) as (base, _):
        stats = call(base, "/v1/stats")[1]
        page = _browse(base + "/", "--dump-dom")
        assert page.returncode == 0, page.stderr[-2000:]
        dom = page.stdout
        assert 'data-loaded="yes"' in dom, dom[-3000:]
        shown = {m.group(1): int(m.group(2))
                 for m in re.finditer(r'id="stat-(\w+)">(-?\d+)<', dom)}
        for name in ("seen", "added", "queued", "leased", "done", "failed", "dead"):
            assert shown[name] == stats[name], (name, shown, stats)
        assert re.search(r'id="state-exhausted">' + str(stats["queues_exhausted"]), dom)
        assert "https://b.example/1" in dom and "HTTP 500" in dom  # the dead request
        assert "c.example" in dom  # a busy queue
        assert ">active<" in dom and ">Pause<" in dom
        console = [ln for ln in page.stderr.splitlines() if "CONSOLE" in ln]
        assert console == [], console  # no errors, no messages
        shot = tmp_path / "dashboard.png"
        taken = _browse(base + "/", f"--screenshot={shot}", "--window-size=1000,1200")
        assert taken.returncode == 0 and shot.stat().st_size > 10_000, taken.stderr[-2000:]
        keep = Path(__file__).resolve().parents[2] / "test-artifacts"
        keep.mkdir(exist_ok=True)
        shutil.copy(shot, keep / "dashboard.png")  # (kept for a look after the run)
        # Pause: the API hands out nothing; the flag is in the store, so it holds across
        # a restart, and the page shows it.
        assert call(base, "/v1/active", {"active": False})[1] == {"active": False}
        assert call(base, "/v1/next", {"n": 5})[1] == {"leases": [], "paused": True}
    with server(store) as (base, _):
        assert call(base, "/v1/active")[1] == {"active": False}
        dom = _browse(base + "/", "--dump-dom").stdout
        assert ">paused<" in dom and ">Resume<" in dom
        assert call(base, "/v1/active", {"active": True})[1] == {"active": True}
        # (c.example/2 waits for c.example/1, still leased: nothing else is left)
        assert call(base, "/v1/next", {"n": 5})[1] == {"leases": []}


@pytest.mark.parametrize("kind", ["native", "grpcio"])
def test_serve_over_https_and_grpc_tls_with_a_given_certificate(kind: str,
                                                                 tmp_path: Path) -> None:
    import ssl

    from crawlq.testing.web import SiteSpec, TestWeb

    web = TestWeb(SiteSpec(hosts=1), tls=True)  # (only for its CA and certificate)
    assert web.ca_file is not None
    pem = str(Path(web.ca_file).with_name("server.pem"))  # certificate and key
    p = subprocess.Popen([sys.executable, "-m", "crawlq.cli", "--store", "memory://",
                          "serve", "--port", "0", "--grpc-port", "0", "--tls-cert", pem,
                          "--grpc-server", kind],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert "on https://127.0.0.1:" in line, line
        base = line.split(" on ", 1)[1].split()[0].rstrip("/")
        ctx = ssl.create_default_context(cafile=web.ca_file)
        ctx.check_hostname = False  # (the certificate names *.crawlq.test; the CA is checked)
        with urllib.request.urlopen(base + "/v1/stats", context=ctx, timeout=30) as r:
            assert json.loads(r.read())["queued"] == 0
        with pytest.raises(urllib.error.URLError):  # a client that does not trust it
            urllib.request.urlopen(base + "/v1/stats", timeout=30)
        # gRPC over TLS with the same certificate (the second line names its port)
        line = p.stdout.readline()
        assert f"(TLS, {kind} server)" in line, line
        target = line.split(" on ", 1)[1].split()[0]
        pb, services = load_proto()
        ca = Path(web.ca_file).read_bytes()
        with grpc.secure_channel(target, grpc.ssl_channel_credentials(ca), options=[
                ("grpc.ssl_target_name_override", "frontier.crawlq.test")]) as channel:
            stub = services.URLFrontierStub(channel)
            assert stub.GetActive(pb.Local(), timeout=30).state is True
        with grpc.insecure_channel(target) as channel:  # a plaintext client gets nothing
            stub = services.URLFrontierStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetActive(pb.Local(), timeout=5)
            assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE,
                                            grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    bad = subprocess.run([sys.executable, "-m", "crawlq.cli", "--store", "memory://",
                          "serve", "--tls-cert", str(tmp_path / "none.pem")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("crawlq: error: cannot use the TLS")


def test_two_servers_on_one_redis_crawl_keep_each_host_polite(
        redis_server: LocalRedis) -> None:
    """Two ``crawlq serve`` processes front one Redis crawl; two clients take and answer
    leases through them at once. Every URL is handed out once, and a host is never
    leased again before its rest after the last answer has passed, whichever server
    handed it out."""
    import threading
    import time

    store = f"{redis_server.url}?prefix=two-servers"
    opts = ("-o", "min_delay=0.3", "-o", "max_delay=0.3", "-o", "delay_factor=0")
    with server(store, *opts) as (one, _), server(store, *opts) as (two, _):
        urls = [f"https://h{i % 3}.example/{i}" for i in range(18)]
        assert call(one, "/v1/add", {"requests": urls})[1]["added"] == 18
        got: list[tuple[str, float, float]] = []  # (url, leased at, answered at)
        lock = threading.Lock()

        def client(base: str) -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                leases = call(base, "/v1/next", {"n": 3})[1]["leases"]
                if not leases:
                    if call(base, "/v1/stats")[1]["finished"]:
                        return
                    time.sleep(0.02)
                    continue
                leased = time.monotonic()
                time.sleep(0.05)  # (fetching)
                answered = time.monotonic()
                with lock:  # (noted before the answer: the host may rest from then on)
                    got.extend((le["url"], leased, answered) for le in leases)
                assert call(base, "/v1/ack", {"leases": [le["lease"] for le in leases],
                                              "duration": 0.05})[1]["held"] == len(leases)

        threads = [threading.Thread(target=client, args=(b,)) for b in (one, two)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    assert sorted(u for u, _, _ in got) == sorted(urls)  # each once
    for host in ("h0", "h1", "h2"):
        spans = sorted((a, b) for u, a, b in got if f"//{host}." in u)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end + 0.25, (host, spans)  # its rest (0.3 s, less slack)
