"""Leases outside the process that took them: a lease as JSON, and the handle that
answers it later (from the CLI, or a client of ``crawlq serve``).

A handle is ``"<token>.<retries>"``: the token names the lease in the store; the
request's failures so far are all :meth:`~crawlq.Frontier.done` needs besides it (to
back off a failure or bury it after ``max_retries``), so nothing needs to be remembered
between the call that leased and the one that answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .models import Lease, Request
from .stores.dumpfmt import request_to_json

if TYPE_CHECKING:
    from .frontier import Frontier


def lease_out(frontier: Frontier, n: int) -> list[Lease]:
    """``frontier.next(n)`` for leases that leave the process (printed, sent to a
    client): committed before it returns, where a small lease call would otherwise
    wait for the calls that follow it (the SQLite store's group commit)."""
    with frontier.transaction():
        return frontier.next(n)


def handle(lease: Lease) -> str:
    """The handle that answers ``lease``."""
    return f"{lease.token}.{lease.request.retries}"


def lease_of(text: object) -> Lease:
    """The lease a handle stands for (enough of it to answer it); ConfigError for
    anything that is not one."""
    if not isinstance(text, str):
        raise ConfigError(f"a lease handle is a string like '17.0', not {text!r}")
    token, dot, retries = text.partition(".")
    if not (token.isdigit() and token.isascii() and (not dot or (retries.isdigit()
                                                                and retries.isascii()))):
        raise ConfigError(f"not a lease handle: {text!r} (the 'lease' of a leased record, "
                          "like '17.0')")
    return answering(int(token), int(retries or 0))


def answering(token: int, retries: int) -> Lease:
    """The lease of ``token`` as an answer needs it: the token and the request's
    failures so far (what a handle keeps)."""
    return Lease(token, Request("about:lease", retries=retries), "", 0.0, 0.0)


def record(lease: Lease) -> dict[str, Any]:
    """A lease as JSON: its handle, token, queue, expiry and request."""
    return {"lease": handle(lease), "token": lease.token, "queue": lease.queue,
            "expires_at": lease.expires_at, **request_to_json(lease.request)}
