"""The local test web: a generated multi-host site served on 127.0.0.1.

Crawler tests, benchmarks and the demo crawl it instead of the internet. One HTTP server
on a free loopback port serves many virtual hosts, chosen by the ``Host`` header (a
crawler resolves every ``*.test`` name to 127.0.0.1 through its resolver option; nothing
touches /etc/hosts). Everything is deterministic for a given :class:`SiteSpec`, and the
server records every request it answers (:attr:`TestWeb.log`) so tests can check what
was fetched, in which order and with which per-host spacing.

Paths on every host:

=============================  =================================================
``/``                          index: links to the first pages
``/page/<n>``                  a page with links to other pages (some on other
                               hosts, some rel=nofollow, some to special paths)
``/robots.txt``                per-host rules (see :meth:`SiteSpec.robots`)
``/private/<n>``               disallowed by robots.txt
``/redirect/<n>``              301 to ``/page/<n>``
``/redirect-out``              302 to a host outside the site (``elsewhere.test``)
``/redirect-private``          302 to ``http://10.0.0.1/`` (a private address)
``/redirect-to/<host>``        302 to ``http://<host>/latest/`` (not linked)
``/slow/<n>``                  answers after ``slow_seconds``
``/ratelimited``               429 with ``Retry-After`` the first time per host
``/unavailable``               503 with ``Retry-After`` the first time per host
``/calendar/<y>/<m>``          a spider trap: each month links to the next, forever
``/broken``                    malformed HTML (unclosed tags, junk bytes)
``/latin1``                    ISO-8859-1 text, declared in the Content-Type
``/meta-charset``              Shift_JIS text, declared only in a ``<meta>`` tag
``/big``                       a page of ``big_bytes`` bytes
``/gzip``                      a gzip-encoded page (``Content-Encoding: gzip``)
``/error``                     500, always
``/nested/<n>``                a page of ``n`` nested ``<div>`` around a link to
                               ``/page/1``: slow to parse (not linked)
``/cookie/set``                a page that sets the cookie ``visit=1`` (threads
                               engine; not linked). The threads engine is also an
                               HTTP proxy for its own hosts (``GET http://host/path``)
``/chunked``                   a page sent with ``Transfer-Encoding: chunked`` (three
                               chunks; threads engine; not linked)
``/status/<code>``             ``code``, always; ``?retry-after=X`` adds that
                               ``Retry-After`` header (not linked)
``/huge-header``               200 with a 100 kB response header (not linked)
``/redirect-loop/<n>``         302 to ``/redirect-loop/<n+1>``, forever (not linked)
``/sitemap.xml``               a sitemap index (with ``sitemap_pages``) naming
``/sitemap-1.xml.gz``          a gzipped sitemap of ``/orphan/<n>`` pages
``/orphan/<n>``                a page that only the sitemap names
=============================  =================================================
"""

from __future__ import annotations

import gzip
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .web_async import AsyncServer
from .web_site import DOMAIN, Hit, SiteSpec, page_html, page_padding, reachable

__all__ = ["DOMAIN", "Hit", "SiteSpec", "TestWeb", "pages", "reachable", "serve"]


