"""Requests serialize compactly and losslessly; public API shape."""

from __future__ import annotations

import pytest

import crawlq
from crawlq import Request
from crawlq.models import Stats

ROUND_TRIP = [
    Request("https://a.example/"),
    Request("https://a.example/", depth=3),
    Request("https://a.example/", referrer="https://r.example/"),
    Request("https://ü.example/päth?q=日本", method="PUT", body=bytes(range(256)) * 4,
            priority=-7, depth=2, referrer="https://ß.example/",
            meta={"nested": {"list": [1, 2.5, None, True, "ü"]}, "": 0},
            dont_filter=True, revisit_after=86400.0),
    Request("https://a.example/", meta={"only": "meta"}),
    Request("https://a.example/", dont_filter=True),
    Request("https://a.example/", body=b"\x00\xff"),
]


@pytest.mark.parametrize("req", ROUND_TRIP)
def test_payload_round_trip(req: Request) -> None:
    back = Request.from_payload(req.to_payload(), req.priority, req.retries)
    assert back == req
    assert type(back.body) is bytes


def test_payload_is_compact() -> None:
    url = "https://host-1.example/path/news/blog123?cat=1&id=1234567"
    assert len(Request(url).to_payload()) <= len(url) + 4
    # relative to its queue (the host): the scheme and host are left out
    assert len(Request(url).to_payload("host-1.example")) <= len(url) - 22 + 4
    ref = "https://host-1.example/index"
    assert len(Request(url, referrer=ref).to_payload("host-1.example")) <= \
        len(url) + len(ref) - 2 * 22 + 8


RELATIVE = [  # (url, queue key, referrer)
    ("https://a.example/x?y=1", "a.example", "https://a.example/"),
    ("http://a.example:8080/x", "a.example", "http://a.example:8080/r"),
    ("http://a.example:8080/x", "a.example", "http://a.example:9/r"),
    ("http://a.example/x", "a.example", "https://a.example/r"),
    ("https://a.example.org/x", "a.example", "https://a.example/"),  # not its host
    ("https://a.example/x", "a.example", "/relative"),
    ("https://a.example/x", "a.example", ":colon"),
    ("https://a.example/x", "a.example", "!bang"),
    ("https://a.example/x", "a.example", ""),
    ("https://a.example/x", "a.example", None),
    ("https://a.example/x", "b.example", "https://a.example/"),  # another queue key
    ("https://a.example", "a.example", None),  # no path: kept whole
    ("HTTPS://A.example/x", "a.example", None),  # not canonical: kept whole
]


@pytest.mark.parametrize(("url", "key", "ref"), RELATIVE)
@pytest.mark.parametrize("full", [False, True])
def test_payload_relative_to_the_queue_round_trip(url: str, key: str, ref: str | None,
                                                  full: bool) -> None:
    extra = {"method": "POST", "body": b"\x00", "meta": {"m": 1}, "depth": 4} if full else {}
    req = Request(url, referrer=ref, **extra)  # type: ignore[arg-type]
    assert Request.from_payload(req.to_payload(key), 0, 0, None, key) == req
    if req.to_payload(key) != req.to_payload():  # made relative: needs its key back
        with pytest.raises(crawlq.ConfigError, match="key"):
            Request.from_payload(req.to_payload(key))
    # payloads from before (absolute) still read the same with a key
    assert Request.from_payload(req.to_payload(), 0, 0, None, key) == req


def test_unserializable_meta_is_a_clear_error() -> None:
    with pytest.raises(crawlq.ConfigError):
        Request("https://a.example/", meta={"x": object()}).to_payload()


def test_public_api_is_sorted_and_importable() -> None:
    assert crawlq.__all__ == sorted(crawlq.__all__)
    for name in crawlq.__all__:
        assert getattr(crawlq, name) is not None


def test_stats_as_dict() -> None:
    d = Stats(seen=1, rejected={"x": 2}).as_dict()
    assert d["seen"] == 1 and d["rejected"] == {"x": 2} and d["finished"] is True


def test_error_tree() -> None:
    assert issubclass(crawlq.StoreCorrupt, crawlq.StoreError)
    for e in (crawlq.ConfigError, crawlq.InvalidURL, crawlq.LeaseError, crawlq.StoreError):
        assert issubclass(e, crawlq.CrawlqError)
