"""HTTP fetching for the crawler: httpx, with our own name resolution so that every
address is checked before any connection (no loopback, private or link-local targets
unless allowed, even when a public name resolves there), and a cap on decoded bytes
(a decompression-bomb guard). Redirects are not followed here: the crawler queues the
target as a new request, so each hop goes through scope, robots and politeness."""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx

from .decode import ACCEPT_ENCODING, DecodeError, decode


class Blocked(Exception):
    """The URL may not be fetched: ``reason`` is ``private-address`` or ``unresolvable``."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass
class Fetched:
    """A response, read up to the size cap: ``raw`` as received, ``body`` decoded."""

    url: str
    status: int
    headers: dict[str, str]
    body: bytes
    elapsed: float
    truncated: bool = False
    location: str | None = None
    fetched_at: float = field(default_factory=time.time)
    raw: bytes = b""
    header_list: list[tuple[str, str]] = field(default_factory=list)
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""
    ip: str = ""
    decode_error: str | None = None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            k, _, v = part.strip().partition("=")
            if k.lower() == "charset" and v:
                return v.strip("\"' ")
        return None


def _is_private(ip: str) -> bool:
    a = ipaddress.ip_address(ip)
    return (a.is_private or a.is_loopback or a.is_link_local or a.is_reserved
            or a.is_multicast or a.is_unspecified)


class Fetcher:
    """Fetches URLs with one shared httpx client.

    ``resolve`` maps host names (``fnmatch`` patterns, e.g. ``*.crawlq.test``) to IP
    addresses, ahead of the system resolver: the local test web is reached this way.
    """

    def __init__(self, *, user_agent: str, timeout: float = 20.0, max_bytes: int = 5_000_000,
                 resolve: Mapping[str, str] | None = None, allow_private: bool = False,
                 connections: int = 64) -> None:
        self.user_agent = user_agent
        self.max_bytes = max_bytes
        self.resolve = dict(resolve or {})
        self.allow_private = allow_private
        self.client = httpx.AsyncClient(
            timeout=timeout, follow_redirects=False, trust_env=False,
            limits=httpx.Limits(max_connections=connections,
                                max_keepalive_connections=connections),
            headers={"User-Agent": user_agent})

    async def address(self, host: str) -> str:
        """The checked IP address to connect to for ``host``."""
        ip = None
        for pattern, target in self.resolve.items():
            if fnmatch.fnmatch(host, pattern):
                ip = target
                break
        if ip is None:
            try:
                ipaddress.ip_address(host.strip("[]"))
                ip = host.strip("[]")
            except ValueError:
                try:
                    infos = await asyncio.get_running_loop().getaddrinfo(
                        host, None, type=socket.SOCK_STREAM)
                except OSError as exc:
                    raise Blocked("unresolvable", f"{host}: {exc}") from None
                ip = str(infos[0][4][0])
        if not self.allow_private and _is_private(ip):
            raise Blocked("private-address", f"{host} is {ip} (use --allow-private to allow)")
        return ip

    async def get(self, url: str) -> Fetched:
        """GET ``url``; raises :class:`Blocked` or an ``httpx.HTTPError``."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        ip = await self.address(host)
        netloc = f"[{ip}]" if ":" in ip else ip
        if parts.port:
            netloc += f":{parts.port}"
        target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        headers = {"Host": parts.netloc.rpartition("@")[2], "Accept-Encoding": ACCEPT_ENCODING}
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        start = time.monotonic()
        async with self.client.stream("GET", target, headers=headers,
                                      extensions=extensions) as r:
            raw = bytearray()
            truncated = False
            async for chunk in r.aiter_raw():  # as sent: WARC keeps these bytes
                raw += chunk
                if len(raw) > self.max_bytes:
                    truncated = True
                    del raw[self.max_bytes:]
                    break
            elapsed = time.monotonic() - start
            headers_out = {k.lower(): v for k, v in r.headers.items()}
            decode_error = None
            try:
                body, cut = decode(bytes(raw), r.headers.get("content-encoding"),
                                   self.max_bytes)
            except DecodeError as exc:
                body, cut, decode_error = b"", False, str(exc)
            return Fetched(
                url, r.status_code, headers_out, body, elapsed, truncated or cut,
                r.headers.get("location"), raw=bytes(raw),
                header_list=[(k.decode("latin-1"), v.decode("latin-1"))
                             for k, v in r.headers.raw],
                request_headers=[(k.decode("latin-1"), v.decode("latin-1"))
                                 for k, v in r.request.headers.raw],
                reason=r.reason_phrase, ip=ip, decode_error=decode_error)

    async def close(self) -> None:
        await self.client.aclose()
