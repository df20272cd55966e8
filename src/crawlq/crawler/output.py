"""Crawl output: JSON Lines (one record per fetched page) or WARC (request and response
records with the bytes as received, via warcio), plain or gzip, to a file or stdout.

Durability: the crawler acknowledges a page's lease only after :meth:`Output.flush` and
:meth:`Output.sync` have made its record durable (see :mod:`.commit`). A crawl killed
mid-write leaves a torn record at the end of the file; opening the file again cuts it off
(:func:`torn_tail`), and its page, never acknowledged, is fetched and written again.
A gzip output is a series of complete gzip members (one per WARC record, one per group
of JSON lines): ``zcat`` and every gzip reader read them as one stream.
"""

from __future__ import annotations

import base64
import errno
import gzip
import hashlib
import json
import logging
import os
import sys
import zlib
from io import BytesIO
from typing import IO, Any, BinaryIO, Protocol
from urllib.parse import urlsplit

from .. import __version__
from ..errors import CrawlqError
from ..models import Request
from .fetch import Fetched
from .links import decode_html

log = logging.getLogger("crawlq.crawl")

FORMATS = ("jsonl", "warc")
SUFFIXES = {".jsonl": ("jsonl", False), ".ndjson": ("jsonl", False),
            ".jsonl.gz": ("jsonl", True), ".ndjson.gz": ("jsonl", True),
            ".warc": ("warc", False), ".warc.gz": ("warc", True)}
"""File name endings and the (format, gzip) they mean; any other needs ``--format``."""
SAVE = ("text", "body")
"""What a JSON Lines record may carry besides the metadata."""

GZIP_LEVEL = 6
"""The gzip level of gzipped outputs: gzip's default, which wget and Heritrix use too
(level 9 costs half again the CPU for 0.4% less on HTML)."""


class OutputError(CrawlqError):
    """The output cannot be opened or written (a bad name, a foreign file, a full disk)."""


class Output(Protocol):
    """Where fetched pages go."""

    archives_robots: bool
    """Whether robots.txt responses go in too (WARC) or pages only (JSON Lines)."""
    accept_encoding: str | None
    """The content codings the crawler may ask servers for (``Accept-Encoding``) when
    writing here; None: every coding the crawler decodes."""
    keeps_wire: bool
    """Whether records hold responses as they came off the wire (``Fetched.http_raw``:
    WARC), which the fetch then keeps."""

    @property
    def path(self) -> str:
        """The file written now."""

    def write(self, req: Request, r: Fetched, title: str | None, outlinks: int) -> None:
        """Add a page's record (buffered: durable after :meth:`flush` and :meth:`sync`)."""

    def flush(self) -> None:
        """Hand every record written so far to the operating system (in the event loop:
        cheap, and ordered with :meth:`write`)."""

    def sync(self) -> None:
        """Make what :meth:`flush` handed over durable (fsync; may run in a thread)."""

    def full(self) -> bool:
        """Whether the file written now is full: :meth:`rotate_if_full` would start the
        next (never, without size rotation)."""

    def rotate_if_full(self) -> None:
        """After a commit: start the next file if this one is full (size rotation)."""

    def close(self) -> None: ...


