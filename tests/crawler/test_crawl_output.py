"""The crawler's output: durable before a page is acknowledged (SIGKILL loops on every
format), torn tails cut off, formats by name, standard output, a full disk."""

from __future__ import annotations

import gzip
import io
import json
import random
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlq.crawler.fetch import Fetched
from crawlq.crawler.output import OutputError, open_output, output_kind
from crawlq.models import Request
from crawlq.testing.web import SiteSpec, pages, reachable, serve

LOCAL = ["--allow-domain", "crawlq.test", "--resolve", "*.crawlq.test=127.0.0.1",
         "--allow-private"]
FAST = ["--min-delay", "0", "--max-delay", "0", "--delay-factor", "0"]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "crawlq.cli", *args]


def urls_in(path: Path) -> Counter[str]:
    """URL of every page record in an output, as a reader would see them (a record that
    does not parse fails the test); robots.txt responses (archived in WARC) left out."""
    if ".warc" in path.name:
        with open(path, "rb") as f:
            return Counter(u for r in ArchiveIterator(f) if r.rec_type == "response"
                           if not (u := r.rec_headers.get_header("WARC-Target-URI")
                                   ).endswith("/robots.txt"))
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return Counter(json.loads(line)["url"] for line in f)


@pytest.mark.parametrize("name", ["pages.jsonl", "pages.jsonl.gz", "crawl.warc",
                                  "crawl.warc.gz"])
def test_every_page_is_in_the_output_after_twenty_sigkills(tmp_path: Path, name: str) -> None:
    spec = SiteSpec(hosts=4, pages=90, special_links=False, latency=0.02)
    out = tmp_path / name
    rng = random.Random(name)
    with serve(spec) as web:
        cmd = cli("crawl", web.url(0, "/"), "--state", str(tmp_path / "state"), *LOCAL,
                  *FAST, "--concurrency", "4", "--timeout", "1", "--parse-timeout", "0.5",
                  "--lease-ttl", "2",
                  # (a page may be in flight at several of these kills; the cap on
                  # redeliveries has its own test)
                  "--max-redeliveries", "20",
                  "--out", str(out), "--progress", "0")
        kills = 0
        while kills < 20:
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.5, 0.9))
            if p.poll() is not None:
                break
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
        assert kills == 20, f"the crawl finished after {kills} kills: make the site bigger"
        final = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert final.returncode == 0, final.stderr
        assert "frontier empty" in final.stdout
        expected = reachable(spec, web.port)
        fetched = Counter(pages(web))
    written = urls_in(out)
    assert set(fetched) == expected                     # the crawl lost nothing...
    assert {u for u in written} == {f"http://{h}:{web.port}{p}" for h, p in expected}
    # ...and the output neither. A page is written again only when a kill came between
    # its write and its acknowledgement (its lease then ends and it is fetched anew), so
    # each extra copy stands for one kill, and a kill makes at most one per fetcher slot
    # (--concurrency 4). A page in flight at two kills is written three times.
    extra = sum(n - 1 for n in written.values())
    assert extra <= kills * 4, (extra, kills)


