"""The crawler against servers that break HTTP on the wire (a raw server on 127.0.0.1
that writes any bytes): unsolicited responses on a kept-alive connection, status codes
outside HTTP's range, multi-member gzip bodies."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

from raw_web import Part, RawWeb, response, serve_raw
from warcio.archiveiterator import ArchiveIterator

from crawlq.crawler import CrawlConfig, Crawler, Summary
from crawlq.crawler.fetch import Fetcher

ROBOTS = response("200 OK", b"User-agent: *\nAllow: /\n")


def crawl(web: RawWeb, seeds: list[str], **options: Any) -> Summary:
    config = CrawlConfig(seeds=seeds, resolve={"*.test": "127.0.0.1"}, allow_private=True,
                         allow_domains=["test"], max_retries=0, **options)
    return asyncio.run(Crawler(config).run())


def page(path: str, links: list[str]) -> bytes:
    anchors = "".join(f'<a href="{u}">{u}</a>' for u in links)
    return f"<html><title>{path}</title><body>page {path} {anchors}</body></html>".encode()


PAGES = [f"/p/{i}" for i in range(12)]


def stray_after_each(host: str, path: str) -> list[Part]:
    """Each answer, then 0.1 s later an unsolicited response on the same connection."""
    if path == "/robots.txt":
        first = ROBOTS
    else:
        first = response("200 OK", page(path, PAGES if path == "/" else []))
    return [(0.0, first), (0.1, response("200 OK", page("stray after " + path, [])))]


def stray_in_the_same_write(host: str, path: str) -> list[Part]:
    """Each answer with an unsolicited response right behind it, in one write."""
    first = ROBOTS if path == "/robots.txt" else response(
        "200 OK", page(path, PAGES if path == "/" else []))
    return [(0.0, first + response("200 OK", page("stray after " + path, [])))]


def test_unsolicited_responses_never_answer_another_request(tmp_path: Path) -> None:
    """A server that sends an extra response after each answer on a kept-alive
    connection: a connection that receives bytes while idle, or more than one response
    to a request, is dropped, never reused; every record's payload is its own URL's, in
    JSON Lines and in WARC."""
    for handler in (stray_after_each, stray_in_the_same_write):
        for name in ("p.jsonl", "p.warc.gz"):
            out = tmp_path / f"{handler.__name__}-{name}"
            save = ("text",) if name.endswith(".jsonl") else ()
            with serve_raw(handler) as web:
                s = crawl(web, [web.url("a.test")], out=str(out), save=save,
                          min_delay=0.3, max_delay=0.3, delay_factor=0.0)
                connections = {hit[3] for hit in web.hits()}
            assert s.fetched == len(PAGES) + 1, (handler.__name__, name, s)
            bodies = records(out)
            assert len(bodies) == len(PAGES) + 1
            for url, body in bodies.items():
                path = url.split(str(web.port), 1)[1]
                assert f"page {path} " in body, (handler.__name__, name, url, body)
            # one connection per request: none was reused after its stray bytes
            assert len(connections) == len(web.hits()), handler.__name__


def records(out: Path) -> dict[str, str]:
    """URL -> body text of the pages recorded in ``out`` (JSON Lines or WARC)."""
    bodies: dict[str, str] = {}
    if out.name.endswith(".jsonl"):
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            bodies[rec["url"]] = rec["text"]
        return bodies
    with open(out, "rb") as f:
        for record in ArchiveIterator(f):
            uri = record.rec_headers.get_header("WARC-Target-URI")
            if record.rec_type == "response" and not uri.endswith("/robots.txt"):
                bodies[uri] = record.content_stream().read().decode()
    return bodies


def test_a_clean_kept_alive_connection_is_still_reused() -> None:
    """The guard against stray bytes costs nothing on a well-behaved server: one
    connection serves the host's pages (robots.txt has one of its own)."""
    def clean(host: str, path: str) -> list[Part]:
        first = ROBOTS if path == "/robots.txt" else response(
            "200 OK", page(path, PAGES if path == "/" else []))
        return [(0.0, first)]

    with serve_raw(clean) as web:
        s = crawl(web, [web.url("a.test")], min_delay=0.0, max_delay=0.0, delay_factor=0.0)
        assert s.fetched == len(PAGES) + 1
        by_path = {hit[2]: hit[3] for hit in web.hits()}
    robots = by_path.pop("/robots.txt")
    assert len(set(by_path.values())) == 1 and robots not in by_path.values(), by_path


def test_a_status_outside_100_to_599_is_a_failed_fetch() -> None:
    """Status 000, 099, 600 and 999 are no HTTP answer: failed fetches, their links not
    followed, nothing saved."""
    odd = ["000 Zero", "099 Low", "600 High", "999 Top"]

    def answer(host: str, path: str) -> list[Part]:
        if path == "/robots.txt":
            return [(0.0, ROBOTS)]
        if path == "/":
            return [(0.0, response("200 OK", page("/", [f"/s/{i}" for i in range(4)])))]
        if path.startswith("/s/"):
            status = odd[int(path[3:])]
            return [(0.0, response(status, page(path, ["/never"])))]
        return [(0.0, response("200 OK", page(path, [])))]

    with serve_raw(answer) as web:
        s = crawl(web, [web.url("a.test")], min_delay=0.0, max_delay=0.0, delay_factor=0.0)
        paths = [hit[2] for hit in web.hits()]
    assert "/never" not in paths
    assert s.fetched == 1, s
    assert sum(s.errors.values()) == 4, s.errors


def test_a_multi_member_gzip_body_is_decoded_whole() -> None:
    """gzip (RFC 1952) allows several members one after another; decoders that stop
    after the first lose the rest."""
    body = page("/", ["/a"]) + b"<p>second member</p>" + page("/x", ["/b"])
    one, two = len(page("/", ["/a"])), -len(page("/x", ["/b"]))
    wire = (gzip.compress(body[:one]) + gzip.compress(body[one:two])
            + gzip.compress(body[two:]))

    def answer(host: str, path: str) -> list[Part]:
        return [(0.0, response("200 OK", wire, ("Content-Encoding", "gzip")))]

    async def fetch(web: RawWeb) -> Any:
        fetcher = Fetcher(user_agent="t", resolve={"*.test": "127.0.0.1"},
                          allow_private=True)
        try:
            return await fetcher.get(web.url("a.test"))
        finally:
            await fetcher.close()

    with serve_raw(answer) as web:
        got = asyncio.run(fetch(web))
    assert got.body == body and not got.truncated


def test_the_wire_bytes_are_kept_only_when_asked() -> None:
    """``keep_wire`` (a WARC output): the response as it came off the wire; without it
    (JSON Lines) that copy is not made, and the page is the same."""
    body = b"<html>" + b"x" * 100_000 + b"</html>"

    def answer(host: str, path: str) -> list[Part]:
        return [(0.0, response("200 OK", body))]

    async def fetch(web: RawWeb, keep: bool) -> Any:
        fetcher = Fetcher(user_agent="t", resolve={"*.test": "127.0.0.1"},
                          allow_private=True, keep_wire=keep)
        try:
            return await fetcher.get(web.url("a.test"))
        finally:
            await fetcher.close()

    with serve_raw(answer) as web:
        kept, not_kept = asyncio.run(fetch(web, True)), asyncio.run(fetch(web, False))
    assert kept.body == not_kept.body == kept.raw == not_kept.raw == body
    assert kept.http_raw.startswith(b"HTTP/1.1 200 OK\r\n") and kept.http_raw.endswith(body)
    assert not_kept.http_raw == b""
