"""Unit tests of the canonicalizer and fingerprints: one step at a time."""

from __future__ import annotations

import pytest

from crawlq import Canonicalizer, Fingerprinter, InvalidURL, Request
from crawlq.policies.canonical import remove_dot_segments
from crawlq.policies.queueing import host_key, resolve_queue_key

canon = Canonicalizer()


@pytest.mark.parametrize(("url", "expected"), [
    ("HTTP://Example.COM/Path", "http://example.com/Path"),            # path case kept
    ("https://example.com:443/", "https://example.com/"),
    ("http://example.com:80/", "http://example.com/"),
    ("http://example.com:8080/", "http://example.com:8080/"),
    ("https://example.com", "https://example.com/"),                   # empty path
    ("https://example.com/a#frag", "https://example.com/a"),
    ("https://example.com/a/./b/../c", "https://example.com/a/c"),
    ("https://example.com/a/b/..", "https://example.com/a/"),
    ("https://example.com/%7euser/%2F%41", "https://example.com/~user/%2FA"),
    ("https://example.com/%e2%82%ac", "https://example.com/%E2%82%AC"),
    ("https://example.com/a b", "https://example.com/a%20b"),
    ("https://example.com/ü", "https://example.com/%C3%BC"),
    ("https://example.com/100%", "https://example.com/100%25"),
    ("https://example.com/?b=2&a=1", "https://example.com/?a=1&b=2"),
    ("https://example.com/?a=2&b=1&a=1", "https://example.com/?a=2&a=1&b=1"),  # stable
    ("https://example.com/?Q=x&q=y", "https://example.com/?Q=x&q=y"),  # query case kept
    ("https://example.com/?utm_source=a&x=1&UTM_Medium=b", "https://example.com/?x=1"),
    ("https://example.com/?gclid=1&fbclid=2&sid=3", "https://example.com/"),
    ("https://example.com/p;jsessionid=ABC?x=1", "https://example.com/p?x=1"),
    ("https://example.com/?&&a=1&", "https://example.com/?a=1"),
    ("https://bücher.example/", "https://xn--bcher-kva.example/"),
    ("https://user:pw@Example.com/", "https://user:pw@example.com/"),
    ("https://[2001:DB8::1]:443/", "https://[2001:db8::1]/"),
    ("  https://example.com/x  ", "https://example.com/x"),
    ("https://example.com./", "https://example.com/"),
])
def test_canonical_forms(url: str, expected: str) -> None:
    assert canon(url) == expected


def test_each_step_can_be_switched_off() -> None:
    c = Canonicalizer(lowercase=False, drop_fragment=False, sort_query=False,
                      drop_default_port=False, normalize_path=False, drop_params=(),
                      drop_prefixes=())
    assert c("https://Ex.com:443/a/../b?b=1&a=2&utm_x=1#f") == \
        "https://Ex.com:443/a/../b?b=1&a=2&utm_x=1#f"


def test_optional_params_can_be_dropped() -> None:
    c = Canonicalizer(drop_params={"callback", "_"})
    assert c("https://a.example/j?callback=jq123&_=1699&id=4") == "https://a.example/j?id=4"


@pytest.mark.parametrize(("url", "reason"), [
    ("", "empty"),
    ("ftp://example.com/", "bad-scheme"),
    ("javascript:alert(1)", "bad-scheme"),
    ("example.com/page", "not-absolute"),
    ("https://", "no-host"),
    ("https://:80/", "no-host"),
    ("https://exa_mple.com:99999/", "bad-port"),
    ("https://example.com:8x/", "bad-port"),
    ("https://ex ample.com/", "bad-host"),
    ("https://example.com/\x01", "control-chars"),
    ("https://example.com/a\nb", "control-chars"),
    ("https://example.com/" + "x" * 9000, "too-long"),
    ("https://[::1/", "bad-host"),
])
def test_invalid_urls_have_reasons(url: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as err:
        canon(url)
    assert err.value.reason == reason
    assert reason in str(err.value)


def test_long_url_limit_is_configurable() -> None:
    assert Canonicalizer(max_length=20_000)("https://a.example/" + "x" * 15_000)
    with pytest.raises(InvalidURL):
        Canonicalizer(max_length=30)("https://a.example/" + "x" * 40)


def test_other_schemes_can_be_allowed() -> None:
    assert Canonicalizer(schemes=("http", "https", "ftp"))("FTP://H.example/x") == \
        "ftp://h.example/x"


@pytest.mark.parametrize(("path", "expected"), [
    ("/a/b/c/./../../g", "/a/g"), ("/../a", "/a"), ("/a/.", "/a/"), ("/.", "/"),
])
def test_remove_dot_segments(path: str, expected: str) -> None:
    assert remove_dot_segments(path) == expected


def test_split_gives_the_host_key() -> None:
    assert canon.split("https://user@Example.com:8443/x") == (
        "https://user@example.com:8443/x", "example.com:8443")
    assert host_key("https://user@example.com:8443/x?y") == "example.com:8443"


def test_queue_by_callable_and_errors() -> None:
    assert resolve_queue_key(lambda u: "one")("https://a/") == "one"
    with pytest.raises(ValueError):
        resolve_queue_key("nope")


def test_fingerprints() -> None:
    fp = Fingerprinter()
    a = fp(Request("https://a.example/"), "https://a.example/")
    assert len(a) == 16
    assert a == fp(Request("https://A.example/"), "https://a.example/")
    post = Request("https://a.example/", method="POST", body=b"x=1")
    assert fp(post, "https://a.example/") != a
    assert fp(post, "https://a.example/") != fp(
        Request("https://a.example/", method="POST", body=b"x=2"), "https://a.example/")
    src = Fingerprinter(source_aware=True)
    r1 = Request("https://a.example/", referrer="https://r1/")
    r2 = Request("https://a.example/", referrer="https://r2/")
    assert src(r1, "https://a.example/") != src(r2, "https://a.example/")
    assert fp(r1, "https://a.example/") == fp(r2, "https://a.example/")


def test_inlined_fingerprint_matches_the_fingerprinter() -> None:
    from crawlq import Frontier

    seen: list[bytes] = []

    class Spy(Fingerprinter):  # a subclass takes the generic path
        def __call__(self, request: Request, canonical_url: str) -> bytes:
            fp = super().__call__(request, canonical_url)
            seen.append(fp)
            return fp

    url = "https://a.example/x?b=1&a=2"
    with Frontier.open("memory://", fingerprint=Spy()) as slow, \
            Frontier.open("memory://") as fast:
        slow.add(url)
        fast.add(url)
        assert [e["fp"] for e in fast.dump() if e["type"] == "seen"] == [seen[0].hex()]
