"""``ehingest run``: one processor run outside Dagster (cron, Airflow, a shell).

Exit codes: 0 every target partition reached its bound; 1 the run ended with partitions behind
(``run_timeout_seconds``, a lost lease); 2 bad configuration or arguments; 3 a runtime failure
(a service unreachable, data loss, the sink not writable). The message says which.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid

import click

from cli.options import config_option, partition_option
from resources.errors import ConfigurationError, EventHubIngestError, RangeError, redact

__all__ = ["format_report", "run"]

EXIT_OK, EXIT_INCOMPLETE, EXIT_CONFIG, EXIT_FAILED = 0, 1, 2, 3


def default_owner_id() -> str:
    """A unique owner id per process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def format_report(report: object) -> str:
    """The run summary as a plain-text table (one row per target partition)."""
    from ops.run import RunReport

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
    rows = [header]
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
                _fmt(r.checkpoint_sequence_number),
                _fmt(r.snapshot_end_sequence_number),
                _fmt(r.lag_events),
                _fmt(r.lag_seconds),
                ",".join(r.read_by) or "-",
                status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
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
    type=click.Choice(["fail", "reset_to_earliest"]),
    default=None,
    help="Override the config's on_checkpoint_ahead for this run: reset_to_earliest restarts "
    "partitions whose checkpoint is ahead of the hub (re-created hub, edited checkpoint) from "
    "their earliest retained event, and records the reset.",
)
def run(
    config_path: str,
    owner_id: str | None,
    partitions: tuple[str, ...],
    on_checkpoint_ahead: str | None,
) -> None:
    """Bring the hub's partitions up to date in the sink, exactly once, then exit.

    Exit code 0 only if every target partition reached this run's bound.
    """
    import dataclasses

    from cli.config import load_config

    try:
        cfg = load_config(config_path)
        if on_checkpoint_ahead is not None:
            cfg = dataclasses.replace(
                cfg,
                ingest=dataclasses.replace(cfg.ingest, on_checkpoint_ahead=on_checkpoint_ahead),
            )
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    from ops.run import run_ingestion

    owner = owner_id or default_owner_id()
    try:
        report = run_ingestion(
            cfg.ingest,
            None,
            owner_id=owner,
            partition_ids=list(partitions) or None,
            spark_factory=cfg.spark_factory(),
        )
    except (ConfigurationError, RangeError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    except EventHubIngestError as exc:
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    except Exception as exc:  # anything unexpected still leaves without a secret
        click.echo(f"error: {type(exc).__name__}: {redact(str(exc))[:2000]}", err=True)
        sys.exit(EXIT_FAILED)
    click.echo(format_report(report))
    sys.exit(EXIT_OK if report.complete else EXIT_INCOMPLETE)