def output_kind(path: str, fmt: str | None = None, save: tuple[str, ...] = (),
                rotate: int = 0) -> tuple[str, bool]:
    """``(format, gzip)`` for an output path: ``fmt`` if given (gzip when the name ends in
    .gz), else by the name's ending. Raises :class:`OutputError` for an unknown one, or
    options that do not apply to it (``save`` to WARC, ``rotate`` to standard output)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise OutputError(f"unknown output format {fmt!r}; known: {', '.join(FORMATS)}")
        kind = (fmt, path.endswith(".gz"))
    elif path == "-":
        kind = ("jsonl", False)
    else:
        name = path.lower()
        found = [k for suffix, k in SUFFIXES.items() if name.endswith(suffix)]
        if not found:
            raise OutputError(f"cannot tell the output format of {path!r} from its name: "
                              f"use one of {', '.join(SUFFIXES)} or --format "
                              f"{{{','.join(FORMATS)}}}")
        kind = found[0]
    unknown = set(save) - set(SAVE)
    if unknown:
        raise OutputError(f"cannot save {sorted(unknown)}; known: {', '.join(SAVE)}")
    if save and kind[0] == "warc":
        raise OutputError("--save is for JSON Lines output: a WARC record already has the "
                          "whole response")
    if rotate and path == "-":
        raise OutputError("standard output cannot be rotated")
    return kind


def open_output(path: str, fmt: str | None = None, save: tuple[str, ...] = (),
                rotate: int = 0) -> Output:
    """The writer for ``path`` (``-``: standard output), appending after any complete
    records already there (a torn last record is cut off first). ``save``: see
    :data:`SAVE` (JSON Lines only: a WARC record has the whole response). ``rotate``
    > 0: files of about that many bytes, see :class:`Rotating`."""
    kind, gz = output_kind(path, fmt, save, rotate)
    if rotate:
        return Rotating(path, fmt, save, rotate)
    return _open_one(path, kind, gz, save)


def _open_one(path: str, kind: str, gz: bool, save: tuple[str, ...]) -> Output:
    if path == "-":
        stream: BinaryIO = sys.stdout.buffer
    else:
        try:
            torn_tail(path, kind, gz)
            stream = open(path, "ab")  # noqa: SIM115
        except OSError as exc:
            raise OutputError(f"cannot open the output {path}: {exc}") from None
    if kind == "warc":
        return WarcOutput(path, stream, gz)
    return JsonlOutput(path, stream, gz, save)


class _File:
    def __init__(self, path: str, stream: BinaryIO) -> None:
        self.path = path
        self.f = stream
        self._regular = path != "-"

    def flush(self) -> None:
        self.f.flush()

    def sync(self) -> None:
        if not self._regular:
            return
        try:
            os.fsync(self.f.fileno())
        except OSError as exc:  # a pipe or a device (/dev/stdout): nothing to make durable
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
                raise

    def full(self) -> bool:
        return False

    def rotate_if_full(self) -> None:
        pass

    def close(self) -> None:
        self.flush()
        self.sync()
        if self._regular:
            self.f.close()


class Rotating:
    """Size-rotated output files, ``NAME-00000.EXT``, ``NAME-00001.EXT``... (the serial
    goes before the format's ending): the next file starts once the current one holds
    ``max_bytes`` or more, checked after each commit, so a record never spans two
    files. A resumed crawl appends to the highest-numbered file."""

    def __init__(self, path: str, fmt: str | None, save: tuple[str, ...],
                 max_bytes: int) -> None:
        self.base = path
        self.kind, self.gz = output_kind(path, fmt)
        self.save = save
        self.max_bytes = max_bytes
        stem, ending = _split_ending(path)
        self._stem, self._ending = stem, ending
        taken = []
        folder = os.path.dirname(path) or "."
        prefix = os.path.basename(stem) + "-"
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            serial = name[len(prefix):len(name) - len(ending)]
            if name.startswith(prefix) and name.endswith(ending) and len(serial) == 5 \
                    and serial.isdigit():
                taken.append(int(serial))
        self.serial = max(taken, default=0)
        self.current = _open_one(self.name(self.serial), self.kind, self.gz, save)
        self.archives_robots = self.current.archives_robots
        self.accept_encoding = self.current.accept_encoding
        self.keeps_wire = self.current.keeps_wire

    @property
    def path(self) -> str:
        return self.current.path

    def name(self, serial: int) -> str:
        """The file of a serial number."""
        return f"{self._stem}-{serial:05d}{self._ending}"

    def write(self, req: Request, r: Fetched, title: str | None, outlinks: int) -> None:
        self.current.write(req, r, title, outlinks)

    def flush(self) -> None:
        self.current.flush()

    def sync(self) -> None:
        self.current.sync()

    def full(self) -> bool:
        return os.path.getsize(self.current.path) >= self.max_bytes

    def rotate_if_full(self) -> None:
        if self.full():
            self.current.close()  # (flushed and fsynced: what it holds is durable)
            self.serial += 1
            self.current = _open_one(self.name(self.serial), self.kind, self.gz, self.save)

    def close(self) -> None:
        self.current.close()


def _split_ending(path: str) -> tuple[str, str]:
    """``("dir/pages", ".jsonl.gz")`` for ``dir/pages.jsonl.gz``: the known ending, else
    the last extension."""
    low = path.lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if low.endswith(suffix):
            return path[:-len(suffix)], path[-len(suffix):]
    root, ext = os.path.splitext(path)
    return root, ext


class JsonlOutput(_File):
    """One JSON object per fetched response; gzip: one gzip member per flush."""

    archives_robots = False
    accept_encoding: str | None = None
    keeps_wire = False

    def __init__(self, path: str, stream: BinaryIO, gz: bool = False,
                 save: tuple[str, ...] = ()) -> None:
        super().__init__(path, stream)
        self.gz = gz
        self.save = frozenset(save)
        self._lines: list[bytes] = []

    def write(self, req: Request, r: Fetched, title: str | None, outlinks: int) -> None:
        rec = {"url": req.url, "final_url": r.url, "status": r.status,
               "headers": r.headers, "fetched_at": r.fetched_at, "depth": req.depth,
               "referrer": req.referrer, "content_type": r.content_type,
               "length": len(r.body), "truncated": r.truncated,
               "sha1": hashlib.sha1(r.body).hexdigest(), "title": title,
               "outlinks": outlinks, "elapsed": round(r.elapsed, 4)}
        if r.decode_error:
            rec["decode_error"] = r.decode_error
        if "text" in self.save and r.content_type.startswith(("text/", "application/xhtml")):
            rec["text"] = decode_html(r.body, r.charset)
        if "body" in self.save:
            rec["body"] = base64.b64encode(r.body).decode("ascii")
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")
        if self.gz:
            self._lines.append(line)
        else:
            self.f.write(line)

    def flush(self) -> None:
        if self._lines:
            data, self._lines = b"".join(self._lines), []
            self.f.write(gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0))
        super().flush()


class WarcOutput(_File):
    """Writes a warcinfo record, then a request and a response record per fetch.

    Responses are archived as they came (content coding and chunked framing included),
    except Brotli. warcio, the library that reads and checks WARC files in Python
    (pywb replays through it), decodes ``Content-Encoding: br`` only with the old
    ``brotlipy`` module; with Google's ``brotli`` (which Scrapy and most environments
    install) reading such a record fails. So the crawler asks WARC-bound fetches for
    ``gzip, deflate`` only (:attr:`accept_encoding`, as Heritrix and wget do), and a
    server that sends br all the same gets its record written from the parsed
    response with the body decoded: ``Content-Encoding`` becomes
    ``X-Crawlq-Original-Content-Encoding``, ``Content-Length`` is the decoded length,
    and ``Transfer-Encoding`` is dropped (the block is no longer chunked). A body that
    does not decode is kept as received under the renamed header.
    """

    archives_robots = True
    accept_encoding: str | None = "gzip, deflate"
    keeps_wire = True

    def __init__(self, path: str, stream: BinaryIO, gz: bool = False) -> None:
        from warcio.warcwriter import WARCWriter

        super().__init__(path, stream)
        # (gzip: one member per record, as warcio's own gzip writes them, but at
        # GZIP_LEVEL rather than warcio's 9)
        self.writer = WARCWriter(_GzipMembers(stream) if gz else stream, gzip=False)
        info = self.writer.create_warcinfo_record(
            path.rsplit("/", 1)[-1], {"software": f"crawlq/{__version__}",
                                      "format": "WARC File Format 1.1"})
        self.writer.write_record(info)

    def write(self, req: Request, r: Fetched, title: str | None, outlinks: int) -> None:
        from warcio.statusandheaders import StatusAndHeaders

        parts = urlsplit(req.url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        req_headers = StatusAndHeaders(f"GET {path} HTTP/1.1", r.request_headers,
                                       is_http_request=True)
        resp_headers = StatusAndHeaders(f"{r.status} {r.reason}".strip(), r.header_list,
                                        protocol="HTTP/1.1")
        warc_headers = {"WARC-IP-Address": r.ip} if r.ip else {}
        if r.truncated:
            warc_headers["WARC-Truncated"] = "length"
        if _brotli(r.header_list):  # (see the class docstring)
            body = r.raw if r.decode_error else r.body
            resp_headers = StatusAndHeaders(f"{r.status} {r.reason}".strip(),
                                            _decoded_headers(r, len(body)),
                                            protocol="HTTP/1.1")
            response = self.writer.create_warc_record(
                req.url, "response", payload=BytesIO(body), length=len(body),
                http_headers=resp_headers, warc_headers_dict=warc_headers)
        elif r.http_raw:  # the bytes as received: warcio reads the status and headers
            response = self.writer.create_warc_record(   # from them (and writes them back)
                req.url, "response", payload=BytesIO(r.http_raw), length=len(r.http_raw),
                warc_headers_dict=warc_headers)
        else:
            response = self.writer.create_warc_record(
                req.url, "response", payload=BytesIO(r.raw), length=len(r.raw),
                http_headers=resp_headers, warc_headers_dict=warc_headers)
        request = self.writer.create_warc_record(
            req.url, "request", payload=BytesIO(b""), length=0, http_headers=req_headers,
            warc_headers_dict={"WARC-Concurrent-To":
                               response.rec_headers.get_header("WARC-Record-ID")})
        self.writer.write_record(request)
        self.writer.write_record(response)


class _GzipMembers:
    """A stream that gzips what is written to it, one gzip member from each
    :meth:`flush` to the next (warcio flushes after each record). Its flush does not
    flush the file: the output's own :meth:`_File.flush` does, at each commit."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self._z = _member()

    def write(self, data: bytes) -> None:
        try:
            self.out.write(self._z.compress(data))
        except BaseException:  # (e.g. a full disk: the record's rest must not open the
            self._z = _member()  # next record's member)
            raise

    def flush(self) -> None:
        z, self._z = self._z, _member()
        self.out.write(z.flush())


