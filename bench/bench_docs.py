#!/usr/bin/env python3
"""Real sites: `crawlq crawl` against `wget -r -np` on four Debian documentation packages.

The sites (issue 61, items 1(a) and 2): the HTML of python3.11-doc, postgresql-doc-15,
apache2-doc and git-doc (~4,600 HTML files, ~135 MB), each served by nginx on 127.0.0.1
under its own host name (``python.docs.test``, ``postgresql.docs.test``,
``apache.docs.test``, ``git.docs.test``), all four on one port of an nginx this bench
starts (its own config and prefix in a temporary folder: not the system's nginx
service). Each site's root (its ``/``) is the package's HTML folder, chosen so that
what the pages link to is inside it: python's pages link to ``/license.html`` and
``/bugs.html`` (the site root of docs.python.org), apache's language folders to each
other and to ``../images``, so python's root is its ``html/`` and apache's its
``manual/``. Links to ``file:///usr/share/doc/...`` (a few in python's) are not http,
and the links to other sites (python.org, apache.org) are off the crawl for both, so
``wget -r -np`` and crawlq can crawl the same set; the bench shows any difference.

Contenders, alternated in rounds (``--rounds``, default 3; the order rotates each round,
so a slow spell of this shared machine hits each of them in turn):

crawlq-jsonl
    ``crawlq crawl`` of the four seeds (``bench_crawl.crawlq_command``: ``--per-host 2
    --concurrency 8 --min-delay 0 --max-delay 0 --delay-factor 0 --state DIR``, every
    ``*.docs.test`` resolved to 127.0.0.1 by ``--resolve``, ``--allow-private``,
    ``--allow-domain docs.test``) writing ``--out pages.jsonl``.
crawlq-warc
    The same, writing ``--out crawl.warc.gz``.
wget-parallel
    ``wget -r -np -l inf -nv``, one process per site, the four at once (four connections
    in all, as crawlq crawls the four sites at once; wget is one connection a process).
wget-serial
    The same four processes one after another (wget's one connection, as the issue's
    measurement).

wget cannot be told where a name is (no ``--resolve``): it is given nginx as its HTTP
proxy (``-e http_proxy=http://127.0.0.1:PORT/``), so it asks for the very URLs crawlq
asks for (``http://python.docs.test:PORT/...``, in absolute form, which nginx serves by
host name like any request), connects nowhere else, and keeps its connection alive as
without a proxy. ``-l inf``: wget's default depth of 5 would cut deeper pages, which
crawlq (no depth limit) fetches. Both obey robots.txt, which nginx answers 404.

Measured, for each run, from nginx's access log (the bench's own log format): pages (200
responses of ``text/html``, distinct URLs), twice (HTML URLs fetched more than once),
other (every other request: robots.txt, images, stylesheets and text files wget also
fetches, 404s of dead links), connections, and the set difference against the round's
wget (``+N/-M``: pages only this contender fetched / pages only wget fetched); wall
seconds (the processes' start to exit, start-up included), pages/s, CPU seconds of all
the contender's processes (user + system, ``getrusage(RUSAGE_CHILDREN)`` deltas: the
crawl, its parser processes, every wget) and the system part of them, pages per
CPU-second, and nginx's CPU seconds in the same time (its workers, from /proc). Then the
medians of the rounds and the ratios crawlq/wget of pages/s and of pages per CPU-second.

Where the contenders write (crawlq's state and output, wget's ~4,800 files) is the
temporary folder, or ``--dir`` (``--dir /dev/shm``: a tmpfs). It matters to wget: on a
slow file system its file creations are much of its CPU (system time, the "sys s"
column); each contender writes to the same place.

Needs nginx, wget and the four packages: missing ones are installed with apt-get when
run as root on Debian/Ubuntu (as scripts/test.sh installs redis-server); otherwise the
bench says what is missing and exits with status 2. ``--tiny`` serves a small tree the
bench writes (4 sites x 9 linked pages) instead of the packages, a run of seconds that
checks the bench works (its figures mean nothing; it still needs nginx and wget).
Only 127.0.0.1 is ever contacted.

    python bench/bench_docs.py
    python bench/bench_docs.py --rounds 5 --only crawlq-jsonl --only wget-parallel
    python bench/bench_docs.py --dir /dev/shm
    python bench/bench_docs.py --tiny --rounds 1
    python bench/bench_docs.py --src /tmp/old/src --src src --only crawlq-jsonl

``--src DIR`` (repeatable) runs each crawlq contender once per source tree, crawlq
imported from it (``PYTHONPATH``; a tree's compiled modules built in place), named
``crawlq-jsonl@old`` after the folder that holds the tree (``src``: itself): old and new
builds alternated in one run, as wget is.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_crawl import crawlq_command, run_crawl  # (bench/ is on the path)

DOMAIN = "docs.test"
"""The registered domain of the four sites (a reserved TLD: never a real name)."""

CONTENDERS = ["crawlq-jsonl", "crawlq-warc", "wget-parallel", "wget-serial"]


@dataclass(frozen=True)
class Site:
    """One site: its host label (``python`` is ``python.docs.test``), the Debian package
    that brings it ("" for the tiny tree) and the folder served as its ``/``."""

    name: str
    package: str
    root: Path

    @property
    def host(self) -> str:
        return f"{self.name}.{DOMAIN}"


DOCS = (
    Site("python", "python3.11-doc", Path("/usr/share/doc/python3.11/html")),
    Site("postgresql", "postgresql-doc-15", Path("/usr/share/doc/postgresql-doc-15/html")),
    Site("apache", "apache2-doc", Path("/usr/share/doc/apache2-doc/manual")),
    Site("git", "git-doc", Path("/usr/share/doc/git-doc")),
)
"""The real sites. Their roots: see the module's docstring."""

