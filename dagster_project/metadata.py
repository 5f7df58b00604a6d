"""What a materialization of the ingestion asset says: Dagster's standard keys beside ours.

Standard keys (Dagster's ``TableMetadataSet`` / ``UriMetadataSet``) let the UI and other tools
read a batch without knowing this project: ``dagster/row_count`` (the batch's rows),
``dagster/partition_row_count`` (the rows the sink holds for the partition: every event landed
so far, counted at each checkpoint; absent when unknown), ``dagster/uri`` (the sink's path or
URI), ``dagster/table_name`` (table sinks) and ``dagster/column_schema`` (the fixed
``eventhubs`` schema plus the batch-key column). The project's own keys sit under
``eventhub/`` (:func:`key`) and never repeat a standard one.

Numbers are ints only where a plot across every partition's batches means something (rows and
bytes per batch); sequence numbers and checkpoints, which only compare within a partition, are
text. Lag is not here: measured when the batch was written it would stay frozen; the lag check
and the summary observation carry it as measured.

Which partitions get a materialization, and with what, is :func:`materialization_plan`'s rule
(docs/dagster.md, "What a materialization means").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import cache
from typing import Any

import dagster as dg

from dagster_eventhub_ingest.ops.run.report import PartitionReport
from dagster_eventhub_ingest.resources.errors import redact
from dagster_eventhub_ingest.resources.sink import SinkSources

__all__ = [
    "BACKFILL_TAG",
    "NAMESPACE",
    "column_schema",
    "definition_metadata",
    "key",
    "label_ids",
    "materialization_plan",
    "partition_metadata",
    "round_seconds",
]

#: Tag Dagster puts on every run of a backfill.
BACKFILL_TAG = "dagster/backfill"

#: Prefix of the project's own metadata keys (Dagster's standard keys are ``dagster/``).
NAMESPACE = "eventhub/"


def key(name: str) -> str:
    """The project's metadata key ``name``: ``eventhub/<name>``."""
    return NAMESPACE + name


@cache
def column_schema(sources: SinkSources = "one") -> dg.TableSchema:
    """The sink's columns (``dagster_eventhub_ingest.ops.sinks.read.output_columns``): the
    ``eventhubs`` source schema, ``eh_source`` in a sink several sources share, the ``eh_batch``
    key column; Spark SQL type names, without importing pyspark (every run reports them, one
    with nothing to read too)."""
    from dagster_eventhub_ingest.ops.sinks.batch import BATCH_COLUMN, SOURCE_COLUMN
    from dagster_eventhub_ingest.ops.sinks.read import output_columns

    described = {
        BATCH_COLUMN: "Batch key partition-first-last (e.g. 0-100-199): rewriting a batch "
        "replaces it.",
        SOURCE_COLUMN: "The row's source: namespace/hub/consumer group.",
    }
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name, sql, description=described.get(name))
            for name, sql in output_columns(sources)
        ]
    )


def round_seconds(value: float | None) -> int | None:
    """Seconds as a whole number (a lag of 248.257711 s reads 248)."""
    return None if value is None else round(value)


def label_ids(ids: Sequence[str]) -> str:
    """A list of partition ids that cannot be read as a count: ``partition ids 0, 3`` / ``none``."""
    return f"partition ids {', '.join(ids)}" if ids else "none"


def definition_metadata(sink_path: str | None, sink_table: str | None) -> dict[str, Any]:
    """Static metadata of the asset definition (shown on its Overview before any run).

    No ``dagster/column_schema`` here although the schema is fixed: when both the definition
    and the latest materialization carry one, Dagster's UI (1.13) merges the two keyed by
    lower-cased name and shows the merged names lower-cased (``sequencenumber``,
    ``enqueuedtime``). Every materialization carries it, so the Overview shows it as declared.
    """
    md: dict[str, Any] = {}
    if sink_table:
        md["dagster/table_name"] = sink_table
    elif sink_path:
        md["dagster/uri"] = redact(sink_path)
    return md