class TestWeb:
    """A running test web; see :func:`serve`.

    ``engine`` is ``"threads"`` (the standard library's ThreadingHTTPServer, a thread per
    connection; the default) or ``"asyncio"``: one event loop in one thread, several
    times faster, for benchmarks where the server must not be what limits a crawler.
    Both answer the same (one routing method) and log the same.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, spec: SiteSpec, engine: str = "threads", tls: bool = False) -> None:
        if engine not in ("threads", "asyncio"):
            raise ValueError(f"engine must be 'threads' or 'asyncio', not {engine!r}")
        self.spec = spec
        self.engine = engine
        self.scheme = "https" if tls else "http"
        self.ca_file: str | None = None
        """With ``tls``: the PEM file of the test CA that signed the server's
        certificate (for ``*.crawlq.test``); a client must trust it."""
        ssl_ctx = self._tls_context() if tls else None
        self.log: list[Hit] = []
        self._lock = threading.Lock()
        self._once: set[tuple[int, str]] = set()
        self._started: dict[str, int] = {}  # path -> requests received, answered or not
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms stalls

            def do_GET(self) -> None:
                web._handle(self)

            def do_HEAD(self) -> None:
                web._handle(self, head=True)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test web logs into TestWeb.log, not stderr

        self.port: int
        if engine == "asyncio":
            self._aio = AsyncServer(self, ssl_ctx)
            self.port = self._aio.port
            self._thread = threading.Thread(target=self._aio.run, daemon=True,
                                            name="crawlq-test-web")
            return
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if ssl_ctx is not None:
            self._server.socket = ssl_ctx.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="crawlq-test-web")

    def url(self, host: int | str, path: str = "/") -> str:
        """The URL of ``path`` on a host (index or name), with the server's port."""
        name = self.spec.host(host) if isinstance(host, int) else host
        return f"{self.scheme}://{name}:{self.port}{path}"

    def _tls_context(self) -> ssl.SSLContext:
        """A CA and a certificate for ``*.crawlq.test`` made for this server (needs the
        ``cryptography`` package, which Scrapy's dependencies bring)."""
        import datetime
        import tempfile

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.timezone.utc)
        span = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=2))

        def cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
            b = (x509.CertificateBuilder()
                 .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                 .issuer_name(issuer).public_key(key.public_key())
                 .serial_number(x509.random_serial_number())
                 .not_valid_before(span[0]).not_valid_after(span[1])
                 .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
            if ca:
                b = b.add_extension(x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False),
                    critical=True)
            else:
                b = b.add_extension(x509.SubjectAlternativeName(
                    [x509.DNSName(f"*.{DOMAIN}"), x509.DNSName(DOMAIN)]), critical=False)
            return b.sign(signer, hashes.SHA256())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = cert("crawlq test CA", ca_key,
                  x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawlq test CA")]),
                  ca_key, True)
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = cert(f"*.{DOMAIN}", key, ca.subject, ca_key, False)
        folder = Path(tempfile.mkdtemp(prefix="crawlq-test-web-tls-"))
        pem = serialization.Encoding.PEM
        (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
        (folder / "server.pem").write_bytes(
            leaf.public_bytes(pem) + key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.ca_file = str(folder / "ca.pem")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(folder / "server.pem"))
        return ctx

    def started(self, path: str) -> int:
        """How many requests for ``path`` arrived so far, answered or not (a slow page
        being waited on counts here before it is in :meth:`hits`)."""
        with self._lock:
            return self._started.get(path, 0)

    def hits(self, host: int | str | None = None) -> list[Hit]:
        """The requests answered so far, optionally for one host."""
        with self._lock:
            log = list(self.log)
        if host is None:
            return log
        name = self.spec.host(host) if isinstance(host, int) else host
        return [h for h in log if h.host == name]

    def start(self) -> TestWeb:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.engine == "asyncio":
            self._aio.stop()
            self._thread.join(10)
            return
        self._server.shutdown()
        self._server.server_close()

    def record(self, host: str, path: str, status: int, user_agent: str,
               proxied: bool = False, cookie: str = "") -> None:
        """Log a request answered (:attr:`log`)."""
        with self._lock:
            self.log.append(Hit(time.time(), host, path, status, user_agent, proxied,
                                cookie))

    def _first_time(self, i: int, what: str) -> bool:
        with self._lock:
            if (i, what) in self._once:
                return False
            self._once.add((i, what))
            return True

    def _handle(self, h: BaseHTTPRequestHandler, head: bool = False) -> None:
        host = (h.headers.get("Host") or "").split(":")[0].lower()
        path, proxied = h.path, h.path.startswith("http://")
        if proxied:  # a proxy's request: this server is a proxy for its own hosts
            rest = path[len("http://"):]
            host = rest.split("/", 1)[0].split(":")[0].lower()
            path = "/" + rest.partition("/")[2]
        i = self.spec.host_index(host)
        delay = self.delay_of(i, path)
        if delay:
            time.sleep(delay)
        cookie = h.headers.get("Cookie", "")
        status, headers, body = self.route(i, path)
        if path.startswith("/cookie/set"):
            headers = [*headers, ("Set-Cookie", "visit=1; Path=/")]
        self.record(host, path, status, h.headers.get("User-Agent", ""), proxied, cookie)
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        chunked = ("Transfer-Encoding", "chunked") in headers
        if not chunked:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if head:
            return
        if chunked:  # three chunks, then the last (empty) one
            third = -(-len(body) // 3)
            for at in range(0, len(body), third):
                part = body[at:at + third]
                h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            h.wfile.write(b"0\r\n\r\n")
        else:
            h.wfile.write(body)

    def delay_of(self, i: int | None, path: str) -> float:
        """Seconds the server waits before it answers ``path`` (slow pages, latency);
        called as each request arrives."""
        with self._lock:
            self._started[path] = self._started.get(path, 0) + 1
        head = path.split("?")[0].strip("/").split("/")[0]
        if i is None:
            return 0.0
        if head == "slow":
            return self.spec.slow_seconds
        return self.spec.latency if head == "page" else 0.0

    def route(self, i: int | None, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """(status, headers, body) of ``path`` on host ``i``."""
        spec = self.spec
        html = [("Content-Type", "text/html; charset=utf-8")]
        if i is None:
            return 404, html, b"<html><body>unknown host</body></html>"
        parts = path.split("?")[0].strip("/").split("/")
        head = parts[0]
        if path == "/robots.txt":
            if i in spec.robots_5xx:
                return 503, [("Content-Type", "text/plain")], b"try later"
            if i in spec.robots_404:
                return 404, [("Content-Type", "text/plain")], b"no robots here"
            return 200, [("Content-Type", "text/plain")], \
                spec.robots(i, self.port, self.scheme).encode()
        if head == "":
            links = [(f"/page/{n}", False) for n in range(min(spec.pages_of(i), spec.links + 1))]
            return 200, html, page_html(f"{spec.host(i)} index", links).encode()
        if head == "page" and len(parts) == 2 and parts[1].isdigit():
            n = int(parts[1])
            if n >= spec.pages_of(i):
                return 404, html, b"<html><body>no such page</body></html>"
            return 200, html, page_html(f"{spec.host(i)} page {n}",
                                        spec.page_links(i, n, self.port, self.scheme),
                                        page_padding(spec.page_bytes)).encode()
        if head == "private":
            return 200, html, page_html("private", []).encode()
        if head == "redirect" and len(parts) == 2:
            return 301, [("Location", f"/page/{parts[1]}")], b""
        if head == "redirect-out":
            return 302, [("Location", "http://elsewhere.test/")], b""
        if head == "redirect-private":
            return 302, [("Location", "http://10.0.0.1/admin")], b""
        if head == "redirect-to" and len(parts) == 2:
            return 302, [("Location", f"http://{parts[1]}/latest/")], b""
        if head == "slow":
            return 200, html, page_html("slow", []).encode()
        if head in ("ratelimited", "unavailable"):
            if self._first_time(i, head):
                return (429 if head == "ratelimited" else 503), \
                    [("Retry-After", "2"), ("Content-Type", "text/plain")], b"wait"
            return 200, html, page_html(head + " (now fine)", []).encode()
        if head == "calendar" and len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            y, m = int(parts[1]), int(parts[2])
            nxt = (y + 1, 1) if m == 12 else (y, m + 1)
            return 200, html, page_html(f"calendar {y}-{m:02d}",
                                    [(f"/calendar/{nxt[0]}/{nxt[1]}", False)]).encode()
        if head == "broken":
            return 200, html, (b"<html><head><title>broken</title><body><p><a href='/page/1'"
                               b">one<a href=/page/2>two</p></div>\xff\xfe<<<a href=\"/page/3")
        if head == "latin1":
            return 200, [("Content-Type", "text/html; charset=iso-8859-1")], \
                page_html("Café crème à Zürich", []).encode("iso-8859-1")
        if head == "meta-charset":
            text = ('<html><head><meta charset="shift_jis"><title>日本語のページ</title>'
                    '</head><body>こんにちは</body></html>')
            return 200, [("Content-Type", "text/html")], text.encode("shift_jis")
        if head == "big":
            filler = "<p>" + "x" * 1000 + "</p>\n"
            return 200, html, page_html("big", [("/page/0", False)],
                                    filler * (spec.big_bytes // len(filler))).encode()
        if head == "gzip":
            return 200, [*html, ("Content-Encoding", "gzip")], \
                gzip.compress(page_html("gzipped", [("/page/1", False)]).encode())
        if head == "error":
            return 500, html, b"<html><body>server error</body></html>"
        if head == "cookie":
            return 200, html, page_html("cookie", [("/page/1", False)]).encode()
        if head == "chunked":
            return 200, [*html, ("Transfer-Encoding", "chunked")], \
                page_html("chunked", [("/page/1", False)], "<p>" + "c" * 3000 + "</p>").encode()
        if head == "nested" and len(parts) == 2 and parts[1].isdigit():
            n = min(int(parts[1]), 1_000_000)
            return 200, html, ("<html><body>" + "<div>" * n + '<a href="/page/1">x</a>'
                               + "</div>" * n + "</body></html>").encode()
        if head == "status" and len(parts) == 2 and parts[1].isdigit():
            headers = [("Content-Type", "text/plain")]
            query = path.partition("?")[2]
            if query.startswith("retry-after="):
                headers.append(("Retry-After", query.partition("=")[2]))
            return int(parts[1]), headers, b"status as asked"
        if spec.sitemap_pages and path == "/sitemap.xml":
            base = self.url(i, "")
            return 200, [("Content-Type", "application/xml")], (
                '<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns='
                '"http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"<sitemap><loc>{base}/sitemap-1.xml.gz</loc></sitemap></sitemapindex>"
            ).encode()
        if spec.sitemap_pages and path == "/sitemap-1.xml.gz":
            base = self.url(i, "")
            locs = [f"{base}/orphan/{n}" for n in range(spec.sitemap_pages)]
            locs.append("http://elsewhere.test/from-a-sitemap")
            xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns='
                   '"http://www.sitemaps.org/schemas/sitemap/0.9">'
                   + "".join(f"<url><loc>{u}</loc><priority>0.5</priority></url>"
                             for u in locs) + "</urlset>")
            return 200, [("Content-Type", "application/gzip")], gzip.compress(xml.encode())
        if head == "orphan" and len(parts) == 2 and parts[1].isdigit():
            return 200, html, page_html(f"orphan {parts[1]}", []).encode()
        if head == "redirect-loop" and len(parts) == 2 and parts[1].isdigit():
            return 302, [("Location", f"/redirect-loop/{int(parts[1]) + 1}")], b""
        if head == "huge-header":
            return 200, [*html, ("X-Filler", "x" * 100_000)], page_html("huge", []).encode()
        return 404, html, b"<html><body>not found</body></html>"


def pages(web: TestWeb) -> list[tuple[str, str]]:
    """(host, path) of every page fetched so far (robots.txt left out), in order."""
    return [(h.host, h.path) for h in web.hits() if h.path != "/robots.txt"]


@contextmanager
def serve(spec: SiteSpec | None = None, engine: str = "threads",
          tls: bool = False) -> Iterator[TestWeb]:
    """Run the test web on a free port of 127.0.0.1 for the duration of a ``with``
    (over HTTPS with ``tls``: see :attr:`TestWeb.ca_file`)."""
    web = TestWeb(spec or SiteSpec(), engine, tls).start()
    try:
        yield web
    finally:
        web.stop()
