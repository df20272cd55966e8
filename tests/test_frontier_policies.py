"""The Frontier's policies (crawlq.policies.frontier): each checked once when made, frozen,
given to ``Frontier(store, ...)`` whole or gathered by ``Frontier.open`` from its flat
options; and a Frontier made on a store object, which records the canonical form only
when asked."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from crawlq import (
    Canonicalizer,
    ConfigError,
    Frontier,
    LeasePolicy,
    Outcome,
    Request,
    RetryPolicy,
    URLPolicy,
)
from crawlq.stores.memory import MemoryStore

_POLICY = {"lease_ttl": LeasePolicy, "strict_acks": LeasePolicy,
           "max_retries": RetryPolicy, "retry_backoff": RetryPolicy,
           "retry_backoff_max": RetryPolicy}


@pytest.mark.parametrize(("option", "value"), [
    ("lease_ttl", 0), ("lease_ttl", "abc"), ("lease_ttl", float("inf")),
    ("strict_acks", "false"),
    ("max_retries", -1), ("max_retries", 1.5), ("max_retries", "3"),
    ("retry_backoff", -1), ("retry_backoff", "abc"), ("retry_backoff_max", float("nan")),
    ("revisit_after", 0), ("revisit_after", "daily"),
    ("max_url_length", 0), ("max_url_length", "8k"),
    ("schemes", "https"), ("schemes", 5), ("schemes", ["https", 5]),
    ("source_aware", 2), ("dedup_post", None), ("priority", 5), ("fingerprint", "blake"),
    ("canonicalize", "yes"), ("queue_by", "path"),
])
def test_a_policy_checks_its_fields_when_made(option: str, value: object) -> None:
    """The same checks, and the same messages, as the flat options of open()."""
    kind = _POLICY.get(option, URLPolicy)
    with pytest.raises(ConfigError, match=option):
        kind(**{option: value})


def test_policies_are_frozen_values_kept_as_checked() -> None:
    urls = URLPolicy(schemes=(s for s in ["https"]), revisit_after=60)
    assert urls.schemes == ("https",) and urls.revisit_after == 60.0
    assert isinstance(urls.canonicalizer, Canonicalizer)
    assert urls.queue_key("https://a.example:8443/x") == "a.example:8443"
    assert LeasePolicy(lease_ttl=5).lease_ttl.__class__ is float
    assert URLPolicy() == URLPolicy() and hash(RetryPolicy()) == hash(RetryPolicy())
    with pytest.raises(dataclasses.FrozenInstanceError):
        RetryPolicy().max_retries = 9  # type: ignore[misc]
    stricter = dataclasses.replace(RetryPolicy(max_retries=5), retry_backoff=1)
    assert (stricter.max_retries, stricter.retry_backoff) == (5, 1.0)
    with pytest.raises(ConfigError, match="retry_backoff"):
        dataclasses.replace(stricter, retry_backoff=-1)
    with pytest.raises(TypeError):  # keyword-only, as the options are named
        RetryPolicy(3)  # type: ignore[call-arg]


def test_retry_backoff_doubles_up_to_its_cap_then_the_request_is_dead() -> None:
    policy = RetryPolicy(max_retries=3, retry_backoff=10, retry_backoff_max=25)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [10.0, 20.0, 25.0, None]
    # Far more failures than a float's exponent: the cap, not an OverflowError (which
    # done() raised when the backoff was computed in the Frontier).
    assert RetryPolicy(max_retries=60_000).backoff(50_000) == 3600.0
    t = [0.0]
    with Frontier.open("memory://", max_retries=60_000, clock=lambda: t[0]) as f:
        f.add(Request("https://a.example/", retries=50_000))
        assert f.done(f.next(1), Outcome.FAILED) == 1
        assert f.next_ready_at() == 3600.0


def test_a_frontier_takes_its_policies_whole(tmp_path: Path) -> None:
    t = [1000.0]
    f = Frontier(MemoryStore(), url_policy=URLPolicy(schemes=["https"]),
                 retry_policy=RetryPolicy(max_retries=1, retry_backoff=5),
                 lease_policy=LeasePolicy(lease_ttl=30), clock=lambda: t[0])
    assert (f.lease_ttl, f.max_retries, f.retry_backoff) == (30.0, 1, 5.0)
    r = f.add(["https://a.example/1", "http://a.example/2"])
    assert r.added == 1 and r.rejected[0].reason == "bad-scheme"
    (lease,) = f.next(1)
    assert lease.expires_at == 1030.0
    f.done(lease, Outcome.FAILED, error="boom")
    assert f.next_ready_at() == 1005.0
    t[0] = 1005.0
    f.done(f.next(1), Outcome.FAILED, error="boom")  # a second failure: dead
    assert [d.error for d in f.dead()] == ["boom"]
    bad: dict[str, Any]
    for bad in ({"url_policy": {"schemes": ["https"]}}, {"retry_policy": LeasePolicy()},
                {"clock": 5}, {"pause_gc": "no"}, {"local_values": "crawlq:serve:"},
                {"local_values": ["ok:", ""]}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            Frontier(MemoryStore(), **bad)


def test_open_gathers_flat_options_or_takes_a_policy_whole(tmp_path: Path) -> None:
    with Frontier.open("memory://", retry_policy=RetryPolicy(max_retries=7),
                       lease_ttl=12) as f:
        assert (f.max_retries, f.lease_ttl) == (7, 12.0)
        assert f.retry_policy == RetryPolicy(max_retries=7)
        assert f.lease_policy == LeasePolicy(lease_ttl=12)
    with pytest.raises(ConfigError, match="max_retries is part of retry_policy"):
        Frontier.open("memory://", retry_policy=RetryPolicy(), max_retries=2)
    with pytest.raises(ConfigError, match="url_policy must be a URLPolicy"):
        Frontier.open("memory://", url_policy="strict")
    with pytest.raises(ConfigError, match="unknown option: bogus"):
        Frontier.open("memory://", bogus=1)
    # A bad option is refused before the store is made.
    with pytest.raises(ConfigError, match="lease_ttl"):
        Frontier.open(f"sqlite:///{tmp_path}/never.db", lease_ttl=0)
    assert not (tmp_path / "never.db").exists()


def test_a_frontier_made_on_a_store_records_the_form_when_asked() -> None:
    store = MemoryStore()
    f = Frontier(store)
    assert store.get_values(["crawlq:canonical-form"], 0.0) == [None]  # (not touched)
    f.check_canonical_form()
    assert store.get_values(["crawlq:canonical-form"], 0.0) == [
        Canonicalizer().version.encode()]
    f.add("https://a.example/?b=1&a=2")
    other = Frontier(store, url_policy=URLPolicy(canonicalize=Canonicalizer(sort_query=False)))
    with pytest.raises(ConfigError, match="canonical form"):
        other.check_canonical_form()
    # A function of your own: crawlq cannot tell its form, and records none.
    Frontier(store, url_policy=URLPolicy(canonicalize=str.lower)).check_canonical_form()