def _member() -> Any:
    return zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS + 16)


def _brotli(headers: list[tuple[str, str]]) -> bool:
    """Whether a response's content codings include br."""
    return any(k.lower() == "content-encoding" and "br" in
               (c.strip().lower() for c in v.split(",")) for k, v in headers)


def _decoded_headers(r: Fetched, length: int) -> list[tuple[str, str]]:
    """The response's headers for a record whose body (``length`` bytes) was decoded
    (see :class:`WarcOutput`)."""
    out: list[tuple[str, str]] = []
    for k, v in r.header_list:
        low = k.lower()
        if low == "content-encoding":
            out.append(("X-Crawlq-Original-Content-Encoding", v))
        elif low not in ("content-length", "transfer-encoding"):
            out.append((k, v))
    out.append(("Content-Length", str(length)))
    return out


# -- torn tails -------------------------------------------------------------------------

def torn_tail(path: str, kind: str, gz: bool) -> int:
    """Cut a torn record off the end of an existing output; returns the bytes cut.

    Raises :class:`OutputError` when the file does not begin with a complete record of
    its format: it is not a crawl output, and nothing is appended to (or cut off) it.
    """
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb") as f:
        good = _gzip_end(f) if gz else _warc_end(f) if kind == "warc" else _line_end(f, size)
    if good == 0:
        what = "gzip" if gz else "WARC" if kind == "warc" else "JSON Lines"
        raise OutputError(f"{path} exists and does not begin with a complete {what} "
                          "record: not appending to it (choose another --out)")
    if good < size:
        os.truncate(path, good)
        log.warning("cut %d bytes of a torn record off the end of %s (a crawl stopped "
                    "mid-write; its page was not acknowledged and is fetched again)",
                    size - good, path)
    return size - good


