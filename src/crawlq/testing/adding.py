"""Part of the store contract (:class:`crawlq.testing.FrontierContract`). Adding:
canonical dedup, rejections with reasons, dedup bypasses, fingerprints, queue keys,
revisits."""

from __future__ import annotations

import pytest

from ..errors import ConfigError
from ..models import Request
from .env import FAST, Env


class AddingContract:
    """Adding (part of :class:`crawlq.testing.FrontierContract`)."""

    def test_add_dedups_canonical_forms(self, env: Env) -> None:
        f = env.open(**FAST)
        r = f.add(["https://Example.com:443/a?b=2&a=1#x", "https://example.com/a?a=1&b=2",
                   "https://example.com/a?a=1&b=2&utm_source=news", "https://example.com/b"])
        assert (r.added, r.duplicates, r.rejected) == (2, 2, ())
        assert r.added_flags == (True, False, False, True)
        f = env.checkpoint()
        r = f.add(["https://EXAMPLE.com/a?b=2&a=1", "https://example.com/c"])
        assert (r.added, r.duplicates) == (1, 1)
        s = f.stats()
        assert (s.seen, s.added, s.queued, s.duplicates) == (3, 3, 3, 3)

    def test_duplicates_a_caller_recognized_are_counted(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add(["https://a.example/", "https://a.example/"])
        f.count_duplicates(3)
        f.count_duplicates(0)
        with pytest.raises(ConfigError):
            f.count_duplicates(-1)
        f = env.checkpoint()
        s = f.stats()
        assert (s.added, s.duplicates) == (1, 4)

    def test_bad_urls_are_rejected_with_reasons_not_raised(self, env: Env) -> None:
        f = env.open(**FAST)
        r = f.add(["ftp://example.com/", "https://", "https://ok.example/",
                   "https://example.com/" + "a" * 50_000, "http://exa mple.com/",
                   "https://exa\x00mple.com/", "mailto:someone@example.com", ""])
        assert r.added == 1
        reasons = {x.index: x.reason for x in r.rejected}
        assert reasons == {0: "bad-scheme", 1: "no-host", 3: "too-long", 4: "bad-host",
                           5: "control-chars", 6: "bad-scheme", 7: "empty"}
        f = env.checkpoint()
        assert f.stats().rejected == {"bad-scheme": 2, "no-host": 1, "too-long": 1,
                                      "bad-host": 1, "control-chars": 1, "empty": 1}

    def test_dont_filter_and_retries_bypass_dedup(self, env: Env) -> None:
        f = env.open(**FAST)
        f.add("https://a.example/")
        r = f.add([Request("https://a.example/", dont_filter=True),
                   Request("https://a.example/", retries=1)])
        assert r.added == 2
        assert f.stats().seen == 1 and f.stats().added == 3

    def test_post_dedup_policy(self, env: Env) -> None:
        f = env.open(dedup_post=False, **FAST)
        post = Request("https://a.example/form", method="POST", body=b"q=1")
        assert f.add([post, post]).added == 2
        g = env.open_other(**FAST)
        assert g.add([post, post, Request("https://a.example/form", method="POST",
                                          body=b"q=2")]).added == 2

    def test_source_aware_fingerprints(self, env: Env) -> None:
        f = env.open(source_aware=True, **FAST)
        r = f.add([Request("https://a.example/x", referrer="https://a.example/1"),
                   Request("https://a.example/x", referrer="https://a.example/2"),
                   Request("https://a.example/x", referrer="https://a.example/1")])
        assert r.added_flags == (True, True, False)

    def test_custom_key_function(self, env: Env) -> None:
        f = env.open(canonicalize=lambda u: u.split("?")[0], **FAST)
        r = f.add(["https://a.example/p?session=1", "https://a.example/p?session=2"])
        assert r.added == 1

    def test_a_request_may_name_its_queue(self, env: Env) -> None:
        f = env.open(concurrency=1, **FAST)
        r = f.add([Request("https://a.example/1", queue="slot-x"),
                   Request("https://b.example/2", queue="slot-x"),
                   Request("https://a.example/3"),
                   Request("https://a.example/4", queue=""),
                   Request("https://a.example/5", queue=7)])  # type: ignore[arg-type]
        assert r.added == 3
        assert [(x.index, x.reason) for x in r.rejected] == [
            (3, "invalid-request"), (4, "invalid-request")]
        got = f.next(10)
        # One queue for both named ones (one lease at a time), the host's for the third.
        assert sorted((le.queue, le.request.url) for le in got) == [
            ("a.example", "https://a.example/3"), ("slot-x", "https://a.example/1")]
        f.done(got)
        (last,) = f.next(10)
        assert (last.queue, last.request.url) == ("slot-x", "https://b.example/2")
        assert last.request.queue is None  # where it waited is the lease's queue

    def test_revisit_after_interval(self, env: Env) -> None:
        f = env.open(revisit_after=3600, **FAST)
        f.add("https://a.example/daily")
        f.done(f.next(1))
        env.clock.advance(1800)
        f = env.checkpoint()
        assert f.add("https://a.example/daily").added == 0
        env.clock.advance(1801)
        assert f.add("https://a.example/daily").added == 1
        # A per-request interval overrides the frontier's.
        assert f.add(Request("https://a.example/often", revisit_after=10)).added == 1
        env.clock.advance(11)
        assert f.add("https://a.example/often").added == 1  # then the default (1 h) holds
        env.clock.advance(11)
        assert f.add("https://a.example/often").added == 0
