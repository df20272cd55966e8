"""Store URLs (``memory://``, ``sqlite:///crawl.db``, ``redis://host:6379/0?prefix=x``),
parsed in one place: :class:`StoreURL`. Every reader of a store URL (``open_store``,
the Redis store, ``crawlq serve``'s crawls, the CLI, the Scrapy scheduler) asks it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError

REDIS_SCHEMES = ("redis", "rediss", "unix")
"""The store URL schemes of the Redis store: the built-in store whose calls wait on a
server over the network."""


@dataclass(frozen=True)
class StoreURL:
    """One store URL: its ``scheme`` (lowercase), ``netloc``, ``path``, ``query`` pairs
    and the query as written (``raw_query``). Build it with :meth:`parse`."""

    text: str
    scheme: str
    netloc: str
    path: str
    query: tuple[tuple[str, str], ...]
    raw_query: str

    @classmethod
    def parse(cls, url: object) -> StoreURL:
        """Parse ``url``; raises :class:`~crawlq.errors.ConfigError` for what is no URL."""
        if not isinstance(url, str):
            raise ConfigError(f"a store URL is a string, not {url!r}")
        try:
            parts = urlsplit(url)
            query = tuple(parse_qsl(parts.query))
        except ValueError as exc:
            raise ConfigError(f"not a store URL: {url!r} ({exc})") from None
        return cls(url, parts.scheme.lower(), parts.netloc, parts.path, query, parts.query)

    @property
    def kind(self) -> str:
        """``memory``, ``sqlite``, ``redis`` (any of :data:`REDIS_SCHEMES`), or the
        scheme itself (a store another package registers)."""
        return "redis" if self.scheme in REDIS_SCHEMES else self.scheme

    @property
    def hostname(self) -> str | None:
        """The server's host name (lowercase), None when the URL names none."""
        return urlsplit(self.text).hostname

    @property
    def port(self) -> int | None:
        """The server's port, None when the URL names none."""
        try:
            return urlsplit(self.text).port
        except ValueError as exc:
            raise ConfigError(f"bad port in the store URL {self.text!r}: {exc}") from None

    @property
    def password(self) -> str | None:
        """The password the URL carries, if any."""
        return urlsplit(self.text).password

    def option(self, name: str, default: str | None = None) -> str | None:
        """The query's value for ``name`` (the last one given), else ``default``."""
        found = [v for k, v in self.query if k == name]
        return found[-1] if found else default

    def count_option(self, name: str, default: int | None, minimum: int = 0) -> int | None:
        """The query's value for ``name`` as a count >= ``minimum`` (ConfigError when it
        is not one), else ``default``."""
        text = self.option(name)
        if text is None:
            return default
        if not text.isdigit() or int(text) < minimum:
            raise ConfigError(f"{name} must be a count (an integer >= {minimum}), not {text!r}")
        return int(text)

    @property
    def sqlite_path(self) -> str:
        """The file of ``sqlite:///relative.db`` or ``sqlite:////absolute.db``: exactly
        those forms, as in SQLAlchemy; anything else (one slash, a host) is an error
        rather than another file than the user meant."""
        rest = self.text.split(":", 1)[1]
        if self.scheme != "sqlite" or not rest.startswith("///") or self.netloc:
            raise ConfigError(f"{self.text!r} is not a sqlite URL: write "
                              "sqlite:///relative/path.db or sqlite:////absolute/path.db")
        if not self.path[1:]:
            raise ConfigError(f"sqlite URL needs a file path: {self.text!r} "
                              "(e.g. sqlite:///crawl.db)")
        return self.path[1:]  # "/rel.db" -> rel.db ; "//abs.db" -> /abs.db

    def with_query(self, drop: tuple[str, ...] = (),
                   add: tuple[tuple[str, str], ...] = ()) -> str:
        """This URL's text without the query options named in ``drop``, with ``add``."""
        query = [(k, v) for k, v in self.query if k not in drop] + list(add)
        return urlunsplit((self.scheme, self.netloc, self.path, urlencode(query), ""))
