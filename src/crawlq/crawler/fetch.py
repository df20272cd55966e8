"""HTTP fetching for the crawler: aiohttp, with our own name resolution so that every
address is checked before any connection (no special-purpose address, see
:mod:`.addresses`, unless allowed, even when a public name resolves there), and a cap
on decoded bytes (a decompression-bomb guard). Redirects are not followed here: the
crawler queues the target as a new request, so each hop goes through scope, robots,
politeness and this address check.

Why aiohttp: it is the well-kept asyncio HTTP client made for many concurrent
connections; measured on the local test web it fetched about twice as many pages per
second as httpx did here (whose connection pool scans every connection per request).
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.cookies import BaseCookie, Morsel
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractCookieJar, AbstractResolver, ResolveResult
from aiohttp.client_proto import ResponseHandler
from aiohttp.typedefs import LooseCookies
from can_ada import parse as _parse
from yarl import URL

from ..policies.domains import is_public_suffix, public_suffix_list
from .addresses import networks, refusal
from .decode import ACCEPT_ENCODING, DecodeError, decode

log = logging.getLogger("crawlq.crawl")


class FetchError(Exception):
    """A fetch failed on the network or in the protocol (refused, reset, timed out,
    malformed or oversized response headers...): ``kind`` names the failure."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {detail}" if detail else kind)


class Blocked(Exception):
    """The URL may not be fetched: ``reason`` is ``private-address``, ``unresolvable``
    or ``invalid-url``."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")

    @classmethod
    def invalid(cls, url: str) -> Blocked:
        """For a string the WHATWG URL Standard (the fetch's reading) takes for no URL."""
        return cls("invalid-url", f"{url}: no URL by the WHATWG URL Standard")


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
    http_raw: bytes = b""
    """The whole response as it came off the wire (status line, headers, chunked framing,
    the body as sent; cut like ``raw``), for WARC; b"" when it could not be had."""

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


class _Recording(ResponseHandler):
    """aiohttp's connection protocol, also keeping the bytes of each response as they
    arrive (aiohttp hands out only the parsed status, headers and de-chunked body), and
    dropping a connection that answers what was not asked.

    A new response on a kept-alive connection starts a new buffer, so a fetch keeps the
    one its response began with. Up to ``cap`` bytes are kept per response.

    HTTP/1.1 matches responses to requests by their order alone, so bytes nobody asked
    for (a server that sends a second response after the first, aiohttp issue #13656)
    would be read as the answer to the connection's next request, and every later page
    of the host recorded with the previous one's response. aiohttp queues whatever its
    parser finds, so the check is here: once a request has its final response, another
    response to it, or any byte while the connection is idle, closes the connection and
    is never read. A stray still on its way when the next request is written cannot be
    told from that request's answer (nothing on the wire says which request a response
    is for); the real answer that follows is then the extra response, caught, and the
    connection dropped. The politeness delay between a host's requests is what keeps a
    stray from arriving then, and robots.txt, fetched right before a host's first page,
    is fetched on a connection closed after it (see :mod:`.robots`)."""

    cap = 0
    raw: bytearray
    answered = False
    """The request in flight (or the last one) has its final response."""
    answer: Any = None
    """That response's body stream (aiohttp's StreamReader)."""

    def set_response_params(self, *args: object, **kwargs: object) -> None:
        self.raw = bytearray()  # aiohttp calls this before sending each request
        self.answered = False
        super().set_response_params(*args, **kwargs)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if data and self.answered and self.answer.is_eof():  # idle: bytes nobody asked for
            self._drop()
            return
        raw = getattr(self, "raw", None)
        if raw is not None and len(raw) < self.cap:
            raw += data[:self.cap - len(raw)]
        super().data_received(data)

    def feed_data(self, data: Any, size: int = 0) -> None:
        """A parsed response (status and headers, body to come) for the request."""
        message, payload = data
        if self.answered:  # a second final response to one request: not queued
            self._drop()
            return
        if not 100 <= message.code < 200 or message.code == 101:  # (1xx: more to come)
            self.answered, self.answer = True, payload
        super().feed_data(data, size)

    def _drop(self) -> None:
        self.force_close()
        if self.transport is not None:
            self.transport.close()


class _Resolver(AbstractResolver):
    """aiohttp's resolver, through :meth:`Fetcher.address`: the address connected to is
    the one that was checked (a name cannot resolve to a private address between the
    check and the connection)."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        ip = await self.fetcher.address(host)
        return [{"hostname": host, "host": ip, "port": port,
                 "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


_NO_URL = URL()


class SiteCookieJar(aiohttp.CookieJar):
    """aiohttp's cookie jar (RFC 6265's domain and path matching, expiry, secure
    cookies), refusing as browsers do a cookie whose ``Domain`` is a public suffix by the
    Public Suffix List: ``Domain=com`` from ``evil.com``, ``Domain=github.io`` from a
    ``github.io`` site, ``Domain=test`` from ``a.test`` would otherwise be sent to every
    site under that suffix, letting one crawled site plant cookies on requests to
    others. aiohttp's jar has no such check, hence this filter. A public-suffix
    ``Domain`` equal to the response's own host makes a host-only cookie (RFC 6265
    5.3, step 5). ``refused`` counts the cookies dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def update_cookies(self, cookies: LooseCookies, response_url: URL = _NO_URL) -> None:
        """Keep ``cookies`` set by ``response_url``, less those for a public suffix."""
        host = (response_url.raw_host or "").lower()
        items = cookies.items() if isinstance(cookies, Mapping) else cookies
        kept: list[tuple[str, str | BaseCookie[str] | Morsel[Any]]] = []
        for name, value in items:
            if isinstance(value, Morsel) and value["domain"]:
                domain = value["domain"].lstrip(".").lower()
                if is_public_suffix(domain):
                    if domain != host:
                        self.refused += 1
                        log.debug("cookie %s for the public suffix %r from %s refused",
                                  name, domain, host)
                        continue
                    value = value.copy()
                    value["domain"] = ""  # host-only
            kept.append((name, value))
        super().update_cookies(kept, response_url)

    def update_cookies_from_headers(self, headers: Sequence[str], response_url: URL) -> None:
        """The Set-Cookie headers of a response, parsed by aiohttp, through
        :meth:`update_cookies` (aiohttp's jar would store them past that check)."""
        AbstractCookieJar.update_cookies_from_headers(self, headers, response_url)


