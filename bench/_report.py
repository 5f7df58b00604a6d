"""What every benchmark prints: its figures and ratios as readable lines, and with ``--json``
one JSON document on stdout (the readable lines then go to stderr) naming the command, the
machine (cores, load average at the start and at the end) and every figure.

The machine this project is measured on is shared: a figure without the load it was taken
under cannot be compared with another. docs/benchmarks.md records these documents.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["Report", "add_json_flag", "load_average", "report", "sigterm_unwinds"]


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (``uptime``), recorded with every figure."""
    return [round(x, 2) for x in os.getloadavg()]


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """The one ``--json`` flag every benchmark takes."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print every figure as one JSON document on stdout (readable lines on stderr)",
    )


class Report:
    """The figures of one benchmark run, printed at its end (:func:`report`)."""

    def __init__(self, script: str) -> None:
        self.command = " ".join(["uv run --frozen python", f"bench/{script}", *sys.argv[1:]])
        self.started = time.time()
        self.load_start = load_average()
        self.figures: dict[str, Any] = {}

    def add(self, name: str, value: Any) -> Any:
        """Record one figure (a number, a list, a dict of them); returns ``value``."""
        self.figures[name] = value
        return value

    def document(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "seconds": round(time.time() - self.started, 1),
            "machine": {
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "load_average_start": self.load_start,
                "load_average_end": load_average(),
            },
            "figures": self.figures,
        }


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM (``kill``, a CI timeout) ends the block as an exception would, so the services
    the script started (Azurite, the emulator, Spark's daemons) are stopped on the way out
    rather than left running; the handler before is restored after."""

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def report(script: str, as_json: bool) -> Iterator[Report]:
    """A :class:`Report` for ``bench/<script>``: with ``as_json``, what the block prints goes
    to stderr and the JSON document to stdout at the end; either way the cores and the load
    average at the start and the end are printed. SIGTERM unwinds the block
    (:func:`sigterm_unwinds`)."""
    rep = Report(script)
    out = sys.stdout
    with (
        sigterm_unwinds(),
        contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext(),
    ):
        print(f"cores {os.cpu_count()}, load average {rep.load_start}", flush=True)
        yield rep
        doc = rep.document()
        machine = doc["machine"]
        print(
            f"load average at the start {machine['load_average_start']}, "
            f"at the end {machine['load_average_end']}",
            flush=True,
        )
    if as_json:
        print(json.dumps(doc, indent=2), file=out, flush=True)