TINY_PAGES = 8
"""Pages under ``sub/`` of each tiny site (besides its index and an unlinked page)."""


# -- what the bench needs ------------------------------------------------------------------


def nginx_binary() -> str | None:
    """nginx's path (in /usr/sbin, often not on a user's PATH), or None."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def missing(sites: tuple[Site, ...]) -> list[str]:
    """The Debian packages of what is not here: nginx, wget, the sites' trees."""
    need = [] if nginx_binary() else ["nginx"]
    need += [] if shutil.which("wget") else ["wget"]
    return need + [s.package for s in sites
                   if s.package and not (s.root / "index.html").exists()]


def ensure_installed(sites: tuple[Site, ...]) -> None:
    """Install what is missing with apt-get (as root on Debian/Ubuntu: as scripts/test.sh
    does for redis-server); otherwise say what is missing and exit with status 2."""
    need = missing(sites)
    if not need:
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"== installing {' '.join(need)} (apt-get)", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", *need]
        if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
            subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=False)
        need = missing(sites)
        if not need:
            return
    print(f"bench_docs: missing {', '.join(need)}: install them (as root: apt-get install "
          f"{' '.join(need)}) and run again", file=sys.stderr)
    sys.exit(2)


def tiny_sites(where: Path) -> tuple[Site, ...]:
    """Four small sites written under ``where``, named as the real ones: each an index
    linking to ``sub/p0.html`` ... ``sub/p7.html`` and to an image, pages linking to
    each other relatively, by site-absolute path and to a text file, a link to an
    absolute /usr/share/doc path (a 404, as in some doc trees), and a page nothing
    links to."""
    sites = []
    for doc in DOCS:
        root = where / doc.name
        (root / "sub").mkdir(parents=True)
        links = "".join(f'<a href="sub/p{i}.html">page {i}</a>\n' for i in range(TINY_PAGES))
        (root / "index.html").write_text(
            f"<html><head><title>{doc.name}</title></head><body>\n{links}"
            '<img src="logo.png"><a href="/usr/share/doc/elsewhere/index.html">x</a>'
            "</body></html>\n")
        (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        (root / "orphan.html").write_text("<html><body>nothing links here</body></html>\n")
        for i in range(TINY_PAGES):
            (root / "sub" / f"p{i}.html").write_text(
                f"<html><head><title>{doc.name} {i}</title></head><body>\n"
                f'<a href="../index.html">up</a> <a href="p{(i + 1) % TINY_PAGES}.html">next</a>'
                f' <a href="/sub/p{(i + 3) % TINY_PAGES}.html">on</a>'
                f' <a href="notes.txt">notes</a>\n' + "<p>text</p>\n" * 50 + "</body></html>\n")
        (root / "sub" / "notes.txt").write_text("notes\n")
        sites.append(Site(doc.name, "", root))
    return tuple(sites)


def html_files(site: Site) -> set[str]:
    """The paths (as URL paths) of the HTML files under a site's root."""
    return {"/" + str(p.relative_to(site.root)) for p in site.root.rglob("*.html")
            if p.is_file()}


def warm(sites: tuple[Site, ...]) -> None:
    """Read every file of the trees once, so the first run does not pay the disk."""
    for site in sites:
        for p in site.root.rglob("*"):
            if p.is_file():
                p.read_bytes()


# -- nginx -----------------------------------------------------------------------------------


LOG_FORMAT = "$host\\t$request_uri\\t$status\\t$sent_http_content_type\\t$connection"
"""The access log's fields: host, URI as requested, status, content type, connection."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nginx:
    """An nginx of this bench's own (config, prefix, logs in ``prefix``), serving each
    site's root under its host name on one free port of 127.0.0.1, and 404 to any other
    name."""

    def __init__(self, sites: tuple[Site, ...], prefix: Path) -> None:
        self.prefix = prefix
        self.port = free_port()
        self.log = prefix / "access.log"
        self.proc: subprocess.Popen[bytes] | None = None
        prefix.mkdir(parents=True, exist_ok=True)
        temps = "\n".join(f"    {kind}_temp_path {prefix}/temp-{kind};"
                          for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        servers = "\n".join(
            f"    server {{ listen 127.0.0.1:{self.port}; server_name {s.host}; "
            f"root {s.root}; index index.html; }}" for s in sites)
        # (started by root, nginx's workers would be nobody, who may not read a tree in
        # a folder of root's, such as a test's temporary folder: they are this user)
        user = (f"user {pwd.getpwuid(os.geteuid()).pw_name} "
                f"{grp.getgrgid(os.getegid()).gr_name};" if os.geteuid() == 0 else "")
        (prefix / "nginx.conf").write_text(f"""\
{user}
worker_processes 2;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    types {{ text/html html htm; text/css css; application/javascript js;
            image/png png; image/gif gif; image/svg+xml svg; text/plain txt; }}
    default_type application/octet-stream;
    log_format bench "{LOG_FORMAT}";
    access_log {self.log} bench;
    sendfile on;
    keepalive_requests 1000000;
{temps}
    server {{ listen 127.0.0.1:{self.port} default_server; return 404; }}
{servers}
}}
""")

    def start(self) -> Nginx:
        nginx = nginx_binary()
        assert nginx is not None
        self.proc = subprocess.Popen(
            [nginx, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf"),
             "-e", str(self.prefix / "error.log"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"nginx did not start:\n{err}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx did not listen within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # (graceful: workers end, then it)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cpu(self) -> float:
        """CPU seconds (user + system) of nginx's workers so far, from /proc."""
        assert self.proc is not None
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:  # (ppid: a worker of this nginx)
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def mark(self) -> int:
        """Where the access log ends now (see :meth:`hits`)."""
        return self.log.stat().st_size if self.log.exists() else 0

    def hits(self, since: int) -> list[list[str]]:
        """The access log's records after ``since`` (a :meth:`mark`), each split in its
        fields."""
        time.sleep(0.2)  # (a last record is written after its response is sent)
        with self.log.open("rb") as f:
            f.seek(since)
            return [line.decode().split("\t") for line in f.read().splitlines()]