def _line_end(f: IO[bytes], size: int) -> int:
    """Just past the last newline."""
    pos = size
    while pos > 0:
        start = max(pos - 65536, 0)
        f.seek(start)
        i = f.read(pos - start).rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def _gzip_end(f: IO[bytes]) -> int:
    """Just past the last complete gzip member (a member's end is known only by
    inflating it: gzip has no index)."""
    good = pos = 0
    d = zlib.decompressobj(31)
    while chunk := f.read(1 << 20):
        while chunk:
            try:
                d.decompress(chunk, 1 << 16)
                while d.unconsumed_tail and not d.eof:  # inflate in bounded steps
                    d.decompress(d.unconsumed_tail, 1 << 16)
            except zlib.error:
                return good
            if not d.eof:
                pos += len(chunk)
                break
            pos += len(chunk) - len(d.unused_data)
            good, chunk = pos, d.unused_data
            d = zlib.decompressobj(31)
    return good


def _warc_end(f: IO[bytes]) -> int:
    """Just past the last complete uncompressed WARC record: its header block, then
    Content-Length bytes, then CRLF CRLF."""
    good = 0
    f.seek(0, os.SEEK_END)
    size = f.tell()
    while good < size:
        f.seek(good)
        if not f.readline(64).startswith(b"WARC/"):
            return good
        length = None
        while (line := f.readline(65536)) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    return good
        if line == b"" or length is None:
            return good
        end = f.tell() + length + 4
        if end > size:
            return good
        f.seek(end - 4)
        if f.read(4) != b"\r\n\r\n":
            return good
        good = end
    return good
