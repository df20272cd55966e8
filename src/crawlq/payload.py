"""A request's payload: the bytes every store keeps of a request besides its priority
and retries. The one definition of the format, compiled by mypyc (setup.py), since it
runs once per URL added and once per URL leased; :meth:`Request.to_payload
<crawlq.models.Request.to_payload>` and :meth:`~crawlq.models.Request.from_payload`
call it.

A payload is a msgpack array: ``[version, url, depth, referrer, method, body, meta,
dont_filter, revisit_after]`` with trailing defaults left out. Version 1 holds the URL
whole; versions 2 and 3 leave out ``https://`` or ``http://`` + the queue key when the
URL starts so and the key is followed by ``/`` or ``:`` (the default host queues: the
queue already says it, and it is most of a queued URL's bytes), and the referrer loses
the same prefix when it shares it (a referrer that would then read as relative is kept
whole behind a ``!``).

The forms of a plain GET (``[version, url]``, ``[.., depth]``, ``[.., depth,
referrer]``: nearly every queued request) are written and read here byte by byte;
msgpack (the library) packs and unpacks every other form, with a Packer per thread:
msgpack's ``packb`` builds one per call, which costs more than the whole encoding of a
plain request, and a Packer is not thread-safe (it resets itself after a failed pack).
"""

from __future__ import annotations

import threading
from typing import Any, Final

import msgpack

from .errors import ConfigError

V_ABSOLUTE: Final = 1
V_HTTPS: Final = 2
V_HTTP: Final = 3

# For each payload position, the values that may be trimmed when trailing.
_TRAILING_DEFAULTS: Final[tuple[tuple[Any, ...], ...]] = (
    (), (), (0,), (None,), ("GET",), (b"",), (None,), (False,), (None,),
)
_FIXINT: Final = tuple(bytes((n,)) for n in range(128))
_STR_HEAD: Final = tuple(bytes((0xA0 | n,)) if n < 32 else bytes((0xD9, n)) for n in range(256))
"""msgpack's header of a str of n < 256 bytes."""
_PLAIN: Final = tuple(bytes((0x90 | size, version)) if version else b""
                      for size in range(5) for version in range(4))
"""The array header and version of a plain GET's payload: _PLAIN[size * 4 + version]."""


_local: Final = threading.local()


def _packer() -> Any:
    """This thread's msgpack Packer."""
    try:
        return _local.packer
    except AttributeError:
        packer = _local.packer = msgpack.Packer(use_bin_type=True)
        return packer


class PayloadError(ValueError):
    """A request that msgpack cannot encode (e.g. a meta value of an unknown type)."""


def _str_head(n: int) -> bytes:
    """msgpack's header of a str of n bytes."""
    if n < 0x100:
        return _STR_HEAD[n]
    if n < 0x10000:
        return b"\xda" + n.to_bytes(2, "big")
    return b"\xdb" + n.to_bytes(4, "big")


def _str(s: str) -> bytes:
    """msgpack's form of a str."""
    b = s.encode("utf-8")
    return _str_head(len(b)) + b


def _uint(v: int) -> bytes:
    """msgpack's form of an int in [0, 2**32)."""
    if v < 0x80:
        return _FIXINT[v]
    if v < 0x100:
        return b"\xcc" + v.to_bytes(1, "big")
    if v < 0x10000:
        return b"\xcd" + v.to_bytes(2, "big")
    return b"\xce" + v.to_bytes(4, "big")


def encode(url: str, key: str | None, depth: int, ref: str | None, method: str,
           body: bytes, meta: dict[str, Any] | None, dont_filter: bool,
           revisit_after: object) -> bytes:
    """The payload of a request with these fields (``key``: its queue key, or None to
    keep the URL whole; ``revisit_after``: None or seconds, an int or a float, kept as
    it is). Raises :class:`PayloadError` for what msgpack cannot encode."""
    version = V_ABSOLUTE
    if key is not None:
        # (the scheme first: str.startswith with a start is a generic call to mypyc)
        start = 8 if url.startswith("https://") else 7 if url.startswith("http://") else 0
        base = start + len(key)  # where the URL's part after the queue's prefix starts
        if start and url[start:base] == key and (url[base:base + 1] == "/"
                                                 or url[base:base + 1] == ":"):
            version = V_HTTPS if start == 8 else V_HTTP
            if ref is not None:
                if ref[:base] == url[:base] and (ref[base:base + 1] == "/"
                                                 or ref[base:base + 1] == ":"):
                    ref = ref[base:]
                elif ref[:1] == "/" or ref[:1] == ":" or ref[:1] == "!":
                    ref = "!" + ref  # would read as relative: marked, kept whole
            url = url[base:]
    try:
        if (method == "GET" and not body and meta is None and not dont_filter
                and revisit_after is None and 0 <= depth < 0x100000000):
            b = url.encode("utf-8")
            if ref is None:
                if not depth:
                    return _PLAIN[8 + version] + _str_head(len(b)) + b
                return _PLAIN[12 + version] + _str_head(len(b)) + b + _uint(depth)
            return _PLAIN[16 + version] + _str_head(len(b)) + b + _uint(depth) + _str(ref)
        parts: list[Any] = [version, url, depth, ref, method, body, meta, dont_filter,
                            revisit_after]
        # Trailing defaults cost bytes in every queued row; drop them.
        while parts[-1] in _TRAILING_DEFAULTS[len(parts) - 1]:
            parts.pop()
        packed: bytes = _packer().pack(parts)
        return packed
    except (TypeError, ValueError, OverflowError) as exc:  # (UnicodeError is a ValueError)
        raise PayloadError(f"request is not serializable: {exc}") from exc


