"""The sink: writing a batch exactly once, and reading what the sink holds.

Write side: :mod:`.write` (:func:`write_batch`) keys every row by its batch
(:mod:`.batch`: the batch key and per-partition statistics), writes through
:mod:`.spark_writer` (Spark formats, dynamic partition overwrite) or :mod:`.delta_writer`
(``deltalake``, delta-rs; in the ingestion run written by the reader tasks themselves,
:mod:`.fused`), cleans what a failed attempt left (:mod:`.staging`), reads the batch
back before any checkpoint moves (:mod:`.verify`) and counts it (:mod:`.statistics`; the row
predicates as SQL text are :mod:`.sql`). Read side: :mod:`.read` (the output schema,
:func:`read_sink`, :func:`read_batches`) and :mod:`.place` (the batch keys and record a sink
holds, where the driver reads them). Around both: :mod:`.checks` (before any claim),
:mod:`.source` (the source a sink records and refuses others than), :mod:`.failures`
(whether a failure is worth retrying) and :mod:`.storage` (object-store access).

The names load lazily: Spark executors import the writers from the shipped code, which need
not have the driver-only libraries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.sinks.batch import (
        BatchKey,
        PartitionWriteStats,
        batch_key,
        parse_batch_key,
    )
    from dagster_eventhub_ingest.ops.sinks.checks import (
        check_sink_format,
        check_sink_layout,
        check_sink_reachable,
        sink_location,
    )
    from dagster_eventhub_ingest.ops.sinks.failures import sink_failure_retryable
    from dagster_eventhub_ingest.ops.sinks.read import (
        output_columns,
        output_schema,
        read_batches,
        read_sink,
    )
    from dagster_eventhub_ingest.ops.sinks.source import SinkSource
    from dagster_eventhub_ingest.ops.sinks.write import WriteResult, write_batch

_HOMES = {
    "BatchKey": ".batch",
    "PartitionWriteStats": ".batch",
    "SinkSource": ".source",
    "WriteResult": ".write",
    "batch_key": ".batch",
    "check_sink_format": ".checks",
    "check_sink_layout": ".checks",
    "check_sink_reachable": ".checks",
    "output_columns": ".read",
    "output_schema": ".read",
    "parse_batch_key": ".batch",
    "read_batches": ".read",
    "read_sink": ".read",
    "sink_failure_retryable": ".failures",
    "sink_location": ".checks",
    "write_batch": ".write",
}

__all__ = [
    "BatchKey",
    "PartitionWriteStats",
    "SinkSource",
    "WriteResult",
    "batch_key",
    "check_sink_format",
    "check_sink_layout",
    "check_sink_reachable",
    "output_columns",
    "output_schema",
    "parse_batch_key",
    "read_batches",
    "read_sink",
    "sink_failure_retryable",
    "sink_location",
    "write_batch",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
