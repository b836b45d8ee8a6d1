"""The ``executors`` command: ``demo``, ``bench`` and ``supervise``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ("main",)

def _cmd_bench(args: argparse.Namespace) -> int:
    from . import _bench

    if args.render:
        if args.areas or args.quick:
            print("executors bench: --render takes no areas and no --quick; it re-renders "
                  "every results file", file=sys.stderr)
            return 2
        written = _bench.render_all()
        print(f"executors bench: rendered {len(written)} file(s) into "
              f"{_bench.DOCS_BENCH_DIR}", file=sys.stderr)
        return 0
    available = _bench.areas()
    if not available:
        print("executors bench: no benchmarks/ directory beside the package; "
              "run it from a source checkout", file=sys.stderr)
        return 2
    areas = args.areas or available
    unknown = [a for a in areas if a not in available]
    if unknown:
        print(f"executors bench: unknown area(s) {', '.join(unknown)}; "
              f"choose from {', '.join(available)}", file=sys.stderr)
        return 2
    # A quick run checks that the benchmarks work; its numbers must not replace a full run's.
    write = not args.quick or args.write
    runs = _bench.run_areas(areas, quick=args.quick, write=write)
    failed = [run.area for run in runs if run.returncode != 0]
    if write and not args.no_render:
        written = _bench.render_all()
        print(f"executors bench: results in {_bench.RESULTS_DIR}; {len(written)} docs file(s) "
              f"rendered into {_bench.DOCS_BENCH_DIR}", file=sys.stderr)
    if failed:
        print(f"executors bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    # The demo uses the integrations (pymongo, the bridge): only the command line may import them.
    try:
        from integrations import _demo
    except ImportError as exc:
        print(f"executors demo: {exc}; install the extras: pip install -e '.[test]'",
              file=sys.stderr)
        return 2
    try:
        config = _demo.DemoConfig(seconds=args.seconds, uri=args.uri, workers=args.workers,
                                  db_slots=args.db_slots, abandon_rate=args.abandon_rate,
                                  seed=args.seed)
    except ValueError as exc:
        print(f"executors demo: {exc}", file=sys.stderr)
        return 2
    live = False if args.plain else None
    try:
        report = _demo.run_demo(config, sys.stdout, live=live)
    except RuntimeError as exc:  # the embedded server could not start
        print(f"executors demo: {exc}", file=sys.stderr)
        return 2
    print(report.render(), flush=True)
    return 1 if report.leaks else 0


def _add_supervise(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import _coordinator_cli

    supervise = sub.add_parser(
        "supervise",
        help="run a process under test with profilers on its pid; stop them in order",
        description=_coordinator_cli.DESCRIPTION,
        epilog=_coordinator_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _coordinator_cli.add_arguments(supervise)
    supervise.set_defaults(func=_coordinator_cli.run, supervise_parser=supervise)


def _add_traverse(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    traverse = sub.add_parser(
        "traverse", help="traverse a tree stored in SQLite or PostgreSQL in batched transactions",
        description="Visit every node of the tree in the `nodes` table (see integrations."
        "sqlite_store.SCHEMA) in time-bounded transactions, with prefetching reads under a fair "
        "semaphore; a progress bar on stderr. STORE is sqlite:///path.db or postgresql://...")
    traverse.add_argument("store", metavar="STORE", help="sqlite:///path.db or postgresql://...")
    traverse.add_argument("--mode", choices=("strict", "relaxed", "any"), default="strict",
                          help="traversal order (default strict: pre-order by name)")
    traverse.add_argument("--budget", type=float, default=5.0,
                          help="seconds per transaction (default 5, FoundationDB's limit)")
    traverse.add_argument("--limit", type=int, default=8,
                          help="concurrent store operations (default 8)")
    traverse.add_argument("--window", type=int, default=16, help="listings read ahead")
    traverse.add_argument("--page-size", type=int, default=64, help="children per listing")
    traverse.add_argument("--print", action="store_true", dest="print_paths",
                          help="print each visited path on stdout")
    traverse.add_argument("--no-progress", action="store_true", help="no progress bar")

    def run(args: argparse.Namespace) -> int:
        import asyncio
        import os
        import time

        from executors.aio import Semaphore, Store, Traversal, TraversalStatistics, Visit

        url: str = args.store
        if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            print(f"executors traverse: STORE must be sqlite:///path.db or postgresql://..., "
                  f"got {url!r}", file=sys.stderr)
            return 2
        show = not args.no_progress
        started = time.monotonic()

        def progress(total: int, stats: TraversalStatistics, end: str = "") -> None:
            done = min(stats.visits, total) if total else stats.visits
            width = 30
            filled = int(width * done / total) if total else 0
            rate = stats.visits / max(time.monotonic() - started, 1e-9)
            print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} nodes  "
                  f"{stats.commits} txns  {stats.retries} retries  {rate:,.0f} nodes/s",
                  end=end, file=sys.stderr, flush=True)

        def visit(v: Visit) -> None:
            if args.print_paths:
                print("/" + "/".join(v.path) + ("" if v.node is not None else "  (gone)"))

        async def main() -> TraversalStatistics:
            if url.startswith("sqlite:///"):
                from integrations.sqlite_store import SQLiteStore

                store = SQLiteStore(url[len("sqlite:///"):])
                total = store.count()
                try:
                    return await go(store, total)
                finally:
                    store.close()
            from integrations.postgres_store import PostgresStore

            async with PostgresStore(url, readers=max(0, args.limit - 1)) as pg:
                return await go(pg, await pg.count())

        async def go(store: Store, total: int) -> TraversalStatistics:
            t = Traversal(store, visit, mode=args.mode, budget=args.budget,
                          page_size=args.page_size, window=args.window,
                          limiter=Semaphore(args.limit),
                          on_commit=(lambda s: progress(total, s)) if show else None)
            stats = await t.run()
            if show:
                progress(total, stats, end="\n")
            return stats

        if url.startswith("sqlite:///") and not os.path.exists(url[len("sqlite:///"):]):
            print(f"executors traverse: no database at {url[len('sqlite:///'):]!r}",
                  file=sys.stderr)
            return 2
        try:
            stats = asyncio.run(main())
        except (FileNotFoundError, ValueError) as exc:
            print(f"executors traverse: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("\nexecutors traverse: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `--print | head`: the reader has what it wanted
            sys.stderr.close()
            return 0
        print(f"executors traverse: {stats.visits:,} nodes in {stats.commits} transactions, "
              f"{stats.retries} retries, redo ratio {stats.redo_ratio:.3f}, "
              f"{stats.elapsed:.2f}s", file=sys.stderr)
        return 0

    traverse.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="executors", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="run benchmarks: ours beside the peers, same run")
    bench.add_argument("areas", nargs="*", help="areas to run (default: all)")
    bench.add_argument("--quick", action="store_true",
                       help="one round each, to check they work (writes no results unless --write)")
    bench.add_argument("--write", action="store_true",
                       help="with --quick: write the results files anyway")
    bench.add_argument("--render", action="store_true",
                       help="measure nothing: re-render the docs' benchmark pages and charts "
                       "from benchmarks/results/*.json")
    bench.add_argument("--no-render", action="store_true",
                       help="after measuring, leave the docs' benchmark pages as they are")
    bench.set_defaults(func=_cmd_bench)
    demo = sub.add_parser(
        "demo", help="run a threaded pymongo application on the executors' machinery; report",
        description="Serve simulated requests from worker threads through pymongo against an "
        "embedded nx-27017 server (or --uri): abandoned cursors are killed by a CursorReaper, a "
        "fair semaphore shared through the bridge caps database work for threads and an "
        "asyncio task, a channel feeds an asyncio consumer, a BackgroundService runs the "
        "periodic jobs. Prints a live view, then a report; exits 1 if anything leaked.")
    demo.add_argument("--seconds", type=float, default=20.0, help="how long to run (default 20)")
    demo.add_argument("--uri", default=None,
                      help="a MongoDB deployment to use instead of the embedded nx-27017 server "
                      "(the demo writes to, then drops, the database executors_demo)")
    demo.add_argument("--workers", type=int, default=8, help="worker threads (default 8)")
    demo.add_argument("--db-slots", type=int, default=4,
                      help="concurrent database operations allowed (default 4)")
    demo.add_argument("--abandon-rate", type=float, default=0.3,
                      help="share of requests that abandon their cursor (default 0.3)")
    demo.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable run")
    demo.add_argument("--plain", action="store_true",
                      help="plain progress lines even on a terminal")
    demo.set_defaults(func=_cmd_demo)
    _add_supervise(sub)
    _add_traverse(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
