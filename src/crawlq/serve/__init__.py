"""``crawlq serve``: the frontier as a service (needs ``crawlq[serve]``).

Today: a JSON API over HTTP and Prometheus metrics (see :mod:`crawlq.serve.app` and
docs/serve.md). The server listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

DEFAULT_PORT = 7072
"""The JSON API's port (URLFrontier's gRPC port is 7071)."""


def register(sub: Any) -> None:
    """Add the ``serve`` subcommand to the CLI's subparsers."""
    from ..cli import count

    p = sub.add_parser(
        "serve", help="serve the frontier over HTTP (JSON API, Prometheus metrics)",
        description="Serve the store named by --store to other processes: a JSON API "
                    "(add, next, ack, stats, queues, dead, requeue-dead under /v1/) and "
                    "Prometheus metrics at /metrics. See docs/serve.md.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=count(0), default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--tls-cert", metavar="PEM", default=None,
                   help="serve HTTPS with this certificate chain (PEM; with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", default=None,
                   help="the private key of --tls-cert (PEM; may be the same file)")
    p.add_argument("--token", default=None,
                   help="require 'Authorization: Bearer TOKEN' on every call (default: "
                        "$CRAWLQ_SERVE_TOKEN, else none)")


def command(args: argparse.Namespace, store: str, options: dict[str, Any]) -> int:
    """Run the server until SIGINT or SIGTERM; returns the exit status."""
    try:
        from aiohttp import web

        from .app import make_app
    except ImportError as exc:
        print(f"crawlq: error: serve needs the serve extra: pip install 'crawlq[serve]' "
              f"({exc})", file=sys.stderr)
        return 2
    from ..frontier import Frontier

    token = args.token or os.environ.get("CRAWLQ_SERVE_TOKEN") or None
    tls = None
    if args.tls_cert or args.tls_key:
        import ssl

        if not args.tls_cert:
            print("crawlq: error: --tls-key needs --tls-cert", file=sys.stderr)
            return 2
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            print(f"crawlq: error: cannot use the TLS certificate {args.tls_cert}: {exc}",
                  file=sys.stderr)
            return 2
    scheme = "https" if tls is not None else "http"
    with Frontier.open(store, **options) as frontier:
        app = make_app(frontier, token)

        def ready(runner: Any) -> None:  # (the port chosen, for --port 0 and scripts)
            for address in runner.addresses:
                host, port = address[:2]
                print(f"crawlq serve: {store} on {scheme}://{host}:{port}/ (Ctrl-C stops)",
                      flush=True)

        import asyncio

        async def main() -> None:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, args.host, args.port, ssl_context=tls)
            try:
                await site.start()
            except OSError as exc:
                raise SystemExit(f"crawlq: error: cannot listen on {args.host}:{args.port}: "
                                 f"{exc.strerror or exc}") from None
            ready(runner)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
            await runner.cleanup()

        asyncio.run(main())
    return 0