def partition_metadata(
    report: PartitionReport,
    *,
    output_location: str | None,
    replay: bool,
    sink_table: str | None = None,
    sink_sources: SinkSources = "one",
) -> dict[str, dg.MetadataValue]:
    """Metadata of one partition's materialization (the keys are in the module docstring).

    A partition this run landed no batch in (a peer read it, or nothing was new) gets no row or
    byte counts: its plots show one point per batch, not one per run.
    """
    md: dict[str, dg.MetadataValue] = {}
    wrote = report.events > 0 or report.bytes > 0
    if wrote:
        md["dagster/row_count"] = dg.MetadataValue.int(report.events)
    if report.landed_total is not None:
        # Dagster's meaning: the rows of the partition (the sink's), not of this batch.
        md["dagster/partition_row_count"] = dg.MetadataValue.int(report.landed_total)
    if wrote:
        md[key("bytes")] = dg.MetadataValue.int(report.bytes)
    if output_location:
        if sink_table:
            md["dagster/table_name"] = dg.MetadataValue.text(sink_table)
        else:
            md["dagster/uri"] = dg.MetadataValue.text(redact(output_location))
    md["dagster/column_schema"] = dg.MetadataValue.table_schema(column_schema(sink_sources))
    if report.first_sequence_number is not None and report.last_sequence_number is not None:
        md[key("sequence_range")] = dg.MetadataValue.text(
            f"{report.first_sequence_number}..{report.last_sequence_number}"
        )
    if report.first_enqueued_time is not None:
        md[key("first_enqueued_time")] = dg.MetadataValue.timestamp(
            _aware(report.first_enqueued_time)
        )
    if report.last_enqueued_time is not None:
        md[key("last_enqueued_time")] = dg.MetadataValue.timestamp(
            _aware(report.last_enqueued_time)
        )
    if report.checkpoint_sequence_number is not None:
        md[key("checkpoint")] = dg.MetadataValue.text(
            f"sequence number {report.checkpoint_sequence_number}"
        )
    if not wrote:
        md[key("batch")] = dg.MetadataValue.text(
            "none: up to date when this run finished"
            + (f" (read by {', '.join(report.read_by)})" if report.read_by else "")
        )
    md[key("read_by")] = dg.MetadataValue.text(", ".join(report.read_by) or "(nothing new to read)")
    if report.skipped_ranges:
        md[key("skipped_ranges")] = dg.MetadataValue.text(
            ", ".join(f"{a}..{b}" for a, b in report.skipped_ranges)
        )
    if replay:
        md[key("replay")] = dg.MetadataValue.text("run config replay (checkpoint not moved)")
    elif report.replayed_intents:
        md[key("replay")] = dg.MetadataValue.text(
            "; ".join(
                f"pending range {start}..{end} left by {owner or 'unknown'}"
                for start, end, owner in report.replayed_intents
            )
        )
    return md


def materialization_plan(
    targets: Sequence[str],
    reports: Mapping[str, PartitionReport],
    *,
    complete: bool,
    explicit_request: bool,
    never_materialized: set[str],
) -> list[str]:
    """Which of ``targets`` this run reports as materialized.

    Only partitions that are up to date qualify. Of those, a run reports:

    * every partition it landed a batch in (one data point per batch);
    * every other one too when a user asked for these partitions (a backfill, a launchpad or
      CLI run: ``explicit_request``), so the backfill shows each requested partition done;
    * a partition Dagster has never seen materialized (an empty or caught-up hub partition is
      up to date, not missing).

    Scheduled runs (K per tick, all keys each) thus add one point per batch, not K per key.
    """
    out = []
    for pid in targets:
        rep = reports.get(pid)
        if rep is None or not (rep.up_to_date or complete):
            continue
        wrote = rep.events > 0 or rep.bytes > 0 or bool(rep.skipped_ranges)
        if wrote or explicit_request or pid in never_materialized:
            out.append(pid)
    return out


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=timezone.utc)
