"""``ehingest status``: per partition owner, checkpoint, last enqueued, lag, pending intent."""

from __future__ import annotations

import json
import sys

import click

from dagster_eventhub_ingest.cli.options import config_option, partition_option
from dagster_eventhub_ingest.ops.text import format_cell, format_table
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    RangeError,
)

__all__ = ["status"]


@click.command("status")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@partition_option("Only these partition ids.")
def status(config_path: str, as_json: bool, partitions: tuple[str, ...]) -> None:
    """Show each partition's owner, checkpoint, last enqueued event, lag and pending intent.

    Exit codes are ``ehingest run``'s (docs/run.md): 0 printed, 2 retrying cannot help (a
    corrupt blob, bad configuration), 3 retrying later may help (a service unreachable).
    """
    from dagster_eventhub_ingest.cli.config import load_config
    from dagster_eventhub_ingest.cli.exit_codes import exit_code_for
    from dagster_eventhub_ingest.ops.status import partition_status
    from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient
    from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

    try:
        cfg = load_config(config_path)
        ingest = cfg.ingest
        store = PartitionStore(
            AzureBlobBackend.from_settings(ingest.store), ingest.eventhub.hub_ref()
        )
        rows = partition_status(
            store,
            EventHubClient(ingest.eventhub),
            lease_expiry_seconds=ingest.lease_expiry_seconds,
            partition_ids=list(partitions) or None,
            lag_seconds=ingest.report_lag_seconds,
        )
    except (ConfigurationError, RangeError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exit_code_for(exc))
    except EventHubIngestError as exc:
        hint = "retrying later may help" if exc.retryable else "retrying cannot help"
        click.echo(f"error: {type(exc).__name__}: {exc} ({hint})", err=True)
        sys.exit(exit_code_for(exc))
    if as_json:
        click.echo(json.dumps([r.to_json() for r in rows], indent=2))
        return
    header = (
        "partition",
        "owner",
        "checkpoint",
        "last_enqueued",
        "lag",
        "lag_s",
        "intent",
        "flag",
    )
    table: list[tuple[str, ...]] = []
    for r in rows:
        owner = r.owner or "-"
        if r.owner and r.lease_expired:
            owner += " (expired)"
        intent = f"{r.intent[0]}..{r.intent[1]} by {r.intent_owner}" if r.intent else "-"
        table.append(
            (
                r.partition_id,
                owner,
                format_cell(r.checkpoint),
                format_cell(r.last_enqueued_sequence_number),
                format_cell(r.lag_events),
                format_cell(r.lag_seconds),
                intent,
                "AHEAD OF HUB" if r.problem else "-",
            )
        )
    for line in format_table(header, table):
        click.echo(line)
    flagged = [r for r in rows if r.problem]
    for r in flagged:
        click.echo(f"partition {r.partition_id}: {r.problem}")
    if flagged:
        ids = " ".join(f"--partition {r.partition_id}" for r in flagged)
        click.echo(
            "runs refuse these partitions (reading on would skip new events). To restart them "
            f"from their earliest retained event: ehingest run --config {config_path} {ids} "
            "--on-checkpoint-ahead reset_to_earliest"
        )