# -- the contenders --------------------------------------------------------------------------


def wget_command(seed: str, port: int, out: Path) -> list[str]:
    """``wget -r -np -l inf -nv`` of one site into ``out``, through nginx as its proxy
    (how it finds the site's name: see the module's docstring); no wgetrc."""
    return ["wget", "--no-config", "-e", "use_proxy=on",
            "-e", f"http_proxy=http://127.0.0.1:{port}/", "-r", "-np", "-l", "inf", "-nv",
            "-U", "crawlq-bench", "-P", str(out), seed]


def run_wgets(seeds: list[str], port: int, tmp: Path, parallel: bool) -> None:
    """One wget per seed, at once or one after another; RuntimeError if one fails
    (exit 8, an error answer such as a dead link's 404, is no failure)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    for i, seed in enumerate(seeds):
        log = tmp / f"wget{i}.log"
        with log.open("wb") as f:
            proc = subprocess.Popen(wget_command(seed, port, tmp / "files"),
                                    stdout=f, stderr=subprocess.STDOUT, env=env)
        procs.append((proc, log))
        if not parallel:
            proc.wait()
    for proc, log in procs:
        if proc.wait() not in (0, 8):
            raise RuntimeError(f"wget exited {proc.returncode}:\n"
                               f"{log.read_text(errors='replace')[-2000:]}")


def runner(contender: str, seeds: list[str], port: int, tmp: Path, conc: int,
           per_host: int, src: str | None = None) -> Callable[[], str]:
    """What runs one contender, its files in ``tmp`` (crawlq from the source tree
    ``src``, if given): it returns crawlq's summary's last line ("" for wget)."""
    if contender.startswith("wget"):

        def wgets() -> str:
            run_wgets(seeds, port, tmp, contender == "wget-parallel")
            return ""

        return wgets
    out = tmp / ("pages.jsonl" if contender.startswith("crawlq-jsonl") else "crawl.warc.gz")
    cmd = crawlq_command(seeds, ["--state", str(tmp / "state")], conc, per_host, 0.0,
                         str(out), conc, domain=DOMAIN)
    env = {**os.environ, "PYTHONPATH": src} if src else None

    def crawl() -> str:
        return run_crawl(cmd, env)[1]

    return crawl


@dataclass
class Run:
    """One contender's run, as nginx and getrusage saw it."""

    contender: str
    pages: set[tuple[str, str]]
    twice: int
    other: int
    connections: int
    wall: float
    cpu: float
    sys_cpu: float
    server_cpu: float
    answers: dict[tuple[str, str], list[str]]
    """nginx's answers (status and content type) to each URL this run asked for."""
    note: str
    """The last line of crawlq's summary ("" for wget)."""

    @property
    def rate(self) -> float:
        return len(self.pages) / self.wall

    @property
    def per_cpu(self) -> float:
        return len(self.pages) / self.cpu if self.cpu else 0.0


