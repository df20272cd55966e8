"""crawlq._speedups (the C fast path of add and next) agrees with the Python code.

The Python code owns the rules (the C path of add calls the Python canonicalizer);
the C code handles the plain case and hands back the rest. These tests feed both the
same requests, hand-picked and generated, and compare every result: fingerprint,
payload, add results, the stored state and the leases.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest

# Imported outright: where the extension failed to build, these tests fail (crawlq
# itself would run, on its pure-Python path).
import crawlq._speedups as speedups
from crawlq import Frontier, Lease, Request
from crawlq import frontier as frontier_module
from crawlq.models import _NO_META
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


def test_blake2b_matches_hashlib() -> None:
    rng = random.Random(7)
    for n in [0, 1, 15, 16, 127, 128, 129, 255, 256, 257, 1000, 5000]:
        data = bytes(rng.randrange(256) for _ in range(n))
        assert speedups.blake2b_128(data) == hashlib.blake2b(data, digest_size=16).digest()


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


def run(requests: list[Request | str], pure: bool, monkeypatch: pytest.MonkeyPatch,
        **options: Any) -> tuple[Any, ...]:
    with monkeypatch.context() as m:
        if pure:
            m.setenv("CRAWLQ_PURE_PYTHON", "1")
            m.setattr(frontier_module, "_LEASES", None)
        clock = Clock(1e9)
        f = Frontier.open("memory://", clock=clock, min_delay=0, max_delay=0,
                          concurrency=1000, **options)
        assert (f._fast is None) == pure
        results = [f.add(requests[i:i + 700]) for i in range(0, len(requests), 700)]
        dump = list(f.dump())[1:]  # (after the header: its id is new each time)
        clock.advance(100)
        leases = f.next(100_000)
        f.close()
    return results, dump, [(le.token, le.request, le.queue, le.leased_at, le.expires_at)
                           for le in leases]


@pytest.mark.parametrize("options", [
    {}, {"revisit_after": 30.0},
    {"canonicalize": Canonicalizer(drop_params={"a"}, drop_prefixes=("b",))}])
def test_frontier_add_and_next_agree_with_python(monkeypatch: pytest.MonkeyPatch,
                                                 options: dict[str, Any]) -> None:
    requests = mixed_requests(seed=3)
    fast_res, fast_dump, fast_leases = run(requests, False, monkeypatch, **options)
    pure_res, pure_dump, pure_leases = run(requests, True, monkeypatch, **options)
    assert fast_res == pure_res
    assert fast_dump == pure_dump
    assert fast_leases == pure_leases
    added = sum(r.added for r in fast_res)
    assert added > 1000 and len(fast_leases) > 1000
    assert any(r.rejected for r in fast_res)


def test_payloads_of_plain_requests_are_to_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entries the C path builds carry exactly Request.to_payload(key)."""
    f = Frontier.open("memory://")
    seen: list[Any] = []
    real_add = f.store.add

    def spy(entries: Any, now: float) -> list[int]:
        seen.extend(entries)
        return real_add(entries, now)

    monkeypatch.setattr(f.store, "add", spy)
    reqs = [r if isinstance(r, Request) else Request(r) for r in mixed_requests(seed=5)]
    result = f.add(reqs)
    kept = [i for i in range(len(reqs)) if i not in {r.index for r in result.rejected}]
    for entry, i in zip(seen, kept):
        assert entry[3] == reqs[i].to_payload(entry[1]), reqs[i]
        assert entry[1] == f.queue_of(reqs[i].url)
    f.close()