def test_a_torn_record_is_cut_off_and_a_foreign_file_refused(tmp_path: Path) -> None:
    r = Fetched("http://a.test/", 200, {"content-type": "text/html"}, b"<p>hi</p>", 0.01,
                raw=b"<p>hi</p>", header_list=[("Content-Type", "text/html")])
    for name in ("p.jsonl", "p.jsonl.gz", "c.warc", "c.warc.gz"):
        path = tmp_path / name
        out = open_output(str(path))
        for i in range(3):
            out.write(Request(f"http://a.test/{i}"), r, "t", 0)
            out.flush()  # (one gzip member per flush)
        out.close()
        whole = path.read_bytes()
        for cut in (1, 7, 40, len(whole) // 3):
            path.write_bytes(whole[:-cut])
            out = open_output(str(path))  # cuts the torn record off, then appends
            out.write(Request("http://a.test/next"), r, "t", 0)
            out.close()
            got = urls_in(path)
            assert got["http://a.test/next"] == 1 and got["http://a.test/0"] == 1, (name, cut)
            assert sum(got.values()) <= 4
        foreign = tmp_path / f"foreign-{name}"
        foreign.write_bytes(b"not a crawl output at all")
        with pytest.raises(OutputError, match="does not begin with a complete"):
            open_output(str(foreign))
        assert foreign.read_bytes() == b"not a crawl output at all"  # left as it was


def test_output_names_and_standard_output(tmp_path: Path) -> None:
    assert output_kind("a.jsonl") == ("jsonl", False)
    assert output_kind("a.JSONL.GZ") == ("jsonl", True)
    assert output_kind("a.warc.gz") == ("warc", True)
    assert output_kind("-") == ("jsonl", False)
    assert output_kind("dump.bin", "warc") == ("warc", False)
    with pytest.raises(OutputError, match="--format"):
        output_kind("pages.csv")
    bad = subprocess.run(cli("crawl", "http://127.0.0.1:9/", "--out", "p.csv"),
                         capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("crawlq: error: --out:")
    assert len(bad.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
    spec = SiteSpec(hosts=1, pages=5, special_links=False)
    with serve(spec) as web:
        run = subprocess.run(cli("crawl", web.url(0, "/"), *LOCAL, *FAST, "--out", "-",
                                 "--progress", "0"), capture_output=True, timeout=60)
        assert run.returncode == 0, run.stderr
        records = [json.loads(line) for line in run.stdout.decode().splitlines()]
        assert len(records) == len(pages(web)) > 5  # stdout holds the pages only...
        assert b"frontier empty" in run.stderr       # ...the summary goes to stderr
        gz = subprocess.run(cli("crawl", web.url(0, "/"), *LOCAL, *FAST, "--out",
                                str(tmp_path / "p.jsonl.gz")), capture_output=True,
                            timeout=60)
        assert gz.returncode == 0, gz.stderr
    with gzip.open(tmp_path / "p.jsonl.gz", "rt") as f:  # really gzip
        assert len(f.read().splitlines()) == len(records)


def test_a_full_disk_stops_the_crawl_with_one_error_and_loses_nothing(
        tmp_path: Path) -> None:
    spec = SiteSpec(hosts=2, pages=10, special_links=False)
    state = ["--state", str(tmp_path / "state")]
    with serve(spec) as web:
        full = subprocess.run(cli("crawl", web.url(0, "/"), *state, *LOCAL, *FAST,
                                  "--out", "/dev/full", "--format", "jsonl"),
                              capture_output=True, text=True, timeout=60)
        assert full.returncode == 2, full.stderr
        errors = [ln for ln in full.stderr.splitlines() if ln.startswith("crawlq: error:")]
        assert len(errors) == 1 and "No space left on device" in errors[0], full.stderr
        assert "Traceback" not in full.stderr
        again = subprocess.run(cli("crawl", web.url(0, "/"), *state, *LOCAL, *FAST,
                                   "--out", str(tmp_path / "p.jsonl")),
                               capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        expected = reachable(spec, web.port)
    got = urls_in(tmp_path / "p.jsonl")  # nothing the full disk took was acknowledged
    assert set(got) == {f"http://{h}:{web.port}{p}" for h, p in expected}


def test_records_parse_with_the_gzip_module_as_one_stream(tmp_path: Path) -> None:
    """A gzip output is many members; Python's gzip (like zcat) reads them as one."""
    r = Fetched("http://a.test/", 200, {}, b"x", 0.01)
    path = tmp_path / "p.jsonl.gz"
    out = open_output(str(path))
    for i in range(5):
        out.write(Request(f"http://a.test/{i}"), r, None, 0)
        if i % 2:
            out.flush()
    out.close()
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    assert [json.loads(x)["url"] for x in lines] == [f"http://a.test/{i}" for i in range(5)]
    assert io.BytesIO(path.read_bytes()).read(2) == b"\x1f\x8b"


def test_warc_has_robots_txt_sent_headers_and_passes_warcio_check(tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=4, special_links=False)
    out = tmp_path / "crawl.warc.gz"
    with serve(spec) as web:
        run = subprocess.run(cli("crawl", web.url(0, "/"), *LOCAL, *FAST, "--out", str(out),
                                 "--header", "Accept-Language: fr",
                                 "--header", "X-Crawl: test run"),
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        n = len(pages(web))
    with open(out, "rb") as f:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.http_headers)
                   for r in ArchiveIterator(f)]
    responses = [uri for kind, uri, _ in records if kind == "response"]
    assert sum(uri.endswith("/robots.txt") for uri in responses) == 1  # archived too
    assert len(responses) == n + 1
    sent = next(h for kind, _, h in records if kind == "request")
    assert sent.get_header("Accept-Language") == "fr"
    assert sent.get_header("X-Crawl") == "test run"
    check = subprocess.run([str(Path(sys.executable).with_name("warcio")), "check", "-v",
                            str(out)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    # one gzip member per record (warcinfo, then a request and a response a fetch), as
    # WARC readers that seek to a record's offset need
    data, members = out.read_bytes(), 0
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        assert d.eof
        data, members = d.unused_data, members + 1
    assert members == len(records) == 1 + 2 * len(responses)
    bad = subprocess.run(cli("crawl", "http://a.test/", "--header", "no colon here"),
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("crawlq: error: --header")


def test_jsonl_records_can_carry_the_text_and_the_body(tmp_path: Path) -> None:
    import base64

    spec = SiteSpec(hosts=1, pages=2, special_links=False)
    out = tmp_path / "p.jsonl"
    with serve(spec) as web:
        run = subprocess.run(cli("crawl", web.url(0, "/"), *LOCAL, *FAST, "--out", str(out),
                                 "--save", "text", "--save", "body"),
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        refused = subprocess.run(cli("crawl", web.url(0, "/"), "--out", "c.warc",
                                     "--save", "text"), capture_output=True, text=True,
                                 cwd=tmp_path)
    assert refused.returncode == 2 and "--save is for JSON Lines" in refused.stderr
    for rec in map(json.loads, out.read_text().splitlines()):
        body = base64.b64decode(rec["body"])
        assert len(body) == rec["length"] and rec["text"] == body.decode("utf-8")
        assert "<html" in rec["text"]


def test_warc_keeps_the_response_bytes_as_received_chunked_framing_too(
        tmp_path: Path) -> None:
    spec = SiteSpec(hosts=1, pages=2, special_links=False)
    out = tmp_path / "c.warc"
    with serve(spec) as web:
        run = subprocess.run(cli("crawl", web.url(0, "/chunked"), *LOCAL, *FAST, "--out",
                                 str(out), "--max-pages", "1"),
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
    with open(out, "rb") as f:
        (rec, block), = [(r, r.http_headers.to_bytes() + r.raw_stream.read())
                         for r in ArchiveIterator(f)
                         if r.rec_type == "response" and r.rec_headers.get_header(
                             "WARC-Target-URI").endswith("/chunked")]
    assert block.startswith(b"HTTP/1.1 200 OK\r\nServer: BaseHTTP")  # the status line sent
    assert rec.http_headers.get_header("Transfer-Encoding") == "chunked"
    body = block.partition(b"\r\n\r\n")[2]
    assert body.endswith(b"\r\n0\r\n\r\n") and body.count(b"\r\n") >= 7  # the framing, kept
    sizes = [int(line, 16) for line in body.split(b"\r\n")[0:1]]
    assert sizes[0] > 1000  # a chunk-size line, not page text
    check = subprocess.run([str(Path(sys.executable).with_name("warcio")), "check", str(out)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("name", ["pages.jsonl.gz", "crawl.warc.gz"])
def test_outputs_rotate_by_size_and_a_resumed_crawl_appends(tmp_path: Path,
                                                            name: str) -> None:
    spec = SiteSpec(hosts=2, pages=12, special_links=False)
    state = ["--state", str(tmp_path / "state")]
    with serve(spec) as web:
        base = [*LOCAL, *FAST, *state, "--out", str(tmp_path / name), "--rotate", "2K"]
        first = subprocess.run(cli("crawl", web.url(0, "/"), *base, "--max-pages", "10"),
                               capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        files_then = sorted(tmp_path.glob("*-0*.*gz"))
        second = subprocess.run(cli("crawl", web.url(0, "/"), *base),
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0, second.stderr
        expected = {f"http://{h}:{web.port}{p}" for h, p in reachable(spec, web.port)}
    files = sorted(tmp_path.glob("*-0*.*gz"))
    stem = name.split(".")[0]
    assert [f.name for f in files] == [f"{stem}-{i:05d}.{name.split('.', 1)[1]}"
                                       for i in range(len(files))]
    assert len(files) > len(files_then) >= 2
    assert all(f.stat().st_size >= 2048 for f in files[:-1])  # full, then the next
    got: Counter[str] = Counter()
    for f in files:  # each file stands alone: complete records only
        got += urls_in(f)
    assert set(got) == expected and max(got.values()) == 1
    bad = subprocess.run(cli("crawl", "http://a.test/", "--out", "-", "--rotate", "1M"),
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot be rotated" in bad.stderr