def children_cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process's children that have ended."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def measure(contender: str, run: Callable[[], str], web: Nginx) -> Run:
    """Run one contender and read what it fetched from nginx's log."""
    since, server0, (user0, sys0) = web.mark(), web.cpu(), children_cpu()
    start = time.monotonic()
    note = run()
    wall = time.monotonic() - start
    (user, sys_cpu), server_cpu = children_cpu(), web.cpu() - server0
    user, sys_cpu = user - user0, sys_cpu - sys0
    hits = web.hits(since)
    answers: dict[tuple[str, str], list[str]] = {}
    for h in hits:
        answers.setdefault((h[0], h[1]), []).append(f"{h[2]} {h[3]}")
    html = Counter((h[0], h[1]) for h in hits
                   if h[2] == "200" and h[3].startswith("text/html"))
    if not html:
        errors = (web.prefix / "error.log").read_text(errors="replace")[-1500:]
        raise RuntimeError(f"no page fetched (nginx's {len(hits)} answers: "
                           f"{Counter(h[2] for h in hits)}); nginx's error log:\n{errors}")
    return Run(contender, set(html), sum(n - 1 for n in html.values()),
               len(hits) - sum(html.values()), len({h[4] for h in hits}), wall,
               user + sys_cpu, sys_cpu, server_cpu, answers, note)


