"""``crawlq serve``: the frontier as a service (needs ``crawlq[serve]``).

One process serves a JSON API over HTTP with Prometheus metrics and a dashboard
(:mod:`crawlq.serve.app`), and URLFrontier's gRPC API (:mod:`crawlq.serve.grpc_server`)
on the same store; see docs/serve.md. It listens on 127.0.0.1 unless told otherwise.
Its command line (options, ports, starting the server) is :mod:`crawlq.cli.serve`.
"""

LOCAL_VALUES = ("crawlq:serve:",)
"""Name prefixes of a server's own values on its store (its pause: ``app.ACTIVE``), the
state of the servers on the store rather than of the crawl. The ``crawlq`` command opens
every frontier with them as ``local_values``: a dump leaves them out, and a load leaves
a store's own as they are (loading a dump of a paused crawl does not pause the server
of the store it goes into)."""
