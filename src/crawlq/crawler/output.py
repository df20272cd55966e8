"""Crawl output: JSON Lines (one record per fetched page) or WARC (request and response
records with the bytes as received, via warcio), chosen by file name or format."""

from __future__ import annotations

import hashlib
import json
from io import BytesIO
from typing import IO, Protocol
from urllib.parse import urlsplit

from .. import __version__
from ..models import Request
from .fetch import Fetched

FORMATS = ("jsonl", "warc")


class Output(Protocol):
    """Where fetched pages go."""

    def write(self, req: Request, r: Fetched, title: str | None, outlinks: int) -> None: ...
    def close(self) -> None: ...


class JsonlOutput:
    """Appends one JSON object per fetched response."""

    def __init__(self, path: str) -> None:
        self.f: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, req: Request, r: Fetched, title: str | None, outlinks: int) -> None:
        rec = {"url": req.url, "final_url": r.url, "status": r.status,
               "headers": r.headers, "fetched_at": r.fetched_at, "depth": req.depth,
               "referrer": req.referrer, "content_type": r.content_type,
               "length": len(r.body), "truncated": r.truncated,
               "sha1": hashlib.sha1(r.body).hexdigest(), "title": title,
               "outlinks": outlinks, "elapsed": round(r.elapsed, 4)}
        if r.decode_error:
            rec["decode_error"] = r.decode_error
        self.f.write(json.dumps(rec, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self.f.close()


class WarcOutput:
    """Writes a warcinfo record, then a request and a response record per fetch."""

    def __init__(self, path: str) -> None:
        from warcio.warcwriter import WARCWriter

        self.f = open(path, "ab")  # noqa: SIM115
        self.writer = WARCWriter(self.f, gzip=path.endswith(".gz"))
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
        response = self.writer.create_warc_record(
            req.url, "response", payload=BytesIO(r.raw), length=len(r.raw),
            http_headers=resp_headers, warc_headers_dict=warc_headers)
        request = self.writer.create_warc_record(
            req.url, "request", payload=BytesIO(b""), length=0, http_headers=req_headers,
            warc_headers_dict={"WARC-Concurrent-To":
                               response.rec_headers.get_header("WARC-Record-ID")})
        self.writer.write_record(request)
        self.writer.write_record(response)

    def close(self) -> None:
        self.f.close()


def open_output(path: str, fmt: str | None = None) -> Output:
    """The writer for ``path``: ``fmt`` if given, else by extension (.warc, .warc.gz)."""
    if fmt is None:
        fmt = "warc" if path.endswith((".warc", ".warc.gz")) else "jsonl"
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; known: {FORMATS}")
    return WarcOutput(path) if fmt == "warc" else JsonlOutput(path)
