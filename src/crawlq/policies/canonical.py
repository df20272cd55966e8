"""URL canonicalization: one spelling per resource, so duplicates are seen as such.

The default :class:`Canonicalizer` lowercases scheme and host, turns IDNs into punycode,
drops the default port and the ``#fragment``, normalizes percent-encoding and dot
segments, makes an empty path ``/``, sorts query arguments stably by name and drops
tracking and session parameters. Path and query are never lowercased. Every step can
be switched off. Invalid input raises :class:`~crawlq.errors.InvalidURL` with a reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from urllib.parse import quote

from ..errors import InvalidURL

DEFAULT_DROP_PARAMS: frozenset[str] = frozenset(
    {"gclid", "fbclid", "dclid", "msclkid", "yclid", "jsessionid", "phpsessid", "sid",
     "aspsessionid", "cfid", "cftoken"}
)
"""Query parameters dropped by default (compared lowercased)."""
DEFAULT_DROP_PREFIXES: tuple[str, ...] = ("utm_",)
"""Query parameter name prefixes dropped by default."""
OPTIONAL_DROP_PARAMS: frozenset[str] = frozenset({"callback", "_"})
"""Parameters often worth dropping (jsonp callbacks, cache busters); opt in."""

DEFAULT_MAX_LENGTH = 8192
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}

# Characters that may stand unescaped in a path / query component (RFC 3986 pchar + '/?').
_PATH_SAFE = "/!$&'()*+,;=:@-._~"
_QUERY_SAFE = "/?!$'()*+,;:@-._~="  # '&' and '=' are structure, handled per pair
_CLEAN_PATH = re.compile(r"[A-Za-z0-9/!$&'()*+,;=:@\-._~]*\Z").match
_CLEAN_QUERY = re.compile(r"[A-Za-z0-9/?!$&'()*+,;=:@\-._~]*\Z").match
_HOST_CACHE = 50_000
_SPLIT = re.compile(
    r"([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#\x00-\x1f\x7f]*)([^?#\x00-\x1f\x7f]*)"
    r"(?:\?([^#\x00-\x1f\x7f]*))?(?:#([^\x00-\x1f\x7f]*))?\Z").match
_CONTROL = re.compile(r"[\x00-\x1f\x7f]").search
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_LONE_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_OK = re.compile(r"[a-z0-9._\-]+\Z").match
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SESSION_IN_PATH = re.compile(r";(?:jsessionid|phpsessid|sid)=[^/?#]*", re.IGNORECASE)


def _fix_escape(m: re.Match[str]) -> str:
    code = int(m.group(1), 16)
    # An escaped unreserved character means the character itself (RFC 3986 6.2.2.2).
    return chr(code) if code in _UNRESERVED else "%" + m.group(1).upper()


def _normalize_pct(s: str, safe: str) -> str:
    s = _PCT.sub(_fix_escape, s)
    s = _LONE_PCT.sub("%25", s)
    return quote(s, safe=safe + "%")


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4: resolve ``.`` and ``..`` segments of an absolute path."""
    out: list[str] = []
    segments = path.split("/")
    for seg in segments[1:]:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    if segments[-1] in (".", ".."):
        out.append("")
    return "/" + "/".join(out)


