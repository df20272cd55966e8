"""The crawler's SSRF guard: no connection to a special-purpose address, however it is
spelled, whichever name resolves to it, on seeds and on every redirect hop. Every
connection attempt of the event loop is recorded, so "refused" means "never dialled"."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from crawlq.crawler.addresses import networks, refusal
from crawlq.crawler.fetch import Blocked, Fetcher
from crawlq.testing.web import SiteSpec, serve

REFUSED = [
    "127.0.0.1", "127.255.255.254", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1",
    "169.254.169.254", "100.64.0.1", "100.100.100.200", "192.0.0.170", "192.0.2.1",
    "198.18.0.1", "198.51.100.7", "203.0.113.9", "224.0.0.1", "240.0.0.1",
    "255.255.255.255",
    "::1", "::", "fe80::1", "fe80::1%eth0", "[::1]", "fc00::1", "fd12:3456::1", "fec0::1",
    "ff02::1", "100::1", "2001:db8::1", "3fff::1", "5f00::1", "2001:2::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "::127.0.0.1",
    "64:ff9b::a9fe:a9fe", "64:ff9b:1::10.0.0.1", "2002:a9fe:a9fe::1", "2002:7f00:1::",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
]
ALLOWED = ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111",
           "::ffff:93.184.215.14", "64:ff9b::808:808", "2002:808:808::1"]


@pytest.mark.parametrize("address", REFUSED)
def test_special_purpose_addresses_are_refused(address: str) -> None:
    assert refusal(address) is not None


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(address) is None


def test_allowed_blocks_open_only_themselves() -> None:
    allowed = networks(["127.0.0.1", "10.1.0.0/16"])
    assert refusal("127.0.0.1", allowed) is None and refusal("10.1.9.9", allowed) is None
    assert refusal("127.0.0.2", allowed) is not None
    assert refusal("10.2.0.1", allowed) is not None
    assert refusal("169.254.169.254", allowed) is not None
    with pytest.raises(ValueError, match="not an IP address"):
        networks(["10.0.0.0/33"])


@pytest.fixture
def dialled(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every (address, port) the event loop is asked to connect to, by either of its
    two ways of connecting (aiohttp dials with ``sock_connect``); the calls go on."""
    calls: list[Any] = []
    loop_cls = type(asyncio.new_event_loop())
    create, sock_connect = loop_cls.create_connection, loop_cls.sock_connect

    async def create_connection(self: Any, *args: Any, **kw: Any) -> Any:
        host = kw.get("host", args[1] if len(args) > 1 else None)
        if host is not None:
            calls.append((host, kw.get("port", args[2] if len(args) > 2 else None)))
        return await create(self, *args, **kw)

    async def connect(self: Any, sock: Any, address: Any) -> Any:
        calls.append(tuple(address[:2]))
        return await sock_connect(self, sock, address)

    monkeypatch.setattr(loop_cls, "create_connection", create_connection)
    monkeypatch.setattr(loop_cls, "sock_connect", connect)
    yield calls


def _fetch(fetcher: Fetcher, url: str) -> Any:
    async def go() -> Any:
        try:
            return await fetcher.get(url)
        finally:
            await fetcher.close()

    return asyncio.run(go())


@pytest.mark.parametrize("target", ["100.100.100.200", "169.254.169.254", "fec0::1",
                                    "2002:a9fe:a9fe::1", "::ffff:10.0.0.1", "100.64.0.1"])
def test_a_name_resolving_to_a_special_address_is_never_dialled(
        target: str, dialled: list[Any]) -> None:
    fetcher = Fetcher(user_agent="t", resolve={"*.evil.test": target}, timeout=2)
    with pytest.raises(Blocked) as err:
        _fetch(fetcher, "http://metadata.evil.test/latest/")
    assert err.value.reason == "private-address" and "--allow-address" in str(err.value)
    assert dialled == []


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/", "http://[::1]:9/", "http://[::ffff:7f00:1]:9/",
    "http://2130706433:9/", "http://0x7f.0.0.1:9/", "http://127.1:9/",
    "http://[::ffff:169.254.169.254]/", "http://0251.0376.0251.0376/",
])
def test_every_spelling_of_a_special_address_is_refused(url: str, dialled: list[Any]) -> None:
    with pytest.raises(Blocked):
        _fetch(Fetcher(user_agent="t", timeout=2), url)
    assert dialled == []


def test_the_crawl_refuses_a_redirect_hop_to_a_special_address(dialled: list[Any]) -> None:
    """The test web (on 127.0.0.1, allowed by --allow-address) redirects to names that
    resolve to a metadata address and to a literal one: neither is dialled, and both
    are counted as blocked."""
    from crawlq.crawler import CrawlConfig, Crawler

    spec = SiteSpec(hosts=1, pages=1, special_links=False)
    with serve(spec) as web:
        start = web.url(0, "/redirect-to/metadata.evil.test")
        literal = web.url(0, "/redirect-to/169.254.169.254")
        config = CrawlConfig(
            seeds=[start, literal], store="memory://", allow_addresses=("127.0.0.1",),
            allow_domains=["crawlq.test", "evil.test", "169.254.169.254"],
            resolve={"*.crawlq.test": "127.0.0.1", "*.evil.test": "100.100.100.200"},
            obey_robots=False, min_delay=0, max_delay=0, delay_factor=0, timeout=2)
        summary = asyncio.run(Crawler(config).run())
        hits = web.hits()
    assert {h.path for h in hits} == {"/redirect-to/metadata.evil.test",
                                      "/redirect-to/169.254.169.254"}
    assert summary.blocked["private-address"] == 2
    assert dialled and set(dialled) == {("127.0.0.1", web.port)}, dialled


def test_the_record_of_dials_sees_a_real_dial(dialled: list[Any]) -> None:
    """(The "never dialled" assertions above could fail: an allowed fetch is seen.)"""
    with serve(SiteSpec(hosts=1, pages=1)) as web:
        fetched = _fetch(Fetcher(user_agent="t", allow_addresses=("127.0.0.1",), timeout=2,
                                 resolve={"*.crawlq.test": "127.0.0.1"}), web.url(0, "/"))
    assert fetched.status == 200 and ("127.0.0.1", web.port) in dialled