# -- the report ------------------------------------------------------------------------------


HEADER = (f"{'contender':<20} {'round':>5} {'pages':>6} {'twice':>5} {'other':>5} "
          f"{'conns':>5} {'vs wget':>9} {'seconds':>8} {'pages/s':>8} {'CPU s':>7} "
          f"{'sys s':>6} {'pages/CPU-s':>11} {'nginx CPU':>9}")


def row(r: Run, label: str, diff: str) -> str:
    return (f"{r.contender:<20} {label:>5} {len(r.pages):>6} {r.twice:>5} {r.other:>5} "
            f"{r.connections:>5} {diff:>9} {r.wall:>8.2f} {r.rate:>8.1f} {r.cpu:>7.2f} "
            f"{r.sys_cpu:>6.2f} {r.per_cpu:>11.1f} {r.server_cpu:>9.2f}")


def paths(pages: set[tuple[str, str]]) -> list[str]:
    return sorted(f"{host}{uri}" for host, uri in pages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", action="append", choices=CONTENDERS)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--per-host", type=int, default=2)
    ap.add_argument("--dir", type=Path,
                    help="where the contenders write (crawlq's state and output, wget's "
                         "files; e.g. /dev/shm for a tmpfs): default the temporary folder")
    ap.add_argument("--tiny", action="store_true",
                    help=f"4 generated sites of {TINY_PAGES + 1} linked pages instead of the "
                         "Debian packages: a run of seconds that checks the bench works")
    ap.add_argument("--src", action="append", metavar="DIR",
                    help="a crawlq source tree to run the crawlq contenders from "
                         "(repeatable: each is a contender of its own)")
    a = ap.parse_args()
    trees = {f"@{Path(d).resolve().parent.name if Path(d).name == 'src' else Path(d).name}":
             str(Path(d).resolve()) for d in a.src or []}
    contenders = [f"{c}{t}" if c.startswith("crawlq") else c
                  for c in a.only or CONTENDERS for t in (trees or [""])]
    contenders = list(dict.fromkeys(contenders))
    ensure_installed(() if a.tiny else DOCS)
    runs: dict[str, list[Run]] = {c: [] for c in contenders}
    diffs: dict[str, set[str]] = {c: set() for c in contenders}
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-docs-") as tmp_name:
        tmp = Path(tmp_name)
        sites = tiny_sites(tmp / "tiny") if a.tiny else DOCS
        files = {(s.host, p) for s in sites for p in html_files(s)}
        warm(sites)
        web = Nginx(sites, tmp / "nginx").start()
        try:
            seeds = [f"http://{s.host}:{web.port}/" for s in sites]
            print(f"{len(sites)} sites, {len(files):,} HTML files, nginx on 127.0.0.1:"
                  f"{web.port}; {a.rounds} round(s), the order rotating; crawlq: "
                  f"--concurrency {a.concurrency} --per-host {a.per_host}, no delays; "
                  f"output in {a.dir or tmp}")
            print("crawlq: " + " ".join(crawlq_command(
                seeds, ["--state", "DIR"], a.concurrency, a.per_host, 0.0, "pages.jsonl",
                a.concurrency, domain=DOMAIN)))
            print("wget:   " + " ".join(wget_command(seeds[0], web.port, Path("DIR"))))
            print(HEADER, flush=True)
            for n in range(a.rounds):
                order = contenders[n % len(contenders):] + contenders[:n % len(contenders)]
                done: dict[str, Run] = {}
                for contender in order:
                    work = Path(tempfile.mkdtemp(prefix=f"run-{n}-{contender}-",
                                                 dir=a.dir or tmp))
                    try:
                        at = contender.find("@")
                        tree = trees[contender[at:]] if at >= 0 else None
                        done[contender] = measure(contender, runner(
                            contender, seeds, web.port, work, a.concurrency, a.per_host,
                            tree), web)
                    except RuntimeError as exc:
                        print(f"{contender:<20} {n + 1:>5} FAILED: {exc}", flush=True)
                    finally:
                        shutil.rmtree(work)
                ref = next((done[c] for c in ("wget-parallel", "wget-serial") if c in done),
                           None)
                for contender in contenders:
                    if contender not in done:
                        continue
                    r = done[contender]
                    runs[contender].append(r)
                    diff = "-"
                    if ref is not None:
                        extra, lacking = r.pages - ref.pages, ref.pages - r.pages
                        diff = f"+{len(extra)}/-{len(lacking)}"
                        diffs[contender] |= ({f"+ {p}" for p in paths(extra)} |
                                             {f"- {p}" for p in paths(lacking)})
                        for url in sorted(extra | lacking)[:5]:  # (what nginx answered)
                            print(f"  round {n + 1}, {url[0]}{url[1]}: {contender} got "
                                  f"{r.answers.get(url, [])}, {ref.contender} "
                                  f"{ref.answers.get(url, [])}; {contender}: {r.note}")
                    print(row(r, str(n + 1), diff), flush=True)
        finally:
            web.stop()
    report(runs, diffs, files)