class Canonicalizer:
    """Callable ``url -> canonical url``; raises :class:`InvalidURL` with a reason.

    Each keyword switches one step. ``drop_params`` are compared lowercased;
    ``drop_prefixes`` match parameter names that start with them (lowercased).
    ``schemes`` are the accepted schemes; ``max_length`` the longest URL accepted.
    """

    def __init__(
        self,
        *,
        lowercase: bool = True,
        idna: bool = True,
        drop_default_port: bool = True,
        drop_fragment: bool = True,
        normalize_percent: bool = True,
        normalize_path: bool = True,
        sort_query: bool = True,
        drop_params: Iterable[str] = DEFAULT_DROP_PARAMS,
        drop_prefixes: Iterable[str] = DEFAULT_DROP_PREFIXES,
        drop_session_in_path: bool = True,
        schemes: Iterable[str] = ("http", "https"),
        max_length: int = DEFAULT_MAX_LENGTH,
    ) -> None:
        self.lowercase = lowercase
        self.idna = idna
        self.drop_default_port = drop_default_port
        self.drop_fragment = drop_fragment
        self.normalize_percent = normalize_percent
        self.normalize_path = normalize_path
        self.sort_query = sort_query
        self.drop_params = frozenset(p.lower() for p in drop_params)
        self.drop_prefixes = tuple(p.lower() for p in drop_prefixes)
        self.drop_session_in_path = drop_session_in_path
        self.schemes = frozenset(s.lower() for s in schemes)
        self.max_length = max_length
        self.default_steps = (lowercase and idna and drop_default_port and drop_fragment
                              and normalize_percent and normalize_path and sort_query
                              and drop_session_in_path)
        """True when every step is on (what crawlq's C fast path implements)."""
        self._hosts: dict[tuple[str, str], tuple[str, str]] = {}
        names = sorted(re.escape(p) for p in self.drop_params)
        names += [re.escape(p) + r"[^=&]*" for p in self.drop_prefixes]
        # One search of "&" + lowercased query tells whether any parameter must go;
        # most queries have none (a leading literal makes the regex scan fast).
        self._drop_any = re.compile("&(?:" + "|".join(names) + r")(?:[=&]|\Z)").search \
            if names else None

    def __call__(self, url: str) -> str:
        """Return the canonical form of ``url``."""
        return self.split(url)[0]

    def split(self, url: str) -> tuple[str, str]:
        """Return ``(canonical url, host key)``; the host key is the canonical authority
        without user info (the default queue key), computed here because the
        canonicalizer has it at hand."""
        if not url:
            raise InvalidURL("empty", url)
        if len(url) > self.max_length:
            raise InvalidURL("too-long", url, f"{len(url)} > {self.max_length} characters")
        m = _SPLIT(url)  # fails on control characters too: the slow path says which
        if m is None:
            return self._slow_checks(url)
        scheme, netloc, path, query, fragment = m.groups()
        lscheme = scheme.lower()
        if lscheme not in self.schemes:
            raise InvalidURL("bad-scheme", url, f"scheme {scheme!r} not in {sorted(self.schemes)}")
        if self.lowercase:
            scheme = lscheme
        hit = self._hosts.get((lscheme, netloc))
        if hit is None:
            hit = self._netloc(url, netloc, lscheme)
            if len(self._hosts) >= _HOST_CACHE:
                self._hosts.clear()  # a crude bound; hosts repeat, so it refills fast
            self._hosts[(lscheme, netloc)] = hit
        if self.drop_session_in_path and ";" in path:
            path = _SESSION_IN_PATH.sub("", path)
        if self.normalize_percent and not _CLEAN_PATH(path):
            path = self._pct(url, path, _PATH_SAFE)
        if self.normalize_path:
            if not path:
                path = "/"
            elif "/." in path:
                path = remove_dot_segments(path)
        out = f"{scheme}://{hit[0]}{path}"
        if query:
            query = self._query(url, query)
            if query:
                out = f"{out}?{query}"
        if fragment and not self.drop_fragment:
            out = f"{out}#{fragment}"
        return out, hit[1]

    def _slow_checks(self, url: str) -> tuple[str, str]:
        """Explain why a URL does not have the ``scheme://authority/...`` shape."""
        stripped = url.strip()
        if stripped != url and stripped:
            return self.split(stripped)
        if _CONTROL(url):
            raise InvalidURL("control-chars", url)
        scheme = url.partition(":")[0].lower()
        if ":" in url and scheme.isascii() and scheme.isalpha() and scheme not in self.schemes:
            raise InvalidURL("bad-scheme", url, f"scheme {scheme!r} not in "
                             f"{sorted(self.schemes)}")
        if "://" not in url:
            raise InvalidURL("not-absolute" if ":" not in url else "no-host", url,
                             "an absolute http(s) URL is needed")
        raise InvalidURL("no-host", url)

    def _pct(self, url: str, s: str, safe: str) -> str:
        try:
            return _normalize_pct(s, safe)
        except UnicodeEncodeError:
            raise InvalidURL("bad-encoding", url) from None

    def _netloc(self, url: str, netloc: str, scheme: str) -> tuple[str, str]:
        userinfo, at, hostport = netloc.rpartition("@")
        if hostport.startswith("["):  # IPv6 literal
            end = hostport.find("]")
            if end < 0:
                raise InvalidURL("bad-host", url, "unclosed IPv6 bracket")
            host, port = hostport[: end + 1], hostport[end + 1:].lstrip(":")
            if self.lowercase:
                host = host.lower()
        else:
            host, _, port = hostport.partition(":")
            if self.lowercase:
                host = host.lower()
            if host.endswith("."):
                host = host[:-1]
            if not host:
                raise InvalidURL("no-host", url)
            if not host.isascii():
                if not self.idna:
                    raise InvalidURL("bad-host", url, "non-ASCII host and idna=False")
                try:
                    host = host.encode("idna").decode("ascii")
                except UnicodeError as exc:
                    raise InvalidURL("bad-host", url, str(exc)) from None
            if not _HOST_OK(host if self.lowercase else host.lower()):
                raise InvalidURL("bad-host", url, f"invalid host {host!r}")
        if port:
            if not port.isdigit() or int(port) > 65535:
                raise InvalidURL("bad-port", url, f"port {port!r}")
            port = str(int(port))
            if self.drop_default_port and _DEFAULT_PORTS.get(scheme) == int(port):
                port = ""
        out = host + (":" + port if port else "")
        return (f"{userinfo}@{out}" if at else out), out

    def _query(self, url: str, query: str) -> str:
        pairs = query.split("&")
        if "" in pairs:
            pairs = [p for p in pairs if p]
        if self._drop_any is not None and self._drop_any("&" + query.lower()):
            drop, prefixes = self.drop_params, self.drop_prefixes
            kept = []
            for p in pairs:
                name = p.partition("=")[0].lower()
                if name in drop or (prefixes and name.startswith(prefixes)):
                    continue
                kept.append(p)
            pairs = kept
        if self.normalize_percent and not _CLEAN_QUERY(query):
            pairs = [self._pct(url, p, _QUERY_SAFE) for p in pairs]
        if self.sort_query and len(pairs) > 1:
            pairs = _sort_pairs(pairs)
        return "&".join(pairs)


def _sort_pairs(pairs: list[str]) -> list[str]:
    """Sort ``name=value`` pairs by name, stably: repeated names keep their order
    (``a=2&a=1`` stays). Two pairs, the usual case, without a key function."""
    if len(pairs) == 2:
        a, b = pairs
        return [b, a] if b.partition("=")[0] < a.partition("=")[0] else pairs
    names = [p.partition("=")[0] for p in pairs]
    order = sorted(range(len(pairs)), key=names.__getitem__)
    return [pairs[i] for i in order]


KeyFunction = Callable[[str], str]
"""Any callable turning a URL into its canonical key (VSCrawler's key resolver)."""
