"""``crawlq serve``'s command line: its options, and the server started on the store
(:mod:`crawlq.serve` is the server itself; needs ``crawlq[serve]``)."""

from __future__ import annotations

import argparse
import gc
import os
import signal
from typing import Any

from ..errors import CommandError, ConfigError
from ..serve import LOCAL_VALUES
from .argtypes import count

GRPC_SERVERS = ("auto", "native", "grpcio")
"""What ``--grpc-server`` takes (see :func:`crawlq.serve.grpc_server.start`)."""

DEFAULT_PORT = 7072
"""The JSON API's port."""
GRPC_PORT = 7071
"""The URLFrontier gRPC API's port (URLFrontier's own default)."""
REDELIVERIES = 2**31 - 1
"""The server's ``max_redeliveries`` unless ``-o`` gives one: no limit that a crawl can
reach. URLFrontier's reference server serves a URL whose lease ended unanswered again,
however often; a client that leaves a URL unanswered (it stopped, or crashed) never
makes it dead."""


def register(sub: Any) -> None:
    """Add the ``serve`` subcommand to the CLI's subparsers."""
    p = sub.add_parser(
        "serve", help="serve the frontier (URLFrontier gRPC, JSON API, metrics, dashboard)",
        description="Serve the store named by --store to other processes: URLFrontier's "
                    "gRPC API (any URLFrontier client; crawl IDs are stores beside this "
                    "one), a JSON API (add, next, ack, stats, queues, dead, requeue-dead "
                    "under /v1/), Prometheus metrics at /metrics and a dashboard at /. "
                    "See docs/serve.md.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=count(0), default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--grpc-port", type=count(0), default=GRPC_PORT,
                   help=f"URLFrontier gRPC port (default {GRPC_PORT}, URLFrontier's; 0 "
                        "picks a free one)")
    p.add_argument("--no-grpc", action="store_true",
                   help="serve the JSON API only (no URLFrontier gRPC)")
    p.add_argument("--grpc-server", choices=GRPC_SERVERS, default=None,
                   help="the gRPC server: native (gRPC's C++ transport, built when "
                        "gRPC's C++ library is installed with crawlq), grpcio (grpcio's "
                        "asyncio server), auto (native where built) (default: "
                        "$CRAWLQ_GRPC_SERVER, else auto)")
    p.add_argument("--tls-cert", metavar="PEM", default=None,
                   help="serve HTTPS and gRPC over TLS with this certificate chain "
                        "(PEM; with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", default=None,
                   help="the private key of --tls-cert (PEM; may be the same file)")
    p.add_argument("--token", default=None,
                   help="require 'Authorization: Bearer TOKEN' on every call, HTTP header "
                        "or gRPC metadata (default: $CRAWLQ_SERVE_TOKEN, else none)")


def command(args: argparse.Namespace, store: str, options: dict[str, Any]) -> int:
    """Run the server until SIGINT or SIGTERM; returns the exit status."""
    try:
        from aiohttp import web

        from ..serve.app import make_app
        from ..serve.metrics import Metrics
        if not args.no_grpc:
            import grpc_tools  # noqa: F401  (grpcio-tools compiles the proto at start)

            from ..serve import grpc_server
    except ImportError as exc:
        raise CommandError(f"serve needs the serve extra: pip install 'crawlq[serve]' "
                           f"({exc})") from None
    from ..frontier import Frontier

    options = {"max_redeliveries": REDELIVERIES, "local_values": LOCAL_VALUES, **options}
    token = args.token or os.environ.get("CRAWLQ_SERVE_TOKEN") or None
    grpc_kind = args.grpc_server or os.environ.get("CRAWLQ_GRPC_SERVER") or "auto"
    if grpc_kind not in GRPC_SERVERS:
        raise CommandError(f"CRAWLQ_GRPC_SERVER={grpc_kind!r}: not one of "
                           f"{', '.join(GRPC_SERVERS)}")
    tls = None
    if args.tls_cert or args.tls_key:
        import ssl

        if not args.tls_cert:
            raise CommandError("--tls-key needs --tls-cert")
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot use the TLS certificate {args.tls_cert}: "
                               f"{exc}") from None
    scheme = "https" if tls is not None else "http"
    pem = None
    if tls is not None:
        try:
            with open(args.tls_cert, "rb") as fh:
                chain = fh.read()
            with open(args.tls_key or args.tls_cert, "rb") as fh:
                key = fh.read()
        except OSError as exc:
            raise CommandError(f"cannot read {exc.filename}: {exc.strerror}") from None
        pem = (key, chain)
    with Frontier.open(store, **options) as frontier:
        metrics = Metrics(frontier)
        app = make_app(frontier, token, metrics)

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
                raise CommandError(f"cannot listen on {args.host}:{args.port}: "
                                   f"{exc.strerror or exc}") from None
            grpc = crawls = None
            if not args.no_grpc:
                from ..serve.crawls import Crawls

                crawls = Crawls(store, frontier, lambda url: Frontier.open(url, **options))
                try:
                    grpc, bound, kind = await grpc_server.start(
                        crawls, metrics, args.host, args.grpc_port, token, pem,
                        grpc_kind)
                except (OSError, ConfigError) as exc:
                    await runner.cleanup()
                    raise CommandError(f"gRPC: {exc}") from None
            # What is made by now (modules, the proto's classes, the stores' caches)
            # lives as long as the server: frozen, it is left out of the collections
            # that the server's long-lived lease handles set off, which otherwise walk
            # it all each time (~25 ms each, 5 µs a URL in bench_urlfrontier). (The
            # garbage of the start is collected first: frozen, it would stay.)
            gc.collect()
            gc.freeze()
            ready(runner)
            if grpc is not None:
                how = ("TLS" if pem else "plaintext") + f", {kind} server"
                print(f"crawlq serve: URLFrontier gRPC on {args.host}:{bound} ({how})",
                      flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
            if grpc is not None:
                await grpc.stop(grace=2.0)
            await runner.cleanup()
            if crawls is not None:
                crawls.close()

        asyncio.run(main())
    return 0