def test_lease_rows_of_every_payload_form() -> None:
    """LeaseMaker decodes plain payloads itself and hands the others to from_payload."""
    maker = speedups.LeaseMaker(Request, Lease, _NO_META, Request.from_payload)
    reqs = [
        Request("https://a.example/p?q=1"),
        Request("https://a.example/p", depth=3, referrer="https://a.example/r"),
        Request("http://a.example:81/p", depth=300, referrer="/odd"),
        Request("https://a.example/p", referrer="!x"),
        Request("https://b.example/ü", referrer="https://ü.example/"),
        Request("https://a.example/p", method="POST", body=b"\x00\xff"),
        Request("https://a.example/p", meta={"a": 1}, dont_filter=True, revisit_after=5.0),
        Request("https://a.example/" + "x" * 70_000, depth=70_000),
    ]
    rows = []
    for i, r in enumerate(reqs):
        for key in ("a.example", "a.example:81", "other"):
            rows.append((i, key, 4, 1, r.to_payload(key), 99.0))
    leases = maker.leases(rows, 5.0)
    for le, (token, key, prio, retries, payload, expires) in zip(leases, rows):
        want = Request.from_payload(payload, prio, retries, None, key)
        assert (le.token, le.request, le.queue, le.leased_at, le.expires_at) == \
            (token, want, key, 5.0, expires)
    # A store of someone else's may give rows as lists: the same leases.
    assert maker.leases([list(r) for r in rows], 5.0) == leases
    with pytest.raises(TypeError):
        maker.leases([(1, "k", 0)], 0.0)
    with pytest.raises(Exception):  # noqa: B017 - what from_payload raises, unchanged
        maker.leases([(1, "k", 0, 0, b"\x92\x02\xa1", 1.0)], 0.0)


@pytest.mark.parametrize("seed", range(3))
def test_fingerprint_set_agrees_with_set(seed: int) -> None:
    """FingerprintSet answers `in`, add(), len() and iteration as a set does: over
    several growths, the all-zero fingerprint, fingerprints sharing a half, and keys of
    other lengths and types (kept beside)."""
    rng = random.Random(seed)
    fps, ref = speedups.FingerprintSet(), set()
    keys: list[Any] = [rng.randbytes(16) for _ in range(20_000)]
    keys += [k[:8] + rng.randbytes(8) for k in keys[:500]]  # the same first half
    keys += [rng.randbytes(8) + k[8:] for k in keys[:500]]  # the same second half
    keys += [bytes(16), b"", b"x" * 15, b"y" * 17, b"z" * 32, "text", 7]
    rng.shuffle(keys)
    for k in keys:
        assert (k in fps) == (k in ref)
        if rng.random() < 0.7:
            fps.add(k)
            ref.add(k)
        assert len(fps) == len(ref)
    assert all((k in fps) == (k in ref) for k in keys)
    assert not any(rng.randbytes(16) in fps for _ in range(5_000))
    assert sorted(map(repr, fps)) == sorted(map(repr, ref))
    for k in keys[:100]:  # all again: only those not in yet are new
        fps.add(k)
        ref.add(k)
    assert len(fps) == len(ref) and sorted(map(repr, fps)) == sorted(map(repr, ref))
    with pytest.raises(TypeError):
        [] in fps  # noqa: B015 - unhashable, as for a set
    with pytest.raises(TypeError):
        fps.add([])  # type: ignore[arg-type]


def test_fingerprint_set_is_small() -> None:
    """The memory store's seen-set costs well under what a set of bytes objects does
    (17 bytes a slot, 35% to 70% of the slots used)."""
    import tracemalloc

    rng = random.Random(5)
    keys = [rng.randbytes(16) for _ in range(100_000)]
    sizes = []
    tracemalloc.start()
    try:
        for make in (speedups.FingerprintSet, set):
            before = tracemalloc.get_traced_memory()[0]
            held: Any = make()
            for k in keys:
                held.add(bytes(bytearray(k)))  # a fresh bytes object, as add() gets
            sizes.append(tracemalloc.get_traced_memory()[0] - before)
            assert len(held) == 100_000
            del held
    finally:
        tracemalloc.stop()
    assert sizes[0] / 100_000 < 50 and sizes[0] < 0.6 * sizes[1], sizes
