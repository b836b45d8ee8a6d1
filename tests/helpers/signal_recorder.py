"""Test child for the coordinator: logs every signal it receives with a time.monotonic() stamp.

Usage: signal_recorder.py LOG [options]. Each line of LOG is `EVENT ... STAMP`:
`start PID PPID PGID`, `argv JSON`, `status SIGBLK SIGIGN STDIN`, `signal N`, `cleanup-done`,
`exit CODE`, `die N` (about to die by signal N). STAMP is CLOCK_MONOTONIC, comparable across
processes, so the order of events in different children can be asserted after a run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("log")
parser.add_argument("--ignore", action="append", default=[],
                    help="record this signal (INT, TERM, HUP) but keep running")
parser.add_argument("--cleanup", type=float, default=None,
                    help="on a stop signal, take this long, write LOG.done, exit 0")
parser.add_argument("--exit-after", type=float, default=None, help="exit on its own after this")
parser.add_argument("--code", type=int, default=0, help="exit code for --exit-after")
parser.add_argument("--ready-line", default="ready", help="stdout line printed once started")
parser.add_argument("--ready-delay", type=float, default=0.0)
parser.add_argument("--flood", type=int, default=0, help="bytes written to stdout first")
parser.add_argument("--self-stop", action="store_true", help="SIGSTOP itself once ready")
parser.add_argument("--stderr", default=None, help="a line printed to stderr at start")
parser.add_argument("extra", nargs="*", help="recorded in the argv line")
args = parser.parse_args()

fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def record(text: str) -> None:
    os.write(fd, f"{text} {time.monotonic():.6f}\n".encode())


class Stop(Exception):
    pass


ignored = {signal.Signals["SIG" + name].value for name in args.ignore}


def handler(signum: int, frame: object) -> None:
    record(f"signal {signum}")
    if signum in ignored or signum == signal.SIGCONT:
        return
    if args.cleanup is not None:
        raise Stop
    # Default behaviour, like perf and strace: die by the signal received.
    record(f"die {signum}")
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# Read before installing handlers: a handler would hide an inherited SIG_IGN.
status = {}
with open("/proc/self/status") as f:
    for line in f:
        key, _, value = line.partition(":")
        status[key] = value.strip()

for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCONT, signal.SIGUSR1):
    signal.signal(sig, handler)

record(f"start {os.getpid()} {os.getppid()} {os.getpgid(0)}")
record("argv " + json.dumps(sys.argv[1:]))
record(f"status {status['SigBlk']} {status['SigIgn']} {os.readlink('/proc/self/fd/0')}")

try:
    if args.flood:
        block = b"x" * 1023 + b"\n"
        for _ in range(args.flood // 1024):
            sys.stdout.buffer.write(block)
        sys.stdout.buffer.flush()
    if args.stderr:
        print(args.stderr, file=sys.stderr, flush=True)
    if args.ready_delay:
        time.sleep(args.ready_delay)
    print(args.ready_line, flush=True)
    if args.self_stop:
        os.kill(os.getpid(), signal.SIGSTOP)
    if args.exit_after is not None:
        time.sleep(args.exit_after)
        record(f"exit {args.code}")
        sys.exit(args.code)
    while True:
        time.sleep(3600)
except Stop:
    time.sleep(args.cleanup or 0)
    with open(args.log + ".done", "w") as f:
        f.write("done\n")
    record("cleanup-done")
    record("exit 0")
    sys.exit(0)
