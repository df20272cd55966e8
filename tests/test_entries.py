"""The one definition of what ``add`` accepts and of what ``next`` hands out
(crawlq.entries) and of a request's stored bytes (crawlq.payload), both compiled by
mypyc: the compiled modules and their .py sources give the same entries, store state and
leases on generated requests of every shape; payloads are msgpack as the format says,
and bytes that are not a payload are refused with ValueError."""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

import msgpack
import pytest

from crawlq import Frontier, Request
from crawlq import payload as payload_module
from crawlq.errors import ConfigError
from crawlq.policies.canonical import Canonicalizer
from crawlq.testing import Clock

# Each part of a generated URL: (plain choices, odd choices); a part is odd 15% of the time.
PARTS: list[tuple[list[str], list[str]]] = [
    (["http", "https", "HTTP", "Https"], ["ftp", "httpx", "h", "", "1http"]),
    (["://"], [":/", "//", ":", ":///"]),
    ([""], ["user@", "u:p@", "@"]),
    (["example.com", "EXAMPLE.com", "a.b.c", "host-1.example", "ex_ample.com",
      "127.0.0.1", "xn--bcher-kva.de", "localhost"],
     ["", "[::1]", "[::1", "bücher.de", "example.com.", "exa mple.com", "a..b", "a%41.com"]),
    (["", ":80", ":443", ":8080", ":65535"], [":0", ":080", ":65536", ":", ":abc", ":99999",
                                              ":1:2"]),
    (["", "/", "/a/b", "/A/B.html", "/~tilde", "/a:b@c", "/a/b/", "//double", "/a..b",
      "/a.", "/a-b_c", "/x!$&'()*+,=y"],
     ["/a/./b", "/a/../b", "/%7Euser", "/a%2fb", "/a;jsessionid=1", "/a;x=1", "/a b", "/ü",
      "/a/.", "/.hidden", "/a/b/..", "/x%", "/x%zz", "/a\x00b", "/tab\t", "/€", "/\x7f",
      "/[x]", "/a|b", '/"q"', "/a^b", "/a`b", "/a{b}", "/a\\b"]),
    (["", "?", "?a=1", "?b=2&a=1", "?a=2&a=1", "?&&", "?a=1&B=2&b=3", "?x=1?y=2",
      "?id=1&cat=2&lang=en", "?a=1&&b=2", "?==&=a", "?b&a", "?z=1&y=2&x=3&w=4&v=5",
      "?a=b=c&a=b", "?sessionid=1", "?k=" + "v" * 300, "?a=1;b=2", "?callback=f", "?_=1"],
     ["?utm_source=x&a=1", "?UTM_Medium=y", "?gclid=1", "?sid=1&b", "?q=%41", "?q=a b",
      "?ü=1", "?a=%zz", "?a=[1]", "?" + "&".join(f"p{i}=1" for i in range(70, 0, -1))]),
    (["", "#", "#frag", "#a#b", "# sp"], ["#\x01", "#ü"]),
]