def report(runs: dict[str, list[Run]], diffs: dict[str, set[str]],
           files: set[tuple[str, str]]) -> None:
    """The medians of the rounds, the ratios crawlq/wget, what the page sets differ in."""
    print(f"\nmedians of the rounds\n{HEADER}")
    med: dict[str, tuple[float, float]] = {}
    for contender, rs in runs.items():
        if not rs:
            continue
        m = Run(contender, max((r.pages for r in rs), key=len),
                int(statistics.median(r.twice for r in rs)),
                int(statistics.median(r.other for r in rs)),
                int(statistics.median(r.connections for r in rs)),
                statistics.median(r.wall for r in rs), statistics.median(r.cpu for r in rs),
                statistics.median(r.sys_cpu for r in rs),
                statistics.median(r.server_cpu for r in rs), {}, "")
        med[contender] = (statistics.median(r.rate for r in rs),
                          statistics.median(r.per_cpu for r in rs))
        print(f"{contender:<20} {'med':>5} {len(m.pages):>6} {m.twice:>5} {m.other:>5} "
              f"{m.connections:>5} {'':>9} {m.wall:>8.2f} {med[contender][0]:>8.1f} "
              f"{m.cpu:>7.2f} {m.sys_cpu:>6.2f} {med[contender][1]:>11.1f} "
              f"{m.server_cpu:>9.2f}")
    for crawler in (c for c in med if c.startswith("crawlq")):
        for peer in ("wget-parallel", "wget-serial"):
            if crawler in med and peer in med and all(med[peer]):
                print(f"  {crawler}: {med[crawler][0] / med[peer][0]:.2f}x {peer}'s pages/s, "
                      f"{med[crawler][1] / med[peer][1]:.2f}x its pages per CPU-second")
    for contender, lines in diffs.items():
        if lines:
            shown = sorted(lines)
            print(f"  {contender} against wget (+ only {contender}, - only wget), "
                  f"{len(shown)} pages: {'; '.join(shown[:10])}"
                  f"{' ...' if len(shown) > 10 else ''}")
    fetched = set().union(*(r.pages for rs in runs.values() for r in rs))
    reached = fetched | {(h, u + "index.html") for h, u in fetched if u.endswith("/")}
    unreached = sorted(f"{h}{u}" for h, u in files - reached)
    print(f"  HTML files in the trees: {len(files):,}; fetched by none of the contenders "
          f"(nothing links to them): {len(unreached):,}"
          f"{': ' + ', '.join(unreached[:8]) if unreached else ''}"
          f"{' ...' if len(unreached) > 8 else ''}")


if __name__ == "__main__":
    main()
