"""Idempotent sinks: write one batch (partition + sequence range per Event Hub partition) once.

Every row gets a batch key column ``eh_batch = "<partition>-<start>-<end>"`` (the intent it
belongs to; ``"<partition>-<start>-<end>-g<generation>"`` once the hub was re-created and reset,
see :func:`batch_key`) and the output is partitioned by it (after the user's ``partition_by``
columns).
Writing a batch replaces exactly the directories / Delta partitions of its keys, atomically:

* Spark formats (``parquet``, ``orc``, ``json``, ``delta`` on a cluster, ...): dynamic partition
  overwrite. Tasks write into a hidden staging directory; the job commit swaps in the batch's
  partition directories. A crash leaves only staging files nobody reads; rewriting the same
  intent replaces the batch directories, so its rows are in the output exactly once. Staging
  left behind (``.spark-staging-<job uuid>``, named by Spark) is told apart from a concurrent
  run's by what it holds: only directories of this batch's keys, which no other live owner
  writes. It is removed before the batch is written again and after a failed write
  (:func:`clean_batch_staging`).
* ``deltalake`` (delta-rs, no Spark jars): each Spark task writes its own Parquet files into the
  table directory (a Python data source writer, ``DeltaBatchWriter``; nothing travels to the
  driver but each task's commit message, naming its files),
  then the driver commits them with ``create_write_transaction(mode="overwrite",
  partition_filters=[("eh_batch", "in", keys)])``: the batch's old files are removed and the new
  ones added in one Delta transaction. Files of a crashed attempt are never in the log. The
  ingestion run skips the DataFrame for it: its reader tasks write what they read with the same
  writer (:mod:`dagster_eventhub_ingest.ops.sinks.fused`), and the batch is checked and counted
  by the same :func:`finish_batch`.

Nothing is silently lost on a cluster: a local path that executors on other machines cannot
share is refused before anything is claimed (:func:`check_sink_reachable`), the Delta commit
checks that every file it adds exists with the rows its task reported, and :func:`write_batch`
reads back the batch's row count and compares it with the rows it wrote before returning (so
before any checkpoint moves). For a batch of many partitions in a columnar format the same
read-back returns the batch's statistics per partition (only the body bytes are observed during
the write): what the sink holds, at a cost that does not grow with the partitions.

See docs/sinks.md for the trade-offs and the measurements.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from dagster_eventhub_ingest.ops.sinks.batch import (
    BATCH_COLUMN,
    SOURCE_COLUMN,
    PartitionWriteStats,
    batch_key,
)
from dagster_eventhub_ingest.ops.sinks.checks import (
    check_sink_for_session,
    check_sink_layout,
    sink_location,
)
from dagster_eventhub_ingest.ops.sinks.delta_writer import write_deltalake
from dagster_eventhub_ingest.ops.sinks.failures import (
    failure_cause,
    sink_error,
)
from dagster_eventhub_ingest.ops.sinks.read import (
    read_batches,
)
from dagster_eventhub_ingest.ops.sinks.source import SinkSource
from dagster_eventhub_ingest.ops.sinks.spark_writer import write_spark
from dagster_eventhub_ingest.ops.sinks.sql import in_ranges, key_column, source_column
from dagster_eventhub_ingest.ops.sinks.staging import clean_batch_staging, wait_for_running_tasks
from dagster_eventhub_ingest.ops.sinks.statistics import (
    StatsMethod,
    choose_stats_method,
    observed_columns,
    row_from_readers,
    row_from_split,
    stat_columns,
    stats_from_row,
)
from dagster_eventhub_ingest.ops.sinks.verify import verify_written
from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.sink import DELTALAKE_FORMAT, SinkSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from dagster_eventhub_ingest.resources.eventhubs_source.stats import SubRangeKey, SubRangeStats

__all__ = [
    "BatchTarget",
    "WriteResult",
    "batch_target",
    "check_partition_by",
    "finish_batch",
    "write_batch",
    "write_failure",
]

logger = logging.getLogger(__name__)


def _batch_keys(
    ranges: Mapping[str, SeqRange],
    generations: Mapping[str, int] | None,
    source: str | None = None,
) -> dict[str, str]:
    """Partition id -> the batch key of its range (with its generation and source, if any)."""
    gens = generations or {}
    return {p: batch_key(p, s, e, gens.get(p), source) for p, (s, e) in ranges.items()}


@dataclass(frozen=True)
class WriteResult:
    """The outcome of :func:`write_batch`: where it went and per-partition statistics."""

    output_location: str
    format: str
    partitions: dict[str, PartitionWriteStats] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """Events written in total."""
        return sum(p.events for p in self.partitions.values())

    @property
    def bytes(self) -> int:
        """Body bytes written in total."""
        return sum(p.bytes for p in self.partitions.values())

    def metadata(self) -> dict[str, Any]:
        """Plain JSON-able values for logs and Dagster metadata (no secrets in a sink)."""
        return {
            "output_location": self.output_location,
            "format": self.format,
            "events": self.events,
            "bytes": self.bytes,
            "partitions": {
                pid: {
                    k: (v.isoformat() if isinstance(v, datetime) else v)
                    for k, v in asdict(stats).items()
                }
                for pid, stats in self.partitions.items()
            },
        }


def _normalise_ranges(ranges: Mapping[str, SeqRange]) -> dict[str, SeqRange]:
    out: dict[str, SeqRange] = {}
    for pid, bounds in ranges.items():
        start, end = int(bounds[0]), int(bounds[1])
        if end < start:
            raise ConfigurationError(
                f"ranges: partition {pid!r} ends at {end} before its start {start}"
            )
        out[str(pid)] = SeqRange(start, end)
    if not out:
        raise ConfigurationError("ranges: empty; a batch names at least one partition range")
    return out


class BatchTarget(NamedTuple):
    """One batch as a writer sees it: its ranges, their batch keys, the source its rows name
    (in a sink several sources share, else None) and where it goes."""

    ranges: dict[str, SeqRange]
    keys: dict[str, str]
    shared_by: SinkSource | None
    location: str


def batch_target(
    spark: SparkSession,
    sink: SinkSettings,
    ranges: Mapping[str, SeqRange],
    generations: Mapping[str, int] | None,
    source: SinkSource | None,
) -> BatchTarget:
    """The batch of ``ranges`` in ``sink``, checked before anything is written (the sink's
    layout and its reach from the session's executors; a shared sink needs the source)."""
    check_sink_layout(sink)
    rng = _normalise_ranges(ranges)
    if sink.sources == "many" and source is None:
        raise ConfigurationError(
            "write_batch: a sink with sources: many needs the events' source (source=...): its "
            "batch keys and rows name it"
        )
    shared_by = source if sink.sources == "many" else None
    keys = _batch_keys(
        rng,
        {str(p): int(g) for p, g in (generations or {}).items()},
        None if shared_by is None else shared_by.tag,
    )
    check_sink_for_session(sink, spark)
    return BatchTarget(rng, keys, shared_by, sink_location(sink, spark))


def check_partition_by(sink: SinkSettings, columns: list[str]) -> None:
    """Refuse a ``partition_by`` naming a column the batch does not have."""
    unknown = [c for c in sink.partition_by if c not in columns]
    if unknown:
        raise ConfigurationError(
            f"sink partition_by: unknown column(s) {unknown}; valid: {', '.join(columns)}"
        )


def write_failure(exc: Exception, sink: SinkSettings, target: BatchTarget) -> Exception:
    """What a failed write of ``target`` raises: the project's code missing on the executors,
    or a :class:`SinkError` naming the sink and the cause (``retryable`` from it)."""
    from dagster_eventhub_ingest.resources.spark.code_shipping import missing_module_error

    missing_module = missing_module_error(exc)
    if missing_module is not None:
        return missing_module
    return sink_error(
        f"sink {sink.format} {'path' if sink.path else 'table'} {target.location!r}: cannot "
        f"write batch {sorted(target.keys.values())}: {failure_cause(exc)}; check "
        "that the location exists and is writable by the Spark executors (and the format "
        "is available in the session)",
        exc,
    )


def finish_batch(
    spark: SparkSession,
    sink: SinkSettings,
    target: BatchTarget,
    method: StatsMethod,
    written: int,
    *,
    metrics_row: Mapping[str, Any],
    reader_row: Mapping[str, Any] | None,
    schema: StructType,
) -> WriteResult:
    """After a batch's write: read back its row count (raise unless it is ``written``) and its
    statistics by ``method`` (from ``metrics_row`` observed during the write, ``reader_row``
    from the readers, or the sink). ``schema``: the events' columns as written."""
    from dagster_eventhub_ingest.ops.run.progress import phase

    rng, keys, _, location = target
    with phase("verify"):
        read_back = verify_written(
            spark,
            sink,
            list(keys.values()),
            written,
            location,
            with_stats=method == "split",
            schema=schema,
        )
    if method == "observe":
        stats = stats_from_row(metrics_row, rng, keys)
    elif reader_row is not None:
        stats = stats_from_row(reader_row, rng, keys)
    elif method == "split":
        stats = stats_from_row(
            row_from_split(metrics_row, read_back, rng, keys, location), rng, keys
        )
    else:
        batches = read_batches(spark, sink, list(keys.values()), schema=schema)
        row = batches.agg(*stat_columns(rng)).first()
        stats = stats_from_row(row.asDict() if row is not None else {}, rng, keys)
    result = WriteResult(output_location=location, format=sink.format, partitions=stats)
    logger.info(
        "wrote %d events (%d body bytes) to %s %s, statistics by %s: %s",
        result.events,
        result.bytes,
        sink.format,
        location,
        method,
        ", ".join(
            f"partition {s.partition_id} [{s.first_sequence_number}, {s.last_sequence_number}]"
            for s in stats.values()
        ),
    )
    return result


# The batch's predicates, key and aggregates are SQL text, parsed once each (``F.expr``). Built
# with the Column API, every ``col``, ``lit``, ``when``, ``&`` and ``alias`` is a round trip to
# the JVM: for a batch of 32 partitions ~27,000 of them, 2-4 s of driver time on every write
# before its job starts (~900 and 0.4-0.6 s this way, most of it in ``observe``).


def write_batch(
    df: DataFrame,
    sink: SinkSettings,
    ranges: Mapping[str, SeqRange],
    *,
    stats_method: StatsMethod | None = None,
    generations: Mapping[str, int] | None = None,
    read_stats: Callable[[], Mapping[SubRangeKey, SubRangeStats]] | None = None,
    source: SinkSource | None = None,
) -> WriteResult:
    """Write the events of ``ranges`` in ``df`` to ``sink`` so a rewrite replaces, never adds.

    Args:
        df: Events with the ``eventhubs`` schema (e.g. ``read_eventhubs(spark, plan)``).
        sink: Format, path or table, partition columns.
        ranges: The batch's intents: partition id -> inclusive ``(start, end)``. Rows outside
            them are never written, and make the call fail (for ``deltalake`` before the
            commit, for Spark formats after the write).
        stats_method: where the statistics come from (docs/sinks.md has the measurements).
            ``split`` (the default for a batch of 4 or more partitions in a columnar format:
            parquet, orc, delta, iceberg, hudi, unless the output is partitioned by one of
            the columns it reads back): body bytes are observed during the write,
            everything else (events, sequence bounds, last offset, enqueued times) is read
            back per batch key from what the sink holds, in the verification pass that reads
            the row count anyway, from the small columns only; ``observe`` (the default
            otherwise): all of it observed during the write, 2 + 7 x P aggregates per row;
            ``readback``: all of it aggregated over the batch read back, bodies included;
            ``reader`` (the default with ``read_stats``): what the readers said they read,
            nothing observed during the write, the sink's row count checked against the
            ranges' sizes.
        generations: partition id -> hub generation for partitions of a re-created hub
            (part of their batch keys, see :func:`batch_key`); others keep the plain key.
        read_stats: after the write, what each reader of ``df`` read, by sub-range
            (``dagster_eventhub_ingest.resources.eventhubs_source.stats``: the ingestion run's
            accumulator). ``df`` must then read exactly ``ranges``, every event
            (``on_data_loss='fail'``): the sink must hold as many rows as the ranges have sequence
            numbers. The readers' statistics are used where their sub-ranges tile ``ranges``
            exactly; otherwise they are read back (``readback``).
        source: where the events come from; required by a sink several sources share
            (``sources: many``): its batch keys end with the source's tag and its rows carry
            the source (column ``eh_source``). Ignored otherwise.

    Returns:
        Per-partition statistics (events, body bytes, first/last sequence number, the offset of
        the last event, first/last enqueued time) and the output location.

    Raises:
        ConfigurationError: bad sink settings or ranges.
        SinkError: the sink cannot be written (the message names it and the cause;
            ``retryable`` says whether the cause may pass, :func:`sink_failure_retryable`).
    """
    from pyspark.sql import Observation

    target = batch_target(df.sparkSession, sink, ranges, generations, source)
    rng, keys, shared_by, location = target
    missing = [c for c in ("partition", "sequenceNumber", "offset", "body") if c not in df.columns]
    if missing:
        raise ConfigurationError(
            f"write_batch: the DataFrame lacks column(s) {missing}; it must have the eventhubs "
            "source schema"
        )
    check_partition_by(sink, df.columns)
    method = choose_stats_method(sink, len(rng), stats_method, by_readers=read_stats is not None)
    observation = None
    observed = df
    if method != "reader":
        # The count of rows outside the ranges (never written) and what the method observes
        # are aggregated while the write consumes the DataFrame; nothing is collected on the
        # driver. The readers' own statistics need none of it (the DataFrame reads exactly
        # the ranges: every event, each once, or the read fails).
        observation = Observation(f"ehwrite_{uuid.uuid4().hex[:12]}")
        observed = df.observe(observation, *observed_columns(rng, method))
    if shared_by is not None:
        observed = observed.withColumn(SOURCE_COLUMN, source_column(rng, shared_by))
    try:
        if sink.format == DELTALAKE_FORMAT:
            # The Delta writer drops key-less rows itself and refuses to commit if there are
            # any, so a wrong DataFrame never becomes visible.
            write_deltalake(
                observed.withColumn(BATCH_COLUMN, key_column(rng, keys)), sink, list(keys.values())
            )
        else:
            clean_batch_staging(sink, list(keys.values()))  # a crashed attempt's, first
            keyed = observed.where(in_ranges(rng)).withColumn(BATCH_COLUMN, key_column(rng, keys))
            try:
                write_spark(keyed, sink)
            except BaseException:
                # When Spark's abort could not; and a task of the failed job that was still
                # being stopped may write into the staging after the abort removed it: wait
                # for the job's tasks to end, then look until it is quiet.
                wait_for_running_tasks(df.sparkSession, timeout=10.0)
                clean_batch_staging(sink, list(keys.values()), settle_seconds=3.0)
                raise
    except (SinkError, ConfigurationError):
        raise
    except Exception as exc:
        raise write_failure(exc, sink, target) from exc
    reader_row = None
    if observation is None:
        assert read_stats is not None
        metrics_row: dict[str, Any] = {}
        written = sum(end - start + 1 for start, end in rng.values())
        reader_row = row_from_readers(read_stats(), rng)
        if reader_row is None:
            method = "readback"
    else:
        metrics_row = observation.get
        outside = int(metrics_row.get("outside") or 0)
        if outside:
            raise SinkError(
                f"sink {location!r}: the DataFrame holds {outside} event(s) outside the batch "
                f"ranges {rng}; they were not written. Read exactly the planned ranges "
                "(read_eventhubs(spark, plan)) and pass plan.ranges_dict() as ranges"
            )
        written = int(metrics_row.get("inside") or 0)
    return finish_batch(
        df.sparkSession,
        sink,
        target,
        method,
        written,
        metrics_row=metrics_row,
        reader_row=reader_row,
        schema=df.schema,
    )


# --------------------------------------------------------------------------------------------
# Spark formats: dynamic partition overwrite on the batch key
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Delta via delta-rs: Parquet parts written by the tasks, one transaction on the driver
# --------------------------------------------------------------------------------------------