def _read_n(p: bytes, i: int, size: int) -> int:
    """The big-endian unsigned int of ``size`` bytes at ``p[i]`` (-1: past the end).
    (Indexing, not int.from_bytes: that is a generic call to mypyc.)"""
    if i + size > len(p):
        return -1
    v = 0
    for j in range(i, i + size):
        v = (v << 8) | p[j]
    return v


def _read_str(p: bytes, i: int) -> tuple[str, int] | None:
    """The msgpack str at ``p[i]`` and the position after it, or None: not a str."""
    if i >= len(p):
        return None
    b = p[i]
    if 0xA0 <= b <= 0xBF:
        n, i = b & 0x1F, i + 1
    elif b == 0xD9:
        n, i = _read_n(p, i + 1, 1), i + 2
    elif b == 0xDA:
        n, i = _read_n(p, i + 1, 2), i + 3
    elif b == 0xDB:
        n, i = _read_n(p, i + 1, 4), i + 5
    else:
        return None
    if n < 0 or i + n > len(p):
        return None
    return p[i:i + n].decode("utf-8"), i + n


def _read_uint(p: bytes, i: int) -> tuple[int, int] | None:
    """The msgpack unsigned int at ``p[i]`` and the position after it, or None."""
    if i >= len(p):
        return None
    b = p[i]
    if b < 0x80:
        return b, i + 1
    if b == 0xCC:
        n = 1
    elif b == 0xCD:
        n = 2
    elif b == 0xCE:
        n = 4
    else:
        return None
    v = _read_n(p, i + 1, n)
    return None if v < 0 else (v, i + 1 + n)


def _plain(p: bytes) -> tuple[int, str, int, str | None] | None:
    """(version, url, depth, referrer) of a plain GET's payload, or None: another form."""
    if len(p) < 3:
        return None
    size = p[0] - 0x90
    version = p[1]
    if not 2 <= size <= 4 or not V_ABSOLUTE <= version <= V_HTTP:
        return None
    got = _read_str(p, 2)
    if got is None:
        return None
    url, i = got
    depth = 0
    ref: str | None = None
    if size >= 3:
        num = _read_uint(p, i)
        if num is None:
            return None
        depth, i = num
        if size == 4:
            got = _read_str(p, i)
            if got is None:
                return None
            ref, i = got
    if i != len(p):
        return None
    return version, url, depth, ref


def decode(payload: bytes, key: str | None) -> tuple[
        str, str, bytes, int, str | None, dict[str, Any] | None, bool, Any]:
    """The fields of a payload made with this ``key``: (url, method, body, depth,
    referrer, meta or None, dont_filter, revisit_after). Raises ValueError for bytes
    that are not a payload, ConfigError (a ValueError) for one relative to a key when
    ``key`` is None."""
    plain = _plain(payload)
    method = "GET"
    body = b""
    meta: dict[str, Any] | None = None
    dont_filter = False
    revisit: Any = None
    version: int
    url: str
    depth: int
    ref: str | None
    if plain is not None:
        version, url, depth, ref = plain
    else:
        try:
            p = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            if not isinstance(p, list) or not 2 <= len(p) <= 9:
                raise ValueError("not an array of 2 to 9 fields")
            n = len(p)
            version, url = p[0], p[1]
            depth = p[2] if n > 2 else 0
            ref = p[3] if n > 3 else None
            if n > 4:
                method = p[4]
            if n > 5:
                body = p[5]
            if n > 6:
                meta = p[6] or None
            if n > 7:
                dont_filter = p[7]
            if n > 8:
                revisit = p[8]
            if (not isinstance(version, int) or not V_ABSOLUTE <= version <= V_HTTP
                    or not isinstance(url, str) or not isinstance(depth, int)
                    or not (ref is None or isinstance(ref, str))
                    or not isinstance(method, str) or not isinstance(body, bytes)
                    or not (meta is None or isinstance(meta, dict))
                    or not isinstance(dont_filter, bool)
                    or not (revisit is None or isinstance(revisit, (int, float)))):
                raise ValueError("a field of the wrong type")
        except (TypeError, ValueError) as exc:  # (a field of the wrong type: TypeError)
            raise ValueError(f"not a request's payload ({exc}): {payload[:100]!r}") from None
    if version != V_ABSOLUTE:  # relative to its queue's key (see encode)
        if key is None:
            raise ConfigError("this payload is relative to its queue: pass its key")
        base = ("https://" if version == V_HTTPS else "http://") + key
        url = base + url
        if ref is not None:
            if ref[:1] == "!":
                ref = ref[1:]
            elif ref[:1] == "/" or ref[:1] == ":":
                ref = base + ref
    return url, method, body, depth, ref, meta, dont_filter, revisit
