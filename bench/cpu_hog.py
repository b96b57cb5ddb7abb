"""Run a command several times while every core is kept busy: is the suite green under load?

    python bench/cpu_hog.py --repeat 5 -- make test

starts one busy process per core (``--workers``, default: all of them), runs the command
``--repeat`` times in a row, prints each run's exit status and duration, and ends with a line
such as ``5/5 green under a CPU hog of 2 workers``; the exit status is 0 only when every run
passed. ``--seconds N`` without a command just keeps the cores busy for N seconds (to run the
suite by hand in another terminal). The hog processes are stopped however this script ends.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence


def burn(stop: multiprocessing.synchronize.Event) -> None:
    """Hash in a loop until told to stop: pure CPU, no memory growth, no I/O."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the hog ends
    block = os.urandom(1 << 16)
    while not stop.is_set():
        for _ in range(200):
            block = hashlib.sha256(block).digest() * 2048


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="busy processes (default: one per core)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of the command (default 1)")
    parser.add_argument("--seconds", type=float, default=0.0, help="without a command: how long to burn")
    opts = parser.parse_args(args)
    if not command and opts.seconds <= 0:
        parser.error("give a command after -- or --seconds")
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=burn, args=(stop,), daemon=True) for _ in range(opts.workers)]
    for hog in hogs:
        hog.start()
    passed = 0
    try:
        if not command:
            time.sleep(opts.seconds)
            return 0
        for run in range(1, opts.repeat + 1):
            started = time.monotonic()
            code = run_once(command)
            if code is None:
                print(f"cpu_hog: interrupted in run {run}/{opts.repeat} ({passed} green before it)", flush=True)
                return 130
            passed += code == 0
            print(f"cpu_hog: run {run}/{opts.repeat}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
        print(f"cpu_hog: {passed}/{opts.repeat} green under a CPU hog of {opts.workers} workers", flush=True)
        return 0 if passed == opts.repeat else 1
    except KeyboardInterrupt:
        print("cpu_hog: interrupted", flush=True)
        return 130
    finally:
        stop.set()
        for hog in hogs:
            hog.join(timeout=5)
            if hog.is_alive():
                hog.kill()
                hog.join()


def run_once(command: Sequence[str]) -> int | None:
    """The command's exit status, or None after a Ctrl-C: the command runs in its own process
    group, which gets the SIGINT (pytest then ends its run and reaps what it started), then
    SIGKILL if it is still there a minute later, so nothing it started outlives this script."""
    child = subprocess.Popen(list(command), start_new_session=True)
    try:
        return child.wait()
    except KeyboardInterrupt:
        os.killpg(child.pid, signal.SIGINT)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        return None


if __name__ == "__main__":
    sys.exit(main())
