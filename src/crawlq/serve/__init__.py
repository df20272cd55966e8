"""``crawlq serve``: the frontier as a service (needs ``crawlq[serve]``).

One process serves a JSON API over HTTP with Prometheus metrics and a dashboard
(:mod:`crawlq.serve.app`), and URLFrontier's gRPC API (:mod:`crawlq.serve.grpc_server`)
on the same store; see docs/serve.md. It listens on 127.0.0.1 unless told otherwise.
Its command line (options, ports, starting the server) is :mod:`crawlq.cli.serve`.
"""
