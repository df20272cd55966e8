"""Types of the optional C++ extension (src/crawlq/serve/_edge.cc): gRPC's transport for
:mod:`crawlq.serve.grpc_edge`."""

from typing import Any

START: int
MESSAGE: int
HALF_CLOSE: int
CANCEL: int
DRAINED: int
DONE: int
WINDOW: int

class Edge:
    """A gRPC server whose calls reach Python as batches of events."""

    def start(self, address: str, max_message: int, key: str | None = None,
              chain: str | None = None) -> int: ...
    def fileno(self) -> int: ...
    def events(self) -> list[tuple[int, int, Any]]: ...
    def write(self, call: int, messages: list[bytes], tell_drained: bool = False) -> None: ...
    def finish(self, call: int, code: int, details: str) -> None: ...
    def read_more(self, call: int, n: int, nbytes: int) -> None: ...
    def shutdown(self, grace: float) -> None: ...