def _whole(wire: bytes, body: bytes) -> bytes:
    """``wire`` if it is one whole response ending in the body read (else b"": the WARC
    writer then rebuilds the record from the parsed response)."""
    end = wire.find(b"\r\n\r\n")
    if end < 0 or not wire.startswith(b"HTTP/"):
        return b""
    if b"chunked" not in wire[:end].lower() and not wire.endswith(body):
        return b""
    return wire


class Fetcher:
    """Fetches URLs with one shared aiohttp session (keep-alive connections per host).

    ``resolve`` maps host names (``fnmatch`` patterns, e.g. ``*.crawlq.test``) to IP
    addresses, ahead of the system resolver: the local test web is reached this way.
    Special-purpose addresses are refused unless ``allow_private`` (all of them) or
    ``allow_addresses`` (these addresses and CIDR blocks) allow them.
    ``timeout`` bounds a whole fetch, connection included. Cookies are kept (per site,
    by the cookie rules, see :class:`SiteCookieJar`) only with ``cookies``. ``proxy``
    (an http:// URL) carries every request, or with ``proxy_from_env`` the standard
    variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``) say; target names are
    still resolved and checked here first (the proxy resolves them again).
    HTTPS certificates are checked against the system's CAs, plus ``ca_file`` (a PEM
    file, e.g. a company's internal CA) when given. ``headers`` are sent with every
    request (after the User-Agent, which they may replace). ``accept_encoding`` is
    the ``Accept-Encoding`` sent (a WARC output asks for less, see
    :class:`~crawlq.crawler.output.WarcOutput`). With ``keep_wire`` each response is
    also kept as it came off the wire (:attr:`Fetched.http_raw`, for WARC); without, that
    copy of every page is not made.
    """

    DNS_TTL = 300.0

    def __init__(self, *, user_agent: str, timeout: float = 20.0, max_bytes: int = 5_000_000,
                 resolve: Mapping[str, str] | None = None, allow_private: bool = False,
                 allow_addresses: tuple[str, ...] = (),
                 connections: int = 64, ca_file: str | None = None,
                 headers: Mapping[str, str] | None = None, proxy: str | None = None,
                 proxy_from_env: bool = False, cookies: bool = False,
                 accept_encoding: str = ACCEPT_ENCODING, keep_wire: bool = True) -> None:
        self.user_agent = user_agent
        self.ssl = ssl.create_default_context()
        if ca_file:
            self.ssl.load_verify_locations(ca_file)
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.resolve = dict(resolve or {})
        self.allow_private = allow_private
        self.allowed = networks(allow_addresses)
        self.connections = connections
        self.headers = {"User-Agent": user_agent, **(headers or {})}
        self.proxy = proxy
        self.proxy_from_env = proxy_from_env
        self.cookies = cookies
        if cookies:
            public_suffix_list()  # (loaded now: a missing package is one clear error)
        self.accept_encoding = accept_encoding
        self.keep_wire = keep_wire
        # The proxy the user named may be at a special-purpose address (often is: a
        # proxy on the LAN): its host is not refused. Targets still are.
        self._proxy_host = urlsplit(proxy).hostname if proxy else None
        self._dns: dict[str, tuple[str, float]] = {}
        self._sessions: dict[bool, aiohttp.ClientSession] = {}  # by keep_alive
        self._jar: AbstractCookieJar | None = None

    def _open(self, keep_alive: bool) -> aiohttp.ClientSession:
        # Made on first use: aiohttp wants a running event loop. The session without
        # keep-alive closes each connection after its response.
        session = self._sessions.get(keep_alive)
        if session is None:
            connector = aiohttp.TCPConnector(limit=self.connections, resolver=_Resolver(self),
                                             use_dns_cache=False, ssl=self.ssl,
                                             force_close=not keep_alive)
            # The protocol that keeps the bytes received (for WARC). _factory is aiohttp's
            # private hook for it; if it goes away, Fetched.http_raw stays b"" and WARC
            # records are rebuilt from the parsed response (the WARC test notices).
            if hasattr(connector, "_factory"):
                recording = type("Recording", (_Recording,), {
                    "cap": self.max_bytes + 65536 if self.keep_wire else 0})
                connector._factory = functools.partial(
                    recording, loop=asyncio.get_running_loop())
            if self._jar is None:  # (one for both sessions)
                self._jar = SiteCookieJar() if self.cookies else aiohttp.DummyCookieJar()
            session = self._sessions[keep_alive] = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers=self.headers, auto_decompress=False, cookie_jar=self._jar,
                trust_env=self.proxy_from_env)
        return session

    async def address(self, host: str) -> str:
        """The checked IP address to connect to for ``host`` (cached for a while);
        raises :class:`Blocked`."""
        hit = self._dns.get(host)
        now = time.monotonic()
        if hit is not None and hit[1] > now:
            ip = hit[0]
        else:
            ip = await self._lookup(host)
            self._dns[host] = (ip, now + self.DNS_TTL)
        if not self.allow_private and host != self._proxy_host:
            why = refusal(ip, self.allowed)
            if why is not None:
                raise Blocked("private-address", f"{host}: {why} (use --allow-address "
                              "or --allow-private to allow)")
        return ip

    async def _lookup(self, host: str) -> str:
        name = host.rstrip(".")  # (dot.test. is dot.test)
        for pattern, target in self.resolve.items():
            if fnmatch.fnmatch(name, pattern):
                return target
        try:
            ipaddress.ip_address(host.strip("[]"))
            return host.strip("[]")
        except ValueError:
            pass
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Blocked("unresolvable", f"{host}: {exc}") from None
        return str(infos[0][4][0])

    async def get(self, url: str, *, keep_alive: bool = True,
                  max_bytes: int | None = None) -> Fetched:
        """GET ``url``; raises :class:`Blocked` or :class:`FetchError`. With
        ``keep_alive`` False the connection is closed once the response is read;
        ``max_bytes`` reads less than the fetcher's cap.

        What is requested is ``url`` as the WHATWG URL Standard reads it (ada, the
        parser of the canonical form and of the crawl's scope): a Unicode host in its
        IDNA form, a backslash read as a slash, unsafe characters escaped, so the scope
        judged the URL that is fetched."""
        try:
            parsed = _parse(url)
            host = parsed.hostname.strip("[]")
        except (ValueError, TypeError):  # e.g. http://[zzz]/: no address to connect to
            raise Blocked.invalid(url) from None
        ip = await self.address(host)  # refused here, before any connection
        session = self._open(keep_alive)
        start = time.monotonic()
        try:
            # encoded=True: the URL goes out exactly as serialized (no fragment).
            target = URL(parsed.href.partition("#")[0], encoded=True)
            async with session.get(target, allow_redirects=False,
                                   headers={"Accept-Encoding": self.accept_encoding},
                                   proxy=self.proxy) as r:
                # (taken now: once the body is read the connection may serve another)
                wire = getattr(getattr(r, "_protocol", None), "raw", None)
                chunks: list[bytes] = []
                size = 0
                truncated = False
                cap = self.max_bytes if max_bytes is None else min(max_bytes, self.max_bytes)
                async for chunk in r.content.iter_chunked(65536):  # as sent: WARC keeps them
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        truncated = True
                        r.close()  # the rest is not read: the connection is not reused
                        break
                # (one copy of the body at most: pages are tens of KB, and each copy shows)
                raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if truncated:
                    raw = raw[:cap]
                elapsed = time.monotonic() - start
                header_list = [(k.decode("latin-1"), v.decode("latin-1"))
                               for k, v in r.raw_headers]
                request_headers = list(r.request_info.headers.items())
                status, reason = r.status, r.reason or ""
                http_raw = bytes(wire) if isinstance(wire, bytearray) and wire else b""
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            kind = "Timeout" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
            raise FetchError(kind, str(exc)) from exc
        if not 100 <= status <= 599:  # (RFC 9110, 15: three digits, 1xx to 5xx)
            raise FetchError("BadStatus", f"status {status:03d} is no HTTP status")
        headers_out: dict[str, str] = {}
        for k, v in header_list:
            k = k.lower()
            headers_out[k] = f"{headers_out[k]}, {v}" if k in headers_out else v
        decode_error = None
        try:
            body, cut = decode(raw, headers_out.get("content-encoding"), cap)
        except DecodeError as exc:
            body, cut, decode_error = b"", False, str(exc)
        return Fetched(
            url, status, headers_out, body, elapsed, truncated or cut,
            headers_out.get("location"), raw=raw, header_list=header_list,
            request_headers=request_headers, reason=reason, ip=ip,
            decode_error=decode_error, http_raw=_whole(http_raw, raw))

    async def close(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            await session.close()
