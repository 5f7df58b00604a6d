"""``ehingest run``: one processor run outside Dagster (cron, Airflow, a shell).

Exit codes are :mod:`dagster_eventhub_ingest.cli.exit_codes`' (one table for ``run`` and
``status``), following the errors' ``retryable`` flag (the same flag Dagster's retry policy
reads): 0 every target partition reached its bound; 1 the run ended with partitions behind; 2
retrying cannot help; 3 retrying later may help; 130/143 stopped by SIGINT/SIGTERM, leases
released. The message says which.

Progress goes to stderr while the run works: a bar on a terminal, one line per update
otherwise (logs, CI). ``--json`` prints the run report as JSON on stdout (for Airflow, scripts),
``phases`` included: wall and CPU seconds of start-up, management calls, snapshot, claims,
planning, Spark start, read/write, verify, checkpoint, report (``-v`` logs these too) and the
stop of the Spark session and JVM the run started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

import click

from dagster_eventhub_ingest.cli.exit_codes import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    exit_code_for,
)
from dagster_eventhub_ingest.cli.options import config_option, partition_option
from dagster_eventhub_ingest.resources.config import ON_CHECKPOINT_AHEAD
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    RangeError,
    redact,
)

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.run.cancel import Cancellation

__all__ = ["ProgressPrinter", "format_report", "report_json", "run"]


def default_owner_id() -> str:
    """A unique owner id per process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def report_json(report: object) -> dict[str, Any]:
    """The run report as JSON-ready data (``ehingest run --json``)."""
    from dataclasses import asdict

    from dagster_eventhub_ingest.ops.run.report import RunReport

    assert isinstance(report, RunReport)

    def plain(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    data = plain(asdict(report))
    data["events"] = report.events
    data["bytes"] = report.bytes
    data["incomplete_partitions"] = report.incomplete_partitions
    if data.get("output_location"):
        data["output_location"] = redact(data["output_location"])
    return data


class ProgressPrinter:
    """Draws run progress on ``stream``: a bar redrawn in place on a terminal, lines otherwise.

    Plain lines are throttled to one per ``min_interval`` seconds (the phase changes and the
    final state always print), so a log is not flooded.
    """

    def __init__(self, stream: TextIO, tty: bool | None = None, min_interval: float = 5.0):
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.min_interval = min_interval
        self._last = float("-inf")
        self._drawn = False

    def __call__(self, progress: Any) -> None:
        import time

        total = max(progress.target_events, 1)
        frac = min(progress.landed_events / total, 1.0)
        if self.tty:
            width = 30
            bar = "#" * round(frac * width) + "-" * (width - round(frac * width))
            self.stream.write(f"\r[{bar}] {frac:4.0%} {progress.line()}"[:200].ljust(120))
            self._drawn = True
            if progress.phase == "finished":
                self.stream.write("\n")
                self._drawn = False
        else:
            now = time.monotonic()
            quiet = progress.phase in ("reading", "checkpointed")
            if quiet and now - self._last < self.min_interval:
                return
            self._last = now
            self.stream.write(f"progress {frac:.0%}: {progress.line()}\n")
        self.stream.flush()

    def close(self) -> None:
        """End a bar left on the line (e.g. when the run fails)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def format_report(report: object) -> str:
    """The run summary as a plain-text table (one row per target partition)."""
    from dagster_eventhub_ingest.ops.run.report import RunReport
    from dagster_eventhub_ingest.ops.text import format_cell, format_table

    assert isinstance(report, RunReport)
    header = (
        "partition",
        "events",
        "bytes",
        "range",
        "checkpoint",
        "bound",
        "lag",
        "lag_s",
        "read_by",
        "status",
    )
    rows = []
    for pid, r in report.partitions.items():
        span = (
            f"{r.first_sequence_number}..{r.last_sequence_number}"
            if r.first_sequence_number is not None
            else "-"
        )
        status = "up to date" if r.up_to_date else "BEHIND"
        if r.skipped_ranges:
            status += " skipped " + ",".join(f"{a}..{b}" for a, b in r.skipped_ranges)
        if r.checkpoint_reset:
            status += " (checkpoint reset)"
        rows.append(
            (
                pid,
                str(r.events),
                str(r.bytes),
                span,
                format_cell(r.checkpoint_sequence_number),
                format_cell(r.snapshot_end_sequence_number),
                format_cell(r.lag_events),
                format_cell(r.lag_seconds),
                ",".join(r.read_by) or "-",
                status,
            )
        )
    lines = format_table(header, rows)
    for pid, r in report.partitions.items():
        if r.checkpoint_reset:
            lines.append(f"partition {pid}: checkpoint {r.checkpoint_reset}")
    mode = "replay" if report.replay else "run"
    lines.append(
        f"{mode} {report.owner_id} on {report.hub}[{report.consumer_group}]: "
        f"{report.events} events, {report.bytes} bytes, {report.cycles} cycles -> "
        f"{report.output_location}; "
        + ("complete" if report.complete else f"INCOMPLETE: {report.incomplete_partitions}")
    )
    return "\n".join(lines)


def process_age_seconds() -> float:
    """Seconds since this process started, to ~10 ms.

    ``psutil.Process().create_time()`` adds the kernel's boot time, which Linux gives in whole
    seconds: a start-up of 0.3 s read as anything up to 1.3 s. On Linux the process's start
    (clock ticks since boot, ``/proc/self/stat``) is compared with the uptime
    (``/proc/uptime``, 10 ms) instead.
    """
    try:
        with open("/proc/self/stat") as f:
            # Field 22 (starttime); the command name (field 2) may hold spaces: split after it.
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())


@click.command("run")
@config_option
@click.option(
    "--owner",
    "owner_id",
    default=None,
    help="Owner id for leases (default: host-pid-random; must be unique per process).",
)
@partition_option("Target partition id (repeatable; default: every partition).")
@click.option(
    "--on-checkpoint-ahead",
    "on_checkpoint_ahead",
    type=click.Choice(ON_CHECKPOINT_AHEAD),
    default=None,
    help="Override the config's on_checkpoint_ahead for this run: reset_to_earliest restarts "
    "partitions whose checkpoint is ahead of the hub (re-created hub, edited checkpoint) from "
    "their earliest retained event, and records the reset.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run report as JSON on stdout (no table)."
)
@click.option(
    "--progress/--no-progress",
    default=True,
    help="Show progress on stderr: a bar on a terminal, plain lines otherwise (default on).",
)
def run(
    config_path: str,
    owner_id: str | None,
    partitions: tuple[str, ...],
    on_checkpoint_ahead: str | None,
    as_json: bool,
    progress: bool,
) -> None:
    """Bring the hub's partitions up to date in the sink, exactly once, then exit.

    Exit code 0 only if every target partition reached this run's bound; 2 when retrying
    cannot help, 3 when it may; 143/130 when SIGTERM/SIGINT stopped it (docs/run.md, "Exit
    codes"). A first SIGTERM or SIGINT stops the run cleanly: no further read, leases released
    with their intents kept, the Spark session and its JVM ended; a second one ends the process
    at once (the leases then expire).
    """
    import dataclasses

    from dagster_eventhub_ingest.cli.config import load_config
    from dagster_eventhub_ingest.ops.run.cancel import Cancellation
    from dagster_eventhub_ingest.ops.run.progress import PhaseClock
    from dagster_eventhub_ingest.resources.errors import RunCancelledError
    from dagster_eventhub_ingest.resources.spark.owned import OwnedSession

    cancel = Cancellation()
    with _stopped_by_signals(cancel):
        try:
            cfg = load_config(config_path)
            if on_checkpoint_ahead is not None:
                cfg = dataclasses.replace(
                    cfg,
                    ingest=cfg.ingest.replace(on_checkpoint_ahead=on_checkpoint_ahead),
                )
        except ConfigurationError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_CONFIG)
        from dagster_eventhub_ingest.ops.run.entry import run_ingestion

        clock = PhaseClock()
        # Interpreter start, imports and the config file: part of every scheduled run's cost.
        clock.add("startup", process_age_seconds(), time.process_time())
        owner = owner_id or default_owner_id()
        printer = ProgressPrinter(sys.stderr) if progress else None
        # The session starts only if there is something to read; it and its JVM end with the run.
        session = OwnedSession(cfg.spark_factory())
        # A stopped run that does not wind down in time (a Spark planner, a commit) is unblocked
        # by ending its session.
        cancel.on_force(lambda: session.close(keep_archive=False, wait=2.0))
        try:
            report = run_ingestion(
                cfg.ingest,
                None,
                owner_id=owner,
                partition_ids=list(partitions) or None,
                spark_factory=session.get,
                on_progress=printer,
                progress_interval=1.0 if printer is not None and printer.tty else 5.0,
                phases=clock,
                cancel=cancel,
            )
        except RunCancelledError as exc:
            _close(printer)
            click.echo(f"stopped: {exc}", err=True)
            sys.exit(exit_code_for(exc))
        except (ConfigurationError, RangeError) as exc:
            _close(printer)
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_CONFIG)
        except EventHubIngestError as exc:
            _close(printer)
            hint = "retrying later may help" if exc.retryable else "retrying cannot help"
            click.echo(f"error: {type(exc).__name__}: {exc} ({hint})", err=True)
            sys.exit(exit_code_for(exc))
        except Exception as exc:  # anything unexpected still leaves without a secret
            _close(printer)
            click.echo(f"error: {type(exc).__name__}: {redact(str(exc))[:2000]}", err=True)
            sys.exit(EXIT_FAILED)
        finally:
            # A stopped run must exit within seconds: its JVM does not finish writing a class-data
            # archive then.
            with clock.phase("spark_stop"):
                session.close(keep_archive=not cancel.cancelled)
        report.phases = clock.as_dict()
        _close(printer)
        if as_json:
            click.echo(json.dumps(report_json(report), indent=2))
        else:
            click.echo(format_report(report))
        sys.exit(EXIT_OK if report.complete else EXIT_INCOMPLETE)


@contextlib.contextmanager
def _stopped_by_signals(cancel: Cancellation) -> Iterator[None]:
    """In the block, SIGTERM and SIGINT cancel the run (this command owns its process); a second
    one ends the process at once. The previous handlers are put back after it."""
    kinds = (signal.SIGTERM, signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (an embedding caller)
        return
    previous = {sig: signal.getsignal(sig) for sig in kinds}

    def handler(signum: int, frame: object) -> None:
        if cancel.cancelled:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        cancel.cancel(f"{signal.Signals(signum).name} received", signum=signum)

    for sig in kinds:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _close(printer: ProgressPrinter | None) -> None:
    if printer is not None:
        printer.close()