def generated_urls(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        url = "".join(rng.choice(odd if rng.random() < 0.15 else plain)
                      for plain, odd in PARTS)
        if rng.random() < 0.03:
            url = " " + url
        if rng.random() < 0.02:
            url = url + "\n"
        out.append(url)
    return out


def mixed_requests(seed: int) -> list[Request | str]:
    """Requests of every shape: plain, with referrer and depth, POST, meta, dont_filter,
    retries, not_before, revisit, odd priorities, bad URLs and non-requests."""
    rng = random.Random(seed)
    urls = generated_urls(3_000, seed)
    hosts = ["https://a.example", "http://b.example:8080", "https://c.example"]
    urls += [f"{rng.choice(hosts)}/p/{rng.randrange(300)}?b={rng.randrange(3)}&a=1"
             for _ in range(3_000)]
    out: list[Request | str] = []
    for url in urls:
        r = rng.random()
        ref = rng.choice([None, None, "https://a.example/x", "http://b.example:8080/r",
                          "/relative", ":colon", "!bang", "", "https://a.example", "ü"])
        if r < 0.3:
            out.append(url)
        elif r < 0.8:
            out.append(Request(url, priority=rng.randrange(-5, 6), depth=rng.randrange(3),
                               referrer=ref))
        else:
            out.append(rng.choice([
                Request(url, method="POST", body=b"x=1"),
                Request(url, meta={"k": [1, "ü"]}),
                Request(url, dont_filter=True),
                Request(url, retries=2),
                Request(url, not_before=1e9 + 5),
                Request(url, revisit_after=60.0),
                Request(url, priority=True),
                Request(url, priority=2**40),
                Request(url, depth=-1),
                Request(url, depth=2**40),
                Request(url, body="text"),  # type: ignore[arg-type]
                Request(url, meta={}),
                Request(url, method="get"),
                Request(42),  # type: ignore[arg-type]
            ]))
    return out


def run(requests: list[Request | str], **options: Any) -> tuple[Any, ...]:
    """add() in batches, the store's records, then every lease."""
    clock = Clock(1e9)
    f = Frontier.open("memory://", clock=clock, min_delay=0, max_delay=0,
                      concurrency=1000, **options)
    results = [f.add(requests[i:i + 700]) for i in range(0, len(requests), 700)]
    records = list(f.records())
    clock.advance(100)
    leases = f.next(100_000)
    f.close()
    return results, records, [(le.token, le.request, le.queue, le.leased_at, le.expires_at)
                              for le in leases]


@pytest.mark.parametrize("options", [
    {}, {"revisit_after": 30.0}, {"source_aware": True}, {"dedup_post": False},
    {"canonicalize": Canonicalizer(drop_params={"a"}, drop_prefixes=("b",))},
    {"priority": lambda r: len(r.url) % 7 - 3}])
def test_compiled_and_python_agree(request: pytest.FixtureRequest,
                                   options: dict[str, Any]) -> None:
    """Entries, add results, the store's records and the leases are the same with the
    compiled modules as with their .py sources."""
    requests = mixed_requests(seed=3)
    compiled = run(requests, **options)
    request.getfixturevalue("frontier_as_python")
    python = run(requests, **options)
    assert compiled == python
    results, _, leases = compiled
    assert sum(r.added for r in results) > 1000 and len(leases) > 1000
    reasons = {rej.reason for r in results for rej in r.rejected}
    assert {"invalid-request", "bad-priority"} <= reasons or "priority" in options


def _format(req: Request, key: str | None) -> bytes:
    """A request's payload as the format says (crawlq.payload's docstring), packed by
    msgpack itself."""
    url, ref, version = req.url, req.referrer, 1
    for scheme, v in (("https://", 2), ("http://", 3)):
        base = len(scheme) + len(key or "")
        if key is not None and url.startswith(scheme + key) and url[base:base + 1] in "/:" \
                and url[base:base + 1]:
            url, version = url[base:], v
            if ref is not None:
                if ref[:base] == req.url[:base] and ref[base:base + 1] in ("/", ":"):
                    ref = ref[base:]
                elif ref[:1] in ("/", ":", "!"):
                    ref = "!" + ref
            break
    parts = [version, url, req.depth, ref, req.method, req.body,
             dict(req.meta) or None, req.dont_filter, req.revisit_after]
    defaults: list[Any] = [None, None, 0, None, "GET", b"", None, False, None]
    while parts[-1] == defaults[len(parts) - 1] and \
            type(parts[-1]) is type(defaults[len(parts) - 1]):
        parts.pop()
    return msgpack.packb(parts, use_bin_type=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", range(3))
def test_payloads_are_the_format_both_ways(seed: int, payload_as_python: ModuleType) -> None:
    """Every request's payload is the msgpack array the format describes, compiled and
    as Python, and decodes back to the same request with the same key."""
    rng = random.Random(seed)
    reqs = [r if isinstance(r, Request) else Request(r) for r in mixed_requests(seed)]
    reqs += [Request("https://a.example/" + "x" * n, depth=d, referrer="https://a.example/r")
             for n in (0, 30, 31, 32, 255, 256, 70_000) for d in (0, 127, 128, 2**16, 2**32 - 1)]
    checked = 0
    for req in reqs:
        if not isinstance(req.url, str) or req.depth < 0 or req.body.__class__ is not bytes:
            continue
        key = rng.choice([None, "a.example", "b.example:8080", "c.example", "other"])
        fields = (req.url, key, req.depth, req.referrer, req.method, req.body,
                  dict(req.meta) or None, req.dont_filter, req.revisit_after)
        payload = payload_module.encode(*fields)
        assert payload == payload_as_python.encode(*fields) == _format(req, key), req
        assert req.to_payload(key) == payload
        back = Request.from_payload(payload, req.priority, req.retries, req.not_before, key)
        assert back == Request(req.url, req.method, req.body, req.priority, req.depth,
                               req.referrer, req.meta, req.dont_filter, req.not_before,
                               req.retries, req.revisit_after)
        assert payload_module.decode(payload, key) == payload_as_python.decode(payload, key)
        checked += 1
    assert checked > 5000


def test_bytes_that_are_not_a_payload(payload_as_python: ModuleType) -> None:
    """Cut, changed or foreign bytes decode to a request or raise ValueError, compiled
    and as Python alike; a relative payload needs its key."""
    rng = random.Random(11)
    good = [Request("https://a.example/" + "p" * n, depth=n * 999, referrer="https://a.example/")
            .to_payload("a.example") for n in (1, 40, 300)]
    good.append(Request("https://a.example/p", method="POST", body=b"x",
                        meta={"k": 1}).to_payload("a.example"))
    samples = [p[:cut] for p in good for cut in range(len(p))]
    for p in good:
        for _ in range(200):
            b = bytearray(p)
            b[rng.randrange(len(b))] = rng.randrange(256)
            samples.append(bytes(b))
    samples += [b"", b"\xc0", msgpack.packb([1]), msgpack.packb([1, 2]),
                msgpack.packb({"a": 1}), msgpack.packb([1, "u", 2, 3, 4, 5, 6, 7, 8, 9])]
    for sample in samples:
        outcomes = []
        for module in (payload_module, payload_as_python):
            try:
                outcomes.append(module.decode(sample, "a.example"))
            except ValueError as exc:
                outcomes.append(type(exc))
        assert outcomes[0] == outcomes[1], sample
    with pytest.raises(ValueError, match="pass its key"):
        Request.from_payload(good[0])


def test_unserializable_requests_are_refused_at_add() -> None:
    """A request msgpack cannot hold is a counted rejection at add(), not a store entry
    that breaks dump later; to_payload says why."""
    f = Frontier.open("memory://")
    bad = Request("https://a.example/", meta={"k": object()})
    res = f.add([bad, "https://a.example/ok", Request("https://a.example/\ud800")])
    assert res.added == 1
    assert [(r.index, r.reason) for r in res.rejected][:1] == [(0, "invalid-request")]
    assert "not serializable" in res.rejected[0].detail
    assert f.stats().rejected.get("invalid-request", 0) >= 1
    with pytest.raises(ConfigError, match="not serializable"):
        bad.to_payload()
    f.close()


@pytest.mark.parametrize("options", [{}, {"dedup_post": False}, {"source_aware": True}])
def test_fingerprint_of_is_the_key_add_uses(options: dict[str, Any]) -> None:
    """``Frontier.fingerprint_of`` gives the seen-set key of the entry add() makes
    (None for a request that bypasses dedup: dont_filter, a retry, a POST without
    dedup_post)."""
    f = Frontier.open("memory://", **options)
    reqs = [Request("https://a.example/p"), Request("https://a.example/p", dont_filter=True),
            Request("https://a.example/p", retries=1),
            Request("https://a.example/p", method="POST", body=b"x"),
            Request("https://a.example/p", method="PUT"),
            Request("https://a.example/p", referrer="https://r.example/"),
            Request("https://a.example/p", body=b"b")]
    entries: list[Any] = []
    f._entries.make(reqs, 0, len(reqs), 0.0, [], entries, [])
    assert [f.fingerprint_of(r) for r in reqs] == [e[0] for e in entries]
    keys = [e[0] for e in entries]
    assert keys[1] is None and keys[2] is None and keys[0] is not None
    assert (keys[3] is None) == (options.get("dedup_post") is False)
    assert (keys[5] != keys[0]) == bool(options.get("source_aware"))
    f.close()


@pytest.mark.parametrize("options", [
    {}, {"revisit_after": 30.0}, {"source_aware": True},
    {"priority": lambda r: len(r.url) % 7 - 3},
    {"fingerprint": lambda r, canon: canon.encode()[:16]}])
def test_a_url_is_its_request(options: dict[str, Any]) -> None:
    """A plain URL given to add() makes the entry (or rejection) of ``Request(url)``,
    whatever the frontier's functions (they get a Request)."""
    urls = generated_urls(2_000, seed=9)
    f = Frontier.open("memory://", **options)
    as_urls: tuple[list[Any], list[Any]] = ([], [])
    as_requests: tuple[list[Any], list[Any]] = ([], [])
    f._entries.make(urls, 0, len(urls), 5.0, as_urls[0], as_urls[1], [])
    f._entries.make([Request(u) for u in urls], 0, len(urls), 5.0, as_requests[0],
                    as_requests[1], [])
    assert as_urls == as_requests
    assert len(as_urls[1]) > 1000 and len(as_urls[0]) > 50
    f.close()


def test_the_frontier_reports_the_entry_options_add_uses_and_refuses_to_change_them() -> None:
    """priority, dedup_post and revisit_after are what add() applies, read from the entry
    maker; setting one afterwards is an error, not a silent no-op."""
    from crawlq import Frontier

    def prio(r: Request) -> int:
        return 3

    with Frontier.open("memory://", priority=prio, dedup_post=False,
                       revisit_after=60) as f:
        assert (f.priority, f.dedup_post, f.revisit_after) == (prio, False, 60.0)
        with pytest.raises(AttributeError):
            f.revisit_after = 5  # type: ignore[misc]
        f.add(["http://a.test/x"])
        assert f.next()[0].request.priority == 3
