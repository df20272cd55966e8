"""URL canonicalization: one spelling per resource, so duplicates are seen as such.

A URL is first parsed and serialized by the WHATWG URL Standard, through ada (the
``can_ada`` binding, chosen by measurement: ~700k parses/s against ~180k/s for the
``ada-url`` binding). That step gives what a browser, and crawlq's fetcher, would
request: scheme and host lowercased, UTS #46 IDNA (nontransitional: ``faß.de`` stays
its own domain), IPv4 numeric forms and IPv6 compression, the default port dropped,
dot segments resolved, tabs and newlines removed, backslashes read as slashes and
characters outside the percent-encode sets escaped. It is not optional: it decides
what the URL is.

crawlq's own steps sit on top, each switchable: drop the ``#fragment``; normalize
percent-escapes (an escaped unreserved character is that character, other escapes in
upper case, a lone ``%`` becomes ``%25``); drop empty query pairs and sort the others
stably by name; drop tracking parameters, and session parameters whose value looks
like a session id; drop ``;jsessionid=`` path parameters. Every step maps its own
output to itself, so ``canon(canon(u)) == canon(u)``.

Written here rather than taken from w3lib (Scrapy's canonicalizer): w3lib parses with
urllib, not by the WHATWG rules the fetcher follows, and drops no parameters.
Invalid input raises :class:`~crawlq.errors.InvalidURL` with a reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

from can_ada import parse as _parse

from ..errors import InvalidURL

CANONICAL_FORM = 2
"""The version of crawlq's canonical form: raised whenever some URL's canonical
spelling changes (1 was crawlq's hand-written RFC 3986 parser; 2 is WHATWG's)."""

DEFAULT_DROP_PARAMS: frozenset[str] = frozenset(
    {"gclid", "fbclid", "dclid", "msclkid", "yclid", "mc_eid", "_hsenc"})
"""Tracking parameters dropped by default, whatever their value (compared lowercased)."""
DEFAULT_DROP_PREFIXES: tuple[str, ...] = ("utm_",)
"""Tracking parameter name prefixes dropped by default."""
DEFAULT_SESSION_PARAMS: frozenset[str] = frozenset(
    {"jsessionid", "phpsessid", "aspsessionid", "sessionid", "sid", "cfid", "cftoken"})
"""Session parameters: dropped only when their value looks like a session id (see
:func:`looks_like_session_id`), so ``?sid=05/03/04/1234``, an article id, is kept."""
OPTIONAL_DROP_PARAMS: frozenset[str] = frozenset({"callback", "_"})
"""Parameters often worth dropping (jsonp callbacks, cache busters); opt in."""

DEFAULT_MAX_LENGTH = 8192

# One pass over the escapes (and lone "%"): what a replacement produces is not scanned
# again, so "%%36%31" gives "%2561", which stays "%2561" (idempotence).
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})?")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SESSION_IN_PATH = re.compile(r";(?:jsessionid|phpsessid)=[^/;]*", re.IGNORECASE)
_SESSION_VALUE = re.compile(r"(?=[^&]*[0-9])(?=[^&]*[A-Za-z])[A-Za-z0-9_.\-]{16,}\Z")
_SCHEME = re.compile(r"[\x00-\x20]*([A-Za-z][A-Za-z0-9+.\-]*):")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]").search


def looks_like_session_id(value: str) -> bool:
    """True for a value of 16 or more letters, digits, ``_``, ``-`` or ``.`` mixing
    letters and digits: how servers spell generated session tokens, and not how they
    spell ids, dates or paths."""
    return _SESSION_VALUE.match(value) is not None


def _fix_escape(m: re.Match[str]) -> str:
    hex2 = m.group(1)
    if hex2 is None:
        return "%25"
    code = int(hex2, 16)
    # An escaped unreserved character means the character itself (RFC 3986 6.2.2.2).
    return chr(code) if code in _UNRESERVED else "%" + hex2.upper()


def normalize_escapes(s: str) -> str:
    """Decode escaped unreserved characters, upper-case the other escapes and escape a
    lone ``%`` (one pass; the result maps to itself)."""
    return _ESCAPE.sub(_fix_escape, s) if "%" in s else s


class Canonicalizer:
    """Callable ``url -> canonical url``; raises :class:`InvalidURL` with a reason.

    Each keyword switches one step on top of WHATWG parsing. ``drop_params`` are
    dropped whatever their value, ``drop_prefixes`` drop every name starting with one,
    ``session_params`` are dropped when :func:`looks_like_session_id` (all compared
    lowercased). ``schemes`` are the accepted schemes; ``max_length`` the longest URL
    accepted.
    """

    def __init__(
        self,
        *,
        drop_fragment: bool = True,
        normalize_percent: bool = True,
        sort_query: bool = True,
        drop_params: Iterable[str] = DEFAULT_DROP_PARAMS,
        drop_prefixes: Iterable[str] = DEFAULT_DROP_PREFIXES,
        session_params: Iterable[str] = DEFAULT_SESSION_PARAMS,
        drop_session_in_path: bool = True,
        schemes: Iterable[str] = ("http", "https"),
        max_length: int = DEFAULT_MAX_LENGTH,
    ) -> None:
        self.drop_fragment = drop_fragment
        self.normalize_percent = normalize_percent
        self.sort_query = sort_query
        self.drop_params = frozenset(p.lower() for p in drop_params)
        self.drop_prefixes = tuple(p.lower() for p in drop_prefixes)
        self.session_params = frozenset(p.lower() for p in session_params)
        self.drop_session_in_path = drop_session_in_path
        self.schemes = frozenset(s.lower() for s in schemes)
        self.max_length = max_length
        self._prefixes = tuple(s + ":" for s in sorted(self.schemes))
        steps = (drop_fragment, normalize_percent, sort_query, sorted(self.drop_params),
                 self.drop_prefixes, sorted(self.session_params), drop_session_in_path)
        digest = hashlib.blake2b(repr(steps).encode(), digest_size=4).hexdigest()
        self.version = f"{CANONICAL_FORM}:{digest}"
        """The canonical form and its steps: two canonicalizers with the same version
        give every URL the same canonical spelling (a crawl records it; see
        :meth:`crawlq.Frontier.open`)."""
        names = sorted(re.escape(p) for p in self.drop_params | self.session_params)
        names += [re.escape(p) + r"[^=&]*" for p in self.drop_prefixes]
        # One search of "&" + lowercased query tells whether any parameter may go;
        # most queries have none (a leading literal makes the regex scan fast).
        self._drop_any = re.compile("&(?:" + "|".join(names) + r")(?:[=&]|\Z)").search \
            if names else None

    def __call__(self, url: str) -> str:
        """Return the canonical form of ``url``."""
        return self.split(url)[0]

    def split(self, url: str) -> tuple[str, str]:
        """Return ``(canonical url, host key)``; the host key is the host and any
        non-default port (no user info), the default queue key, computed here because
        the parser has it at hand."""
        if not url:
            raise InvalidURL("empty", url)
        if len(url) > self.max_length:
            raise InvalidURL("too-long", url, f"{len(url)} > {self.max_length} characters")
        try:
            parsed = _parse(url)
        except ValueError:
            raise self._why(url) from None
        except TypeError:  # a lone surrogate (no UTF-8 for it): U+FFFD, as browsers do
            # (surrogate pairs written as two code points become one character)
            return self.split(url.encode("utf-16-le", "surrogatepass")
                              .decode("utf-16-le", "replace"))
        href = parsed.href
        if not href.startswith(self._prefixes):
            raise self._bad_scheme(url, href[:href.find(":")])
        host = parsed.host
        if not host:
            raise InvalidURL("no-host", url)
        if "?" not in href and "#" not in href and "%" not in href and ";" not in href:
            return href, host  # the usual case: nothing of crawlq's steps to do
        # In a serialized URL the first "#" starts the fragment and the first "?" before
        # it the query: no other part holds them unescaped.
        cut = href.find("#")
        if cut >= 0:
            fragment = href[cut:]
            href = href[:cut]
        else:
            fragment = ""
        cut = href.find("?")
        if cut >= 0:
            query = href[cut + 1:]
            href = href[:cut]
            if query:
                query = self._query(query)
        else:
            query = ""
        if ";" in href or "%" in href:
            # the path: after "scheme://" and the authority (user info escapes "/")
            start = href.find("/", href.find(":") + 3)
            if start >= 0:
                path = href[start:]
                if self.drop_session_in_path and ";" in path:
                    path = _SESSION_IN_PATH.sub("", path) or "/"
                if self.normalize_percent:
                    path = normalize_escapes(path)
                href = href[:start] + path
                if "/." in path:  # a decoded "%2e" may make a dot segment: resolve it
                    href = _parse(href).href
        if query:
            href = f"{href}?{query}"
        if fragment and not self.drop_fragment:
            href += fragment
        return href, host

    def _query(self, query: str) -> str:
        dropping = self._drop_any is not None and \
            self._drop_any("&" + query.lower()) is not None
        if not dropping and "&" not in query and "%" not in query:
            return query  # one pair, nothing to drop or normalize
        pairs = query.split("&")
        if "" in pairs:
            pairs = [p for p in pairs if p]
        if dropping:
            drop, prefixes, session = self.drop_params, self.drop_prefixes, self.session_params
            kept = []
            for p in pairs:
                name, _, value = p.partition("=")
                name = name.lower()
                if name in drop or (prefixes and name.startswith(prefixes)) or (
                        name in session and looks_like_session_id(value)):
                    continue
                kept.append(p)
            pairs = kept
        if self.normalize_percent and "%" in query:
            pairs = [normalize_escapes(p) for p in pairs]
        if self.sort_query and len(pairs) > 1:
            pairs = _sort_pairs(pairs)
        return "&".join(pairs)

    def _bad_scheme(self, url: str, scheme: str) -> InvalidURL:
        return InvalidURL("bad-scheme", url, f"scheme {scheme!r} not in "
                          f"{sorted(self.schemes)}")

    def _why(self, url: str) -> InvalidURL:
        """The reason a URL the WHATWG parser refuses is invalid, from its shape."""
        m = _SCHEME.match(url)
        if m is None:
            return InvalidURL("not-absolute", url, "an absolute http(s) URL is needed")
        scheme = m.group(1).lower()
        if scheme not in self.schemes:
            return self._bad_scheme(url, scheme)
        rest = url[m.end():].replace("\t", "").replace("\n", "").replace("\r", "")
        authority = re.split(r"[/\\?#]", rest.lstrip("/\\"), maxsplit=1)[0]
        hostport = authority.rpartition("@")[2]
        if hostport.startswith("["):
            end = hostport.find("]")
            if end < 0:
                return InvalidURL("bad-host", url, "unclosed IPv6 bracket")
            host, port = hostport[:end + 1], hostport[end + 1:].lstrip(":")
        else:
            host, _, port = hostport.partition(":")
        if not host.strip():
            return InvalidURL("no-host", url)
        if port and (not port.isdigit() or int(port) > 65535):
            return InvalidURL("bad-port", url, f"port {port!r}")
        if _CONTROL(host):
            return InvalidURL("control-chars", url, "control characters in the host")
        return InvalidURL("bad-host", url, f"invalid host {host!r}")


def _sort_pairs(pairs: list[str]) -> list[str]:
    """Sort ``name=value`` pairs by name, stably: repeated names keep their order
    (``a=2&a=1`` stays). Returns ``pairs`` itself when they are in order already (the
    usual case); otherwise gathers them by name in one pass and sorts the distinct
    names (a long query often repeats a few: ``n=1&n=2&...``)."""
    if len(pairs) == 2:
        a, b = pairs
        return [b, a] if _name(b) < _name(a) else pairs
    names = [_name(p) for p in pairs]
    prev = names[0]
    for name in names:
        if name < prev:
            break
        prev = name
    else:
        return pairs
    groups: dict[str, list[str]] = {}
    for name, pair in zip(names, pairs):
        group = groups.get(name)
        if group is None:
            groups[name] = [pair]
        else:
            group.append(pair)
    out: list[str] = []
    for name in sorted(groups):
        out.extend(groups[name])
    return out


def _name(pair: str) -> str:
    """The name of a ``name=value`` pair (all of it when it has no ``=``)."""
    cut = pair.find("=")
    return pair if cut < 0 else pair[:cut]


KeyFunction = Callable[[str], str]
"""Any callable turning a URL into its canonical key (VSCrawler's key resolver)."""
