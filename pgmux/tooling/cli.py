"""The ``pgmux`` command: ``demo`` (pipelined vs naive), ``check DSN`` and ``bench``."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

BENCH_MISSING = "pgmux bench: the benchmark suite (pgmux.tooling.bench) is not installed in this build"
PG_ENV_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")
QUICK_SECONDS = 0.75
QUERY_TIMEOUT = 10.0
APP_NAMES = {"multiplexed": "pgmux-demo-multiplexed", "naive": "pgmux-demo-naive"}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pgmux`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return run_bench(argv[1:])  # the suite parses its own options (and --help)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgmux", description="pgmux: a pipelined, multiplexed PostgreSQL client for gevent.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="pipelined vs naive pool at a simulated round trip",
        description="Run the same SELECT through pgmux's multiplexed path and through a naive "
                    "one-query-per-round-trip pool of the same size, behind a simulated network "
                    "round trip; print throughput, latency and pgmux's stats. Without --dsn "
                    "(and without PG* variables) it starts a throwaway PostgreSQL.")
    demo.add_argument("--dsn", help="server to use (default: PG* variables, else a throwaway "
                                    "embedded PostgreSQL)")
    demo.add_argument("--rtt-ms", type=float, default=10.0,
                      help="simulated round trip added by a delay proxy (default 10; 0: none)")
    demo.add_argument("--seconds", type=float, default=3.0, help="length of each run (default 3)")
    demo.add_argument("--greenlets", type=int, default=64,
                      help="concurrent callers (default 64)")
    demo.add_argument("--connections", type=int, default=4,
                      help="server connections for each side (default 4)")
    demo.add_argument("--quick", action="store_true",
                      help=f"{QUICK_SECONDS}s runs (for CI)")
    demo.set_defaults(run=run_demo)

    check = commands.add_parser(
        "check", help="connect and report version, protocol, TLS, auth and round trip",
        description="Connect once and report the server version, protocol version, TLS, "
                    "authentication method and round-trip time. Exits 1 with a one-line "
                    "reason when the connection fails.")
    check.add_argument("dsn", nargs="?", help="libpq URL or key=value string (default: PG* "
                                              "variables)")
    check.add_argument("--count", type=int, default=5,
                       help="SELECT 1 round trips to time (default 5)")
    check.add_argument("--timeout", type=float, default=None,
                       help="connect and query timeout in seconds (default: the DSN's "
                            f"connect_timeout, else {QUERY_TIMEOUT:g})")
    check.set_defaults(run=run_check)

    commands.add_parser("bench", add_help=False, help="the benchmark suite (pgmux bench --help)")
    return parser


# bench --------------------------------------------------------------------------------------

def run_bench(argv: list[str]) -> int:
    try:
        bench = importlib.import_module("pgmux.tooling.bench")
    except ModuleNotFoundError as exc:
        if exc.name not in ("pgmux.tooling.bench", "pgmux"):
            raise
        print(BENCH_MISSING, file=sys.stderr)
        return 2
    status = bench.main(argv)
    return status if isinstance(status, int) else 0


# check --------------------------------------------------------------------------------------

def run_check(args: argparse.Namespace) -> int:
    import pgmux
    from pgmux._native import describe as implementation
    from pgmux.errors import Error
    from pgmux.io.connect import connect
    from pgmux.io.conninfo import make_conninfo
    from pgmux.io.pinned import PinnedConnection
    from pgmux.types import default_registry

    overrides = {} if args.timeout is None else {"connect_timeout": args.timeout}
    try:
        info = make_conninfo(args.dsn, **overrides)
        if info.connect_timeout is None:  # libpq would wait forever: a check should not
            info = make_conninfo(args.dsn, connect_timeout=QUERY_TIMEOUT)
    except Exception as exc:  # the message never includes a password (conninfo sees to it)
        return _fail(f"invalid connection settings: {_one_line(exc)}", None)
    started = time.perf_counter()
    try:
        conn = connect(info)
    except Exception as exc:  # anything at all: one line, never a traceback
        return _fail(_connect_failure(exc, info), info.password)
    connect_ms = (time.perf_counter() - started) * 1000
    pinned = PinnedConnection(conn, default_registry)
    try:
        timeout = args.timeout or QUERY_TIMEOUT
        rtts = [_ping(pinned, timeout) for _ in range(max(args.count, 1))]
    except Error as exc:
        return _fail(f"connected to {info.describe()}, but SELECT 1 failed: {_one_line(exc)}",
                     info.password)
    finally:
        pinned.close()
    transport = conn.transport
    tls = f"{transport.tls_version} {transport.cipher}" if transport.is_tls else "no"
    report = {
        "server": info.describe(),
        "version": f"PostgreSQL {conn.server_version}",
        "protocol": conn.protocol,
        "tls": tls,
        "auth": conn.auth_method,
        "connect": f"{connect_ms:.2f} ms",
        "round trip": f"{statistics.median(rtts):.2f} ms (median of {len(rtts)} x SELECT 1)",
        "pgmux": f"{pgmux.__version__} {implementation()}",
    }
    for key, value in report.items():
        print(f"{key:<11} {value}")
    return 0


def _ping(conn: Any, timeout: float) -> float:
    """One ``SELECT 1`` on the connection (through the query engine); its round trip in ms."""
    started = time.perf_counter()
    conn.command("SELECT 1", timeout)
    return (time.perf_counter() - started) * 1000


_SQLSTATE = re.compile(r"\(SQLSTATE (\w{5})\)")


def _connect_failure(exc: Exception, info: Any) -> str:
    """One line naming what failed: authentication, or reaching the server."""
    reason = _one_line(exc)
    sqlstate = getattr(exc, "sqlstate", None)
    match = _SQLSTATE.search(reason)
    if match:
        sqlstate = match.group(1)
    where = info.describe().split(" as ")[0]
    if sqlstate and sqlstate.startswith("28"):
        return f'authentication failed for user "{info.user}" at {where}: {reason}'
    return f"could not connect to {where}: {reason}"


def _one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = "; ".join(lines) or type(exc).__name__
    return re.sub(r"^(FATAL|ERROR):\s+", "", text)


def _fail(message: str, secret: str | None) -> int:
    if secret:
        message = message.replace(secret, "********")
    print(f"pgmux check: {message}", file=sys.stderr)
    return 1


# demo ---------------------------------------------------------------------------------------

def run_demo(args: argparse.Namespace) -> int:
    from pgmux.errors import Error
    from pgmux.tooling.progress import Progress

    seconds = QUICK_SECONDS if args.quick else args.seconds
    if args.connections < 1 or args.greenlets < 1 or seconds <= 0:
        print("pgmux demo: --connections, --greenlets and --seconds must be positive",
              file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        try:
            dsn, label = _demo_server(args.dsn, stack)
            _probe(dsn)
            options = _through_proxy(dsn, args.rtt_ms / 1000.0, stack)
        except (Error, OSError, RuntimeError) as exc:
            print(f"pgmux demo: {_one_line(exc)}", file=sys.stderr)
            return 1
        print(f"pgmux demo: {label}; {args.rtt_ms:g} ms simulated round trip; "
              f"{args.greenlets} greenlets; {args.connections} connections per side; "
              f"{seconds:g} s per run", flush=True)
        with Progress(2 * seconds, "running") as bar:
            try:
                rows, stats = _demo_runs(dsn, options, args.greenlets, args.connections,
                                         seconds, bar)
            except Error as exc:
                bar.finish()
                print(f"pgmux demo: {_one_line(exc)}", file=sys.stderr)
                return 1
    _print_results(rows, stats, args.connections)
    return 0


def _demo_server(dsn: str | None, stack: contextlib.ExitStack) -> tuple[str | None, str]:
    """The DSN to use and a label: the given one, PG* variables, or an embedded server."""
    if dsn:
        return dsn, "server from --dsn"
    if any(name in os.environ for name in PG_ENV_VARS):
        return None, "server from PG* environment variables"
    from pgmux.tooling.embedded import EmbeddedPostgres

    print("pgmux demo: no DSN given, starting a throwaway PostgreSQL ...", flush=True)
    started = time.monotonic()
    server = EmbeddedPostgres()
    stack.callback(server.stop)
    server.start(report=lambda line: print(f"pgmux demo:   {line}", flush=True))
    print(f"pgmux demo: server ready in {time.monotonic() - started:.1f} s", flush=True)
    return server.dsn(user="postgres"), f"embedded PostgreSQL {server.version}"


def _through_proxy(dsn: str | None, rtt: float,
                   stack: contextlib.ExitStack) -> dict[str, Any]:
    """Connection overrides routing the client through a DelayProxy (none when rtt is 0)."""
    if rtt <= 0:
        return {}
    from pgmux.io.conninfo import make_conninfo
    from pgmux.tooling.proxy import DelayProxy

    info = make_conninfo(dsn)
    host, port = info.hosts[0], info.ports[0]
    if host.startswith("/"):
        raise RuntimeError("the delay proxy needs a TCP host; use --rtt-ms 0 for a Unix socket")
    upstream = info.hostaddrs[0] if info.hostaddrs else host
    proxy = DelayProxy((upstream, port), rtt).start()
    stack.callback(proxy.stop)
    # hostaddr keeps `host` for TLS verification while the bytes go through the proxy
    return {"host": host, "hostaddr": "127.0.0.1", "port": proxy.port}


def _probe(dsn: str | None) -> None:
    """Connect once, so a bad DSN fails here in one line rather than inside the pools."""
    from pgmux.io.connect import connect
    from pgmux.io.conninfo import make_conninfo

    connect(make_conninfo(dsn)).close()


def _demo_runs(dsn: str | None, options: dict[str, Any], greenlets: int, connections: int,
               seconds: float, bar: Any) -> tuple[list[tuple[str, dict[str, float]]], dict]:
    from pgmux.client import Client

    multiplexed = Client(dsn, pipeline_size=connections, pinned_size=0,
                         application_name=APP_NAMES["multiplexed"], **options)
    naive_client = Client(dsn, pipeline_size=0, pinned_size=connections,
                          application_name=APP_NAMES["naive"], **options)
    naive = _NaivePool(naive_client, connections)
    try:
        multiplexed.start()
        naive.start()
        runs = [
            ("pgmux multiplexed", lambda i: multiplexed.fetchval(_SELECT, [i])),
            ("naive pool (1 query per round trip)", lambda i: naive.call(_SELECT, [i])),
        ]
        results = []
        for offset, (name, call) in enumerate(runs):
            bar.update(offset * seconds, f"{name[:18]:<18}")
            def advance(elapsed: float, base: int = offset) -> None:
                bar.update(base * seconds + elapsed)

            summary = _measure(call, greenlets, seconds, advance)
            results.append((name, summary))
        results[0][1]["connections"] = multiplexed.fetchval(
            _COUNT_BACKENDS, [APP_NAMES["multiplexed"]])
        results[1][1]["connections"] = naive.call(_COUNT_BACKENDS, [APP_NAMES["naive"]])
        return results, multiplexed.stats()
    finally:
        naive.stop()
        multiplexed.close()
        naive_client.close()


_SELECT = "SELECT $1::int"
_COUNT_BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"


class _NaivePool:
    """The classic pool: each connection runs one query per round trip for whoever asks.

    One greenlet per pinned session takes requests from a shared queue, so a query waits
    for a free connection, then for its own round trip (no pipelining, and no per-query
    session reset either: the baseline is a plain checkout/checkin pool).
    """

    def __init__(self, client: Any, connections: int):
        from gevent.queue import Queue

        self.client = client
        self.connections = connections
        self.requests: Any = Queue()
        self.workers: list[Any] = []

    def start(self) -> None:
        """Open every connection (each worker holds a session) before timing starts."""
        import gevent
        from gevent.event import AsyncResult

        ready = [AsyncResult() for _ in range(self.connections)]
        self.workers = [gevent.spawn(self._serve, flag) for flag in ready]
        for flag in ready:
            flag.get()

    def _serve(self, ready: Any) -> None:
        try:
            with self.client.session() as session:
                session.fetchval(_SELECT, [0])
                ready.set(True)
                while (request := self.requests.get()) is not None:
                    sql, params, result = request
                    try:
                        result.set(session.fetchval(sql, params))
                    except Exception as exc:
                        result.set_exception(exc)
        except Exception as exc:
            ready.set_exception(exc)

    def call(self, sql: str, params: list[Any]) -> Any:
        from gevent.event import AsyncResult

        result = AsyncResult()
        self.requests.put((sql, params, result))
        return result.get()

    def stop(self) -> None:
        import gevent

        for _ in self.workers:
            self.requests.put(None)
        gevent.joinall(self.workers, timeout=5)


def _measure(call: Callable[[int], Any], greenlets: int, seconds: float,
             tick: Callable[[float], None]) -> dict[str, float]:
    """Run ``call(i)`` from ``greenlets`` callers for ``seconds``; throughput and latency."""
    import gevent

    latencies: list[float] = []
    started = time.monotonic()
    deadline = started + seconds

    def caller(first: int) -> None:
        i = first
        while time.monotonic() < deadline:
            begun = time.perf_counter()
            value = call(i)
            latencies.append(time.perf_counter() - begun)
            if value != i:
                raise AssertionError(f"SELECT {i} returned {value!r}")
            i += greenlets

    jobs = [gevent.spawn(caller, n) for n in range(greenlets)]
    for _ in _until_done(jobs):
        tick(time.monotonic() - started)
    elapsed = time.monotonic() - started
    failed = next((job.exception for job in jobs if job.exception is not None), None)
    if failed is not None:
        raise failed
    latencies.sort()
    return {
        "qps": len(latencies) / elapsed,
        "p50": _percentile(latencies, 0.50) * 1000,
        "p99": _percentile(latencies, 0.99) * 1000,
        "queries": len(latencies),
    }


def _until_done(jobs: list[Any]) -> Iterator[None]:
    import gevent

    while not all(job.ready() for job in jobs):
        gevent.joinall(jobs, timeout=0.1)
        yield


def _percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


STAT_COLUMNS = ("units", "readables", "units_per_readable", "results_per_readable",
                "flush_calls_per_unit", "reconnects")


def _print_results(rows: list[tuple[str, dict[str, float]]], stats: dict, connections: int) -> None:
    print()
    print(f"{'':<36} {'queries/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'server conns':>13}")
    for name, row in rows:
        print(f"{name:<36} {row['qps']:>10.0f} {row['p50']:>8.1f} {row['p99']:>8.1f} "
              f"{row['connections']:>13}")
    fast, slow = rows[0][1]["qps"], rows[1][1]["qps"]
    ratio = f"{fast / slow:.1f}x" if slow else "n/a (the naive pool completed no query)"
    print(f"\nratio: pgmux multiplexed ran {ratio} the queries/s of the naive pool "
          f"on the same {connections} server connections.")
    print("\npgmux stats (multiplexed run), one line per pipeline connection:")
    print("  " + "  ".join(STAT_COLUMNS))
    for driver in stats["pipeline"]["drivers"]:
        cells = (f"{_fmt(driver.get(column)):>{len(column)}}" for column in STAT_COLUMNS)
        print("  " + "  ".join(cells))
    print("  units_per_readable: queries answered per socket read (1.0 = one wake-up per query; "
          "higher = batched)")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "-" if value is None else str(value)


if __name__ == "__main__":
    sys.exit(main())
