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
  table directory (a Python data source writer, ``_DeltaBatchWriter``; nothing travels to the
  driver but each task's commit message, naming its files),
  then the driver commits them with ``create_write_transaction(mode="overwrite",
  partition_filters=[("eh_batch", "in", keys)])``: the batch's old files are removed and the new
  ones added in one Delta transaction. Files of a crashed attempt are never in the log.

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

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from dagster_eventhub_ingest.ops.sink_checks import (
    BATCH_COLUMN,
    DELTALAKE_FORMAT,
    SOURCE_COLUMN,
    _delta_uri,
    _is_local_path,
    check_sink_layout,
    check_sink_reachable,
    sink_location,
)
from dagster_eventhub_ingest.ops.sink_errors import _cause, _sink_error, sink_failure_retryable
from dagster_eventhub_ingest.ops.sink_read import (
    _BUILTIN_FORMATS,
    _delta_arrow_schema,
    _nothing_there,
    delta_output_schema,
    output_schema,
    read_batches,
    read_sink,
)
from dagster_eventhub_ingest.ops.sink_source import SinkSource
from dagster_eventhub_ingest.ops.stats import PartitionWriteStats, batch_key
from dagster_eventhub_ingest.resources.errors import ConfigurationError, SinkError, redact
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.spark_source import register_python_source

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from dagster_eventhub_ingest.resources.spark_source._stats import SubRangeKey, SubRangeStats

__all__ = [
    "BATCH_COLUMN",
    "DELTALAKE_FORMAT",
    "PartitionWriteStats",
    "WriteResult",
    "batch_in_sink",
    "batch_key",
    "check_sink_for_session",
    "check_sink_format",
    "check_sink_layout",
    "check_sink_reachable",
    "clean_batch_staging",
    "delta_output_schema",
    "output_schema",
    "read_batches",
    "read_sink",
    "sink_failure_retryable",
    "sink_location",
    "write_batch",
]

logger = logging.getLogger(__name__)


StatsMethod = Literal["split", "observe", "readback", "reader"]

#: Formats read back column by column: their verification pass can return the statistics too,
#: reading only the small columns (see :func:`write_batch`, ``stats_method="split"``).
_COLUMNAR_FORMATS = frozenset({"parquet", "orc", "delta", "iceberg", "hudi"})

#: From this many partitions in a batch ``split`` costs less than ``observe``. A warm JVM spends
#: the same per event at 4 (9.7 vs 10.3 us) and half at 32 (41.5 vs 19.7 us)
#: (bench/write_partitions.py); a JVM that has not run the write yet (a scheduled run's) pays
#: ``observe``'s 2 + 7 x P aggregates again in analysis, code generation and compilation: at 4
#: partitions, 100k events in-process with the JVM up, 5.71 -> 5.27 s (median of 5 alternated
#: pairs, CPU 9.0 -> 8.1 s), warm and at 1M the same within noise; at 2 partitions ``split``
#: loses (3.72 -> 3.95 s). docs/sinks.md.
_SPLIT_FROM_PARTITIONS = 4


#: The columns ``split`` reads back (with the batch key).
_READ_BACK_COLUMNS = ("sequenceNumber", "offset", "enqueuedTime")


def _stats_method(
    sink: SinkSettings,
    partitions: int,
    requested: StatsMethod | None = None,
    *,
    by_readers: bool = False,
) -> StatsMethod:
    """The method :func:`write_batch` uses for a batch of ``partitions`` partitions.

    ``requested``, or by default ``reader`` when the readers tell what they read
    (``by_readers``), else ``split`` for a batch of many partitions where the read-back can
    skip the bodies. ``reader`` needs the readers' statistics. ``split`` becomes ``observe``
    where its read-back cannot serve: ``deltalake`` (its verification reads the Delta log, not
    the rows) and an output partitioned by a read-back column (partition directories come
    back as strings).
    """
    if requested == "reader" and not by_readers:
        raise ConfigurationError("write_batch: stats_method='reader' needs read_stats")
    method = requested or (
        "reader"
        if by_readers
        else "split"
        if sink.format in _COLUMNAR_FORMATS and partitions >= _SPLIT_FROM_PARTITIONS
        else "observe"
    )
    if method == "split" and (
        sink.format == DELTALAKE_FORMAT or set(sink.partition_by) & set(_READ_BACK_COLUMNS)
    ):
        return "observe"
    return method


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


def check_sink_for_session(sink: SinkSettings, spark: SparkSession) -> None:
    """:func:`check_sink_reachable` for the executors of ``spark`` (classic or Connect)."""
    from dagster_eventhub_ingest.resources.spark_kind import describe_engine, session_is_local

    if sink.path is None or sink.shared or not _is_local_path(sink.path):
        return  # no need to ask the session anything
    check_sink_reachable(sink, local=session_is_local(spark), engine=describe_engine(spark))


def batch_in_sink(
    sink: SinkSettings, key: str, spark: Callable[[], SparkSession] | None = None
) -> bool | None:
    """Whether a batch with this key is committed in the sink; None when it cannot be told.

    A batch directory appears only at the job's commit, a ``deltalake`` batch only in the
    log (``dagster_eventhub_ingest.ops.sink_place``). Tables and paths outside this machine
    are asked through ``spark`` (returns the session); without it they are not looked at.
    """
    from dagster_eventhub_ingest.ops.sink_place import sink_place

    def no_session() -> SparkSession:
        raise LookupError("no session")

    try:
        keys = sink_place(sink, spark or no_session).batch_keys()
    except Exception:  # unreadable, or no session: cannot tell
        logger.debug("could not list the batches of %s", sink_location(sink), exc_info=True)
        return None
    return None if keys is None else key in keys


def check_sink_format(sink: SinkSettings, spark: SparkSession | Callable[[], SparkSession]) -> None:
    """Refuse a Spark format the session has no data source for, before anything is claimed.

    A fully qualified class name (or ``delta``, ``avro``, ... without their package) would
    otherwise fail at the first write, after claims and intents. The probe is engine-neutral
    (classic sessions and Spark Connect alike, no JVM access): reading the format from a path
    that does not exist fails with ``DATA_SOURCE_NOT_FOUND`` only when there is no such source;
    any other failure (the path, a write-only source, missing options) means it exists.
    ``spark``: the session, or a callable starting it (only called when a probe is needed).

    Raises:
        ConfigurationError: no data source of that name; names it and what is valid.
    """
    if sink.format == DELTALAKE_FORMAT or sink.format in _BUILTIN_FORMATS:
        return
    session = spark if not callable(spark) else spark()
    probe = f"/ehingest-format-probe-{uuid.uuid4().hex}/does-not-exist"
    try:
        session.read.format(sink.format).load(probe)
    except Exception as exc:
        if not _source_missing(exc):
            return
        raise ConfigurationError(
            f"sink format {sink.format!r}: the Spark session has no data source of that name "
            f"({_cause(exc)[:300]}); nothing was claimed or written. Use parquet, orc or json, "
            "delta/avro/iceberg/hudi with their package in the session (spark.jars.packages), "
            f"{DELTALAKE_FORMAT} (delta-rs, no jars), or the fully qualified class name of a "
            "data source on the session's classpath (spark.jars)."
        ) from None


def _source_missing(exc: BaseException) -> bool:
    error_class = None
    get = getattr(exc, "getErrorClass", None) or getattr(exc, "getCondition", None)
    if callable(get):
        try:
            error_class = get()
        except Exception:
            error_class = None
    if error_class == "DATA_SOURCE_NOT_FOUND":
        return True
    text = str(exc)
    return "DATA_SOURCE_NOT_FOUND" in text or "Failed to find the data source" in text


STAGING_PREFIX = ".spark-staging-"


def clean_batch_staging(
    sink: SinkSettings, keys: list[str], *, settle_seconds: float = 0.0
) -> list[str]:
    """Remove Spark staging directories at the sink path that hold only these batch keys.

    A dynamic-overwrite write stages its files under ``<path>/.spark-staging-<job uuid>/``
    (Spark picks the uuid); a driver killed mid-write, or a failed commit whose abort could not
    delete, leaves it behind. A staging directory is this batch's when every ``eh_batch=``
    directory in it is one of ``keys``: the keys are the batch's intents, which only their
    current owner writes, so a concurrent run's staging (other keys) is never touched, nor one
    too new to hold any batch directory yet. Best effort: never raises (a leftover is only
    litter, nobody reads it). Returns the removed paths.

    ``settle_seconds``: after a failed write, tasks of the failed job may still be finishing
    and write into a staging directory Spark's abort already removed; look again every 0.5 s
    until a look finds nothing of this batch's, at most this long.
    """
    removed = _clean_batch_staging_once(sink, keys)
    deadline = time.monotonic() + settle_seconds
    quiet = 0
    while settle_seconds > 0 and quiet < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        again = _clean_batch_staging_once(sink, keys)
        quiet = 0 if again else quiet + 1
        removed += again
    return removed


def _wait_for_running_tasks(spark: Any, timeout: float) -> None:
    """Until a classic session has no active stage (the failed job's tasks were stopped), at
    most ``timeout`` seconds; Spark Connect cannot tell, so this returns at once there."""
    from dagster_eventhub_ingest.resources.spark_kind import is_connect_session

    if is_connect_session(spark):
        return
    try:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + timeout
        while tracker.getActiveStageIds() and time.monotonic() < deadline:
            time.sleep(0.2)
    except Exception:  # best effort, as the cleanup itself
        logger.debug("could not wait for the failed job's tasks", exc_info=True)


def _clean_batch_staging_once(sink: SinkSettings, keys: list[str]) -> list[str]:
    if sink.path is None or sink.format == DELTALAKE_FORMAT:
        return []
    from pyarrow import fs as pafs

    from dagster_eventhub_ingest.resources.sink_storage import arrow_filesystem

    wanted = {f"{BATCH_COLUMN}={k}" for k in keys}
    removed: list[str] = []
    try:
        filesystem, root = arrow_filesystem(_delta_uri(sink.path), sink.storage_options)
        entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        for entry in entries:
            if entry.type != pafs.FileType.Directory or not entry.base_name.startswith(
                STAGING_PREFIX
            ):
                continue
            inside = filesystem.get_file_info(pafs.FileSelector(entry.path, recursive=True))
            batches = {
                e.base_name
                for e in inside
                if e.type == pafs.FileType.Directory and e.base_name.startswith(f"{BATCH_COLUMN}=")
            }
            if batches and batches <= wanted:
                filesystem.delete_dir(entry.path)
                removed.append(entry.path)
                logger.info(
                    "removed staging %s left by an earlier attempt of batch(es) %s",
                    entry.path,
                    sorted(b.split("=", 1)[1] for b in batches),
                )
    except Exception as exc:  # cannot list or delete: leave it, nobody reads staging
        logger.warning(
            "could not clean Spark staging under %s: %s", sink_location(sink), _cause(exc)
        )
    return removed


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


# The batch's predicates, key and aggregates are SQL text, parsed once each (``F.expr``). Built
# with the Column API, every ``col``, ``lit``, ``when``, ``&`` and ``alias`` is a round trip to
# the JVM: for a batch of 32 partitions ~27,000 of them, 2-4 s of driver time on every write
# before its job starts (~900 and 0.4-0.6 s this way, most of it in ``observe``).

#: A value written into SQL text as it is: nothing the parser would unescape (``\\``), end
#: (``'``) or substitute (``${...}``, ``spark.sql.variable.substitute``).
_PLAIN_SQL_STRING = re.compile(r"[\w.:@+=/ -]*", re.ASCII)


def _sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal that reads back as ``value`` in any session.

    A partition id can hold anything its hub allows. Escaping a quote or a backslash with
    backslashes reads differently under ``spark.sql.parser.escapedStringLiterals``, and
    ``${...}`` is substituted in any SQL text; so a value with any character outside a small
    plain set goes in as its UTF-8 bytes (a hex literal, cast back to a string).
    """
    if _PLAIN_SQL_STRING.fullmatch(value):
        return f"'{value}'"
    return f"CAST(X'{value.encode().hex()}' AS STRING)"


def _in_range_sql(pid: str, start: int, end: int) -> str:
    """SQL: whether a row belongs to partition ``pid``'s range ``[start, end]``."""
    return (
        f"(`partition` = {_sql_string(pid)}"
        f" AND (`sequenceNumber` >= {int(start)} AND `sequenceNumber` <= {int(end)}))"
    )


def _in_ranges_sql(ranges: Mapping[str, SeqRange]) -> str:
    """SQL: whether a row belongs to one of the ranges."""
    return " OR ".join(_in_range_sql(pid, start, end) for pid, (start, end) in ranges.items())


def _in_ranges(ranges: Mapping[str, SeqRange]) -> Column:
    """Whether a row belongs to one of the ranges."""
    from pyspark.sql import functions as F

    return F.expr(_in_ranges_sql(ranges))


def _key_column(ranges: Mapping[str, SeqRange], keys: Mapping[str, str]) -> Column:
    """The batch key of each row; null for a row outside every range."""
    from pyspark.sql import functions as F

    cases = " ".join(
        f"WHEN {_in_range_sql(pid, start, end)} THEN {_sql_string(keys[pid])}"
        for pid, (start, end) in ranges.items()
    )
    return F.expr(f"CASE {cases} END")


def _source_column(ranges: Mapping[str, SeqRange], source: SinkSource) -> Column:
    """The source of each row (null outside the ranges, as the batch key: the column has the
    nullability :func:`output_schema` declares)."""
    from pyspark.sql import functions as F

    return F.expr(f"CASE WHEN {_in_ranges_sql(ranges)} THEN {_sql_string(source.name)} END")


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
            (``dagster_eventhub_ingest.resources.spark_source._stats``: the ingestion run's
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

    from dagster_eventhub_ingest.resources.code_shipping import missing_module_error

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
    check_sink_for_session(sink, df.sparkSession)
    missing = [c for c in ("partition", "sequenceNumber", "offset", "body") if c not in df.columns]
    if missing:
        raise ConfigurationError(
            f"write_batch: the DataFrame lacks column(s) {missing}; it must have the eventhubs "
            "source schema"
        )
    unknown = [c for c in sink.partition_by if c not in df.columns]
    if unknown:
        raise ConfigurationError(
            f"sink partition_by: unknown column(s) {unknown}; valid: {', '.join(df.columns)}"
        )
    location = sink_location(sink, df.sparkSession)
    method = _stats_method(sink, len(rng), stats_method, by_readers=read_stats is not None)
    observation = None
    observed = df
    if method != "reader":
        # The count of rows outside the ranges (never written) and what the method observes
        # are aggregated while the write consumes the DataFrame; nothing is collected on the
        # driver. The readers' own statistics need none of it (the DataFrame reads exactly
        # the ranges: every event, each once, or the read fails).
        observation = Observation(f"ehwrite_{uuid.uuid4().hex[:12]}")
        observed = df.observe(observation, *_observed_columns(rng, method))
    if shared_by is not None:
        observed = observed.withColumn(SOURCE_COLUMN, _source_column(rng, shared_by))
    try:
        if sink.format == DELTALAKE_FORMAT:
            # The Delta writer drops key-less rows itself and refuses to commit if there are
            # any, so a wrong DataFrame never becomes visible.
            _write_deltalake(
                observed.withColumn(BATCH_COLUMN, _key_column(rng, keys)), sink, list(keys.values())
            )
        else:
            clean_batch_staging(sink, list(keys.values()))  # a crashed attempt's, first
            keyed = observed.where(_in_ranges(rng)).withColumn(BATCH_COLUMN, _key_column(rng, keys))
            try:
                _write_spark(keyed, sink)
            except BaseException:
                # When Spark's abort could not; and a task of the failed job that was still
                # being stopped may write into the staging after the abort removed it: wait
                # for the job's tasks to end, then look until it is quiet.
                _wait_for_running_tasks(df.sparkSession, timeout=10.0)
                clean_batch_staging(sink, list(keys.values()), settle_seconds=3.0)
                raise
    except (SinkError, ConfigurationError):
        raise
    except Exception as exc:
        missing_module = missing_module_error(exc)
        if missing_module is not None:
            raise missing_module from exc
        raise _sink_error(
            f"sink {sink.format} {'path' if sink.path else 'table'} {location!r}: cannot write "
            f"batch {sorted(keys.values())}: {_cause(exc)}; check "
            "that the location exists and is writable by the Spark executors (and the format "
            "is available in the session)",
            exc,
        ) from exc
    reader_row = None
    if observation is None:
        assert read_stats is not None
        metrics_row: dict[str, Any] = {}
        written = sum(end - start + 1 for start, end in rng.values())
        reader_row = _reader_row(read_stats(), rng)
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
    from dagster_eventhub_ingest.ops.progress import phase

    with phase("verify"):
        read_back = _verify_written(
            df.sparkSession,
            sink,
            list(keys.values()),
            written,
            location,
            with_stats=method == "split",
            schema=df.schema,
        )
    if method == "observe":
        stats = _stats_from_row(metrics_row, rng, keys)
    elif reader_row is not None:
        stats = _stats_from_row(reader_row, rng, keys)
    elif method == "split":
        stats = _stats_from_row(_split_row(metrics_row, read_back, rng, keys, location), rng, keys)
    else:
        batches = read_batches(df.sparkSession, sink, list(keys.values()), schema=df.schema)
        row = batches.agg(*_stat_columns(rng)).first()
        stats = _stats_from_row(row.asDict() if row is not None else {}, rng, keys)
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


def _verify_written(
    spark: SparkSession,
    sink: SinkSettings,
    keys: list[str],
    written: int,
    location: str,
    *,
    with_stats: bool = False,
    schema: StructType | None = None,
) -> dict[str, dict[str, Any]]:
    """Read back the batch's row count; raise unless it equals the rows the write consumed.

    This runs before the caller moves any checkpoint: output that executors wrote where the
    driver (or the next reader) cannot see it is an error, never a silent loss. With
    ``with_stats`` (Spark formats) the same pass returns, per batch key found, the statistics
    :func:`_read_back_stats` reads; otherwise an empty dict. ``schema``: what was written (see
    :func:`read_batches`).
    """
    stats: dict[str, dict[str, Any]] = {}
    try:
        if sink.format == DELTALAKE_FORMAT:
            found = _delta_batch_rows(sink, keys)
        elif with_stats:
            stats = _read_back_stats(spark, sink, keys, schema)
            found = sum(int(s["n"]) for s in stats.values())
        else:
            found = read_batches(spark, sink, keys, schema=schema).count()
    except (SinkError, ConfigurationError):
        raise
    except Exception as exc:
        if written == 0 and _nothing_there(exc):
            return stats  # nothing written, nothing there
        raise _sink_error(
            f"sink {sink.format} {location!r}: the batch {sorted(keys)} was written but cannot "
            f"be read back to verify it: {_cause(exc)}; no checkpoint moved. Check that the "
            "driver and every executor see the same location",
            exc,
        ) from exc
    if found != written:
        raise SinkError(
            f"sink {sink.format} {location!r}: verification failed for batch {sorted(keys)}: "
            f"{written} event(s) were written but {found} are readable there; no checkpoint "
            "moved. The executors probably wrote to storage the driver does not share (a local "
            "path on a cluster): use a shared location (abfss://..., a table)"
        )
    return stats


def _read_back_stats(
    spark: SparkSession, sink: SinkSettings, keys: list[str], schema: StructType | None = None
) -> dict[str, dict[str, Any]]:
    """Per batch key: rows, sequence bounds, last offset, first/last enqueued time in the sink.

    One grouped aggregation over the batch's rows (partition pruning on ``eh_batch``) that
    reads only the sequence number, offset and enqueued time columns, never the bodies: in a
    columnar format a small fraction of the batch's bytes, and a few aggregates per row once,
    where observing them during the write updates 7 per partition for every row.
    """
    from pyspark.sql import functions as F

    # The source's types, whatever the format's reader inferred (a no-op for Parquet and ORC).
    # No F.lit: pyspark's lit imports pandas (0.3-0.4 s of the driver's CPU on a cold run).
    seq = F.col("sequenceNumber").cast("long")
    when = F.col("enqueuedTime").cast("timestamp")
    offset = F.col("offset").cast("string")
    # The last offset as a number where it is one (Event Hubs' offsets are decimal positions):
    # an aggregation whose buffers are all fixed-width is hashed, where one string among them
    # makes Spark sort every row read back, twice (partial and final). An offset that does not
    # come back from a long unchanged (not decimal, a leading zero, too large) is null here and
    # read again as the string it is.
    as_long = offset.try_cast("long")
    batches = read_batches(spark, sink, keys, schema=schema)
    rows = (
        batches.groupBy(BATCH_COLUMN)
        .agg(
            F.count("*").alias("n"),
            F.min(seq).alias("fs"),
            F.max(seq).alias("ls"),
            F.max_by(F.when(as_long.cast("string") == offset, as_long), seq).alias("lo"),
            F.min(when).alias("ft"),
            F.max(when).alias("lt"),
        )
        .collect()
    )
    stats = {row[BATCH_COLUMN]: row.asDict() for row in rows}
    textual = []  # every key here has rows: a null is an offset that is not a plain number
    for key, found in stats.items():
        if found["lo"] is None:
            textual.append(key)
        else:
            found["lo"] = str(found["lo"])
    if textual:
        for row in (
            batches.where(F.col(BATCH_COLUMN).isin(textual))
            .groupBy(BATCH_COLUMN)
            .agg(F.max_by(offset, seq).alias("lo"))
            .collect()
        ):
            stats[row[BATCH_COLUMN]]["lo"] = row["lo"]
    return stats


def _reader_row(
    found: Mapping[SubRangeKey, SubRangeStats], ranges: Mapping[str, SeqRange]
) -> dict[str, Any] | None:
    """The row :func:`_stats_from_row` reads, from what the readers said they read; None (the
    statistics are then read back) unless their sub-ranges tile ``ranges`` exactly, each with
    every event of it."""
    from dagster_eventhub_ingest.resources.spark_source._stats import partition_totals

    totals = partition_totals(found, ranges)
    if totals is None:
        logger.warning(
            "the readers' statistics do not cover the batch %s (%d sub-range(s) reported): "
            "reading them back from the sink",
            dict(ranges),
            len(found),
        )
        return None
    row: dict[str, Any] = {}
    for i, pid in enumerate(ranges):
        for name, value in zip(_STAT_SQL, totals[pid], strict=True):
            row[f"{name}{i}"] = value
    return row


def _split_row(
    observed: Mapping[str, Any],
    read_back: Mapping[str, Mapping[str, Any]],
    ranges: Mapping[str, SeqRange],
    keys: Mapping[str, str],
    location: str,
) -> dict[str, Any]:
    """The row :func:`_stats_from_row` reads, from observed bytes and read-back statistics.

    Rows of a batch key outside that key's range were not put there by this write (a
    hand-edited or foreign directory): an error, before any checkpoint moves.
    """
    row: dict[str, Any] = {}
    for i, (pid, (start, end)) in enumerate(ranges.items()):
        found = read_back.get(keys[pid], {})
        first, last = found.get("fs"), found.get("ls")
        if (first is not None and first < start) or (last is not None and last > end):
            raise SinkError(
                f"sink {location!r}: batch {keys[pid]} holds sequence numbers [{first}, "
                f"{last}] outside its range [{start}, {end}]; no checkpoint moved. Something "
                "other than this pipeline wrote into the batch's directory: remove it and run "
                "again (the batch is rewritten)"
            )
        row[f"n{i}"] = found.get("n")
        row[f"b{i}"] = observed.get(f"b{i}")
        for name in ("fs", "ls", "lo", "ft", "lt"):
            row[f"{name}{i}"] = found.get(name)
    return row


def _delta_batch_rows(sink: SinkSettings, keys: list[str]) -> int:
    """Rows the Delta log holds for ``keys`` (from its add actions, nothing read)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    assert sink.path is not None
    delta = DeltaTable(_delta_uri(sink.path), storage_options=dict(sink.storage_options) or None)
    table = pa.table(delta.get_add_actions(flatten=True))
    column = f"partition.{BATCH_COLUMN}"
    if table.num_rows == 0:
        return 0
    total = 0
    for key, rows in zip(
        table.column(column).to_pylist(), table.column("num_records").to_pylist(), strict=True
    ):
        if key in keys:
            total += int(rows or 0)
    return total


# --------------------------------------------------------------------------------------------
# Spark formats: dynamic partition overwrite on the batch key
# --------------------------------------------------------------------------------------------


#: The statistics of one partition, by name prefix (``n0``, ``b0``, ...): SQL aggregates of
#: the rows where ``{p}`` (the row is in the partition's range) holds.
_STAT_SQL = {
    "n": "sum(CASE WHEN {p} THEN 1 ELSE 0 END)",
    "b": "sum(CASE WHEN {p} THEN length(`body`) END)",
    "fs": "min(CASE WHEN {p} THEN `sequenceNumber` END)",
    "ls": "max(CASE WHEN {p} THEN `sequenceNumber` END)",
    "lo": "max_by(CASE WHEN {p} THEN `offset` END, CASE WHEN {p} THEN `sequenceNumber` END)",
    "ft": "min(CASE WHEN {p} THEN `enqueuedTime` END)",
    "lt": "max(CASE WHEN {p} THEN `enqueuedTime` END)",
}


def _stat_columns(
    ranges: Mapping[str, SeqRange], names: tuple[str, ...] = tuple(_STAT_SQL)
) -> list[Column]:
    """The statistics ``names`` of every partition, ``<name><i>`` for the i-th range."""
    from pyspark.sql import functions as F

    cols: list[Column] = []
    for i, (pid, (start, end)) in enumerate(ranges.items()):
        in_range = _in_range_sql(pid, start, end)
        cols += [F.expr(f"{_STAT_SQL[n].format(p=in_range)} AS `{n}{i}`") for n in names]
    return cols


def _observed_columns(ranges: Mapping[str, SeqRange], method: StatsMethod) -> list[Column]:
    """What :func:`write_batch` observes while it writes: the rows outside and inside the
    ranges, and the statistics ``method`` does not read back (all, body bytes, or none)."""
    from pyspark.sql import functions as F

    in_ranges = _in_ranges_sql(ranges)
    cols = [
        F.expr(f"sum(CASE WHEN {in_ranges} THEN 0 ELSE 1 END) AS `outside`"),
        F.expr(f"sum(CASE WHEN {in_ranges} THEN 1 ELSE 0 END) AS `inside`"),
    ]
    if method == "observe":
        cols += _stat_columns(ranges)
    elif method == "split":
        # Body bytes, the one statistic split observes (the rest is read back).
        cols += _stat_columns(ranges, ("b",))
    return cols


def _stats_from_row(
    row: Mapping[str, Any], ranges: Mapping[str, SeqRange], keys: Mapping[str, str]
) -> dict[str, PartitionWriteStats]:
    out: dict[str, PartitionWriteStats] = {}
    for i, (pid, (start, end)) in enumerate(ranges.items()):
        out[pid] = PartitionWriteStats(
            partition_id=pid,
            start=start,
            end=end,
            batch_key=keys[pid],
            events=int(row.get(f"n{i}") or 0),
            bytes=int(row.get(f"b{i}") or 0),
            first_sequence_number=_opt_int(row.get(f"fs{i}")),
            last_sequence_number=_opt_int(row.get(f"ls{i}")),
            last_offset=row.get(f"lo{i}"),
            first_enqueued_time=_utc(row.get(f"ft{i}")),
            last_enqueued_time=_utc(row.get(f"lt{i}")),
        )
    return out


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime) and value.tzinfo is None:
        # Spark hands back naive local times; the local sessions run in UTC (see spark_session).
        return value.astimezone(timezone.utc)
    return value


#: Columns a Parquet path sink writes without dictionary encoding: each event has its own
#: value, so parquet-mr's dictionary only costs a hash insert per value until it gives up on
#: the page. ``body`` gives up within ~1,000 rows and is left to Parquet (repeated bodies do
#: compress into a dictionary). The files are the same size; JVM CPU of a plain Parquet write
#: of 300k 1 KB events 6.5-6.8 -> 5.1-5.3 us per event (docs/run.md, session 9).
_PLAIN_PARQUET_COLUMNS = ("sequenceNumber", "offset", "enqueuedTime")
#: Columns a Parquet path sink writes without min/max statistics: an event's body is an opaque
#: payload no query prunes row groups or pages by, and parquet-mr keeps the whole smallest and
#: largest value of each column chunk in the file's footer (the truncation length is unbounded
#: by default): two bodies per row group, up to the hub's 1 MB event each. Comparing every body
#: with both was ~0.4 us of JVM CPU per 1 KB event of a plain Parquet write (docs/sinks.md).
_NO_STATISTICS_PARQUET_COLUMNS = ("body",)


def _format_options(sink: SinkSettings) -> dict[str, str]:
    """Write options of the sink's format (parquet-mr reads per-column ones as ``key#column``)."""
    if sink.format != "parquet":
        return {}
    return {
        **{f"parquet.enable.dictionary#{column}": "false" for column in _PLAIN_PARQUET_COLUMNS},
        **{
            f"parquet.column.statistics.enabled#{column}": "false"
            for column in _NO_STATISTICS_PARQUET_COLUMNS
        },
    }


def _write_spark(out: DataFrame, sink: SinkSettings) -> None:
    partition_cols = [*sink.partition_by, BATCH_COLUMN]
    if sink.path is not None:
        (
            out.write.format(sink.format)
            .mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .options(**_format_options(sink))
            .partitionBy(*partition_cols)
            .save(sink.path)
        )
    else:
        assert sink.table is not None
        _write_table(out, sink.table, sink.format, partition_cols)


def _write_table(df: DataFrame, table: str, fmt: str, partition_cols: list[str]) -> None:
    from pyspark.errors import AnalysisException

    spark = df.sparkSession
    if not spark.catalog.tableExists(table):
        try:
            df.write.format(fmt).partitionBy(*partition_cols).saveAsTable(table)
            return
        except AnalysisException as exc:
            # A peer run created it between the check and the write: insert like any later run.
            if "ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise
    existing = [c.name for c in spark.catalog.listColumns(table)]
    if BATCH_COLUMN not in existing:
        raise SinkError(
            f"sink table {table!r} exists without the {BATCH_COLUMN!r} partition column; "
            "it was not created by this writer, so a batch cannot be replaced idempotently. "
            "Write to a new table"
        )
    # insertInto is positional: align with the table's column order.
    conf_key = "spark.sql.sources.partitionOverwriteMode"
    previous = spark.conf.get(conf_key, None)
    spark.conf.set(conf_key, "dynamic")
    try:
        df.select(*existing).write.insertInto(table, overwrite=True)
    finally:
        if previous is None:
            spark.conf.unset(conf_key)
        else:
            spark.conf.set(conf_key, previous)


# --------------------------------------------------------------------------------------------
# Delta via delta-rs: Parquet parts written by the tasks, one transaction on the driver
# --------------------------------------------------------------------------------------------

#: Internal Python data source that writes a batch into a Delta table with delta-rs.
DELTA_WRITER_SOURCE = "ehingest_deltalake"
_NULL_DIR = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class _DeltaPart:
    """One Parquet file a task wrote (relative path, as the Delta log records it)."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    num_records: int
    stats: str
    modification_time: int


@dataclass(frozen=True)
class _DeltaTaskMessage(WriterCommitMessage):
    """What a task reports to the commit: its files and rows outside the batch ranges."""

    parts: tuple[_DeltaPart, ...]
    outside: int


class _DeltaBatchWriter(DataSourceArrowWriter):
    """Tasks write Parquet files into the table directory; ``commit`` makes them one Delta
    transaction replacing the batch's partitions. Holds plain values only (pickled to tasks)."""

    def __init__(
        self,
        table_uri: str,
        partition_cols: list[str],
        schema_json: str,
        keys: list[str],
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.table_uri = table_uri
        self.partition_cols = partition_cols
        self.schema_json = schema_json
        self.keys = keys
        self.storage_options = dict(storage_options or {})
        self.attempt = uuid.uuid4().hex[:12]

    def __repr__(self) -> str:
        # storage_options may hold an account key or SAS: never in a repr (logs, tracebacks).
        return f"_DeltaBatchWriter({self.table_uri!r}, keys={self.keys})"

    def _filesystem(self) -> tuple[Any, str]:
        from dagster_eventhub_ingest.resources.sink_storage import arrow_filesystem

        return arrow_filesystem(self.table_uri, self.storage_options)

    def _schema(self) -> pa.Schema:
        from pyspark.sql.types import StructType

        return _delta_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _DeltaTaskMessage:
        """Write this task's rows, one file per partition-value combination, batch by batch."""
        import time
        import urllib.parse

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        schema = self._schema()
        cols = self.partition_cols
        filesystem, root = self._filesystem()
        writers: dict[tuple[str | None, ...], Any] = {}
        paths: dict[tuple[str | None, ...], tuple[str, str]] = {}
        counts: dict[tuple[str | None, ...], int] = {}
        file_stats: dict[tuple[str | None, ...], dict[str, Any]] = {}
        outside = 0
        task = uuid.uuid4().hex[:12]
        try:
            for batch in iterator:
                table = pa.Table.from_batches([batch]).cast(schema)
                # Rows outside the batch ranges have no key: count them, never write them.
                keyed = pc.is_valid(table.column(BATCH_COLUMN))
                outside += table.num_rows - (pc.sum(keyed).as_py() or 0)
                table = table.filter(keyed)
                if table.num_rows == 0:
                    continue
                keys = [table.column(c).cast(pa.string()) for c in cols]
                combos = pa.Table.from_arrays(keys, names=cols).group_by(cols).aggregate([])
                for combo in combos.to_pylist():
                    values = tuple(combo[c] for c in cols)
                    mask = None
                    for k, v in zip(keys, values, strict=True):
                        m = pc.is_null(k) if v is None else pc.equal(k, v)
                        mask = m if mask is None else pc.and_(mask, m)
                    part = table.filter(mask).drop_columns(cols)
                    if values not in writers:
                        rel_dir = "/".join(
                            f"{c}={_NULL_DIR if v is None else urllib.parse.quote(v)}"
                            for c, v in zip(cols, values, strict=True)
                        )
                        rel = f"{rel_dir}/part-{self.attempt}-{task}-{len(writers):05d}.parquet"
                        full = f"{root.rstrip('/')}/{rel}"
                        filesystem.create_dir(full.rsplit("/", 1)[0], recursive=True)
                        writers[values] = pq.ParquetWriter(
                            full, part.schema, filesystem=filesystem, compression="snappy"
                        )
                        paths[values] = (rel, full)
                        counts[values] = 0
                        file_stats[values] = {}
                    writers[values].write_table(part)
                    counts[values] += part.num_rows
                    _file_min_max(file_stats[values], part)
        finally:
            for writer in writers.values():
                writer.close()
        now_ms = int(time.time() * 1000)
        parts = []
        for values, (rel, full) in paths.items():
            fstats = file_stats[values]
            parts.append(
                _DeltaPart(
                    path=rel,
                    size=int(filesystem.get_file_info(full).size or 0),
                    partition_values=dict(zip(cols, values, strict=True)),
                    num_records=counts[values],
                    stats=json.dumps(
                        {
                            "numRecords": counts[values],
                            "minValues": fstats.get("min", {}),
                            "maxValues": fstats.get("max", {}),
                            "nullCount": {},
                        }
                    ),
                    modification_time=now_ms,
                )
            )
        return _DeltaTaskMessage(parts=tuple(parts), outside=outside)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Replace the batch's partitions by the new files in one Delta transaction."""
        from deltalake import DeltaTable
        from deltalake.transaction import AddAction, RemoveAction

        msgs = [m for m in messages if isinstance(m, _DeltaTaskMessage)]
        if sum(m.outside for m in msgs):
            # Never commit a wrong DataFrame; write_batch reports it from the observed count
            # (an exception raised here would reach the caller as a Python worker traceback).
            self.abort(list(messages))
            return
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=p.path,
                size=p.size,
                partition_values=p.partition_values,
                modification_time=p.modification_time,
                data_change=True,
                stats=p.stats,
            )
            for m in msgs
            for p in m.parts
        ]
        if not actions:
            # Nothing readable (all skipped): keep what an earlier attempt of the batch wrote,
            # as the Spark formats do, rather than replacing it with nothing.
            return
        problem = self._unreadable_part(msgs)
        if problem is not None:
            self.abort(list(messages))
            raise SinkError(
                f"sink deltalake path {self.table_uri!r}: not committing batch {self.keys}: "
                f"{problem}. The executors wrote where this driver cannot read (a local path on "
                "a cluster?): use a location every node shares (abfss://..., a mounted volume)"
            )
        DeltaTable(
            self.table_uri, storage_options=self.storage_options or None
        ).create_write_transaction(
            actions,
            mode="overwrite",
            schema=self._schema(),
            partition_by=self.partition_cols,
            partition_filters=[(BATCH_COLUMN, "in", self.keys)],
        )

    def _unreadable_part(self, msgs: list[_DeltaTaskMessage]) -> str | None:
        """Why a file the tasks reported is not committable here (missing, unreadable, other
        row count), or None when every file exists with its rows."""
        import pyarrow.parquet as pq
        from pyarrow import fs as pafs

        filesystem, root = self._filesystem()
        for m in msgs:
            for p in m.parts:
                full = f"{root.rstrip('/')}/{p.path}"
                if filesystem.get_file_info(full).type != pafs.FileType.File:
                    return f"file {p.path!r} written by a task does not exist here"
                try:
                    with filesystem.open_input_file(full) as f:
                        rows = pq.ParquetFile(f).metadata.num_rows
                except Exception as exc:
                    return f"file {p.path!r} is not readable Parquet: {redact(str(exc))[:200]}"
                if rows != p.num_records:
                    return f"file {p.path!r} holds {rows} rows, its task wrote {p.num_records}"
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the files of this attempt (best effort: they are not in the log anyway)."""
        filesystem, root = self._filesystem()
        for m in messages:
            if isinstance(m, _DeltaTaskMessage):
                for p in m.parts:
                    try:
                        filesystem.delete_file(f"{root.rstrip('/')}/{p.path}")
                    except OSError:
                        logger.debug("could not delete orphan Delta part %s", p.path)


class _DeltaBatchSource(DataSource):
    """``df.write.format("ehingest_deltalake")``: the writer side of the ``deltalake`` sink."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return DELTA_WRITER_SOURCE

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer for one batch; the batch keys and table come in the options."""
        return _DeltaBatchWriter(
            table_uri=self.options["table_uri"],
            partition_cols=json.loads(self.options["partition_by"]),
            schema_json=schema.json(),
            keys=json.loads(self.options["keys"]),
            storage_options=json.loads(self.options.get("storage_secret_options", "{}")),
        )


def _min_opt(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _max_opt(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _file_min_max(acc: dict[str, Any], part: pa.Table) -> None:
    """Delta file statistics for data skipping on sequenceNumber and enqueuedTime."""
    import pyarrow.compute as pc

    mins = acc.setdefault("min", {})
    maxs = acc.setdefault("max", {})
    if "sequenceNumber" in part.column_names:
        seq = part.column("sequenceNumber")
        mins["sequenceNumber"] = _min_opt(mins.get("sequenceNumber"), pc.min(seq).as_py())
        maxs["sequenceNumber"] = _max_opt(maxs.get("sequenceNumber"), pc.max(seq).as_py())
    if "enqueuedTime" in part.column_names:
        col = part.column("enqueuedTime")
        lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
        if lo is not None and hi is not None:
            lo_s = lo.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            hi_s = hi.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            mins["enqueuedTime"] = min(mins.get("enqueuedTime", lo_s), lo_s)
            maxs["enqueuedTime"] = max(maxs.get("enqueuedTime", hi_s), hi_s)


def _write_deltalake(keyed: DataFrame, sink: SinkSettings, keys: list[str]) -> None:
    from deltalake import DeltaTable

    assert sink.path is not None
    table_uri = _delta_uri(sink.path)
    partition_cols = [*sink.partition_by, BATCH_COLUMN]
    try:
        dt = DeltaTable.create(
            table_uri,
            schema=_delta_arrow_schema(keyed.schema),
            mode="ignore",
            partition_by=partition_cols,
            storage_options=dict(sink.storage_options) or None,
        )
    except Exception as exc:
        raise _sink_error(
            f"sink deltalake path {table_uri!r}: cannot create or open the Delta table: "
            f"{_cause(exc)}; check that the path is writable",
            exc,
        ) from exc
    existing = list(dt.metadata().partition_columns)
    if existing != partition_cols:
        raise SinkError(
            f"sink deltalake path {table_uri!r}: the table is partitioned by {existing}, this "
            f"writer needs {partition_cols} (partition_by + {BATCH_COLUMN!r}); write to a new "
            "path or use the same partition_by"
        )
    register_python_source(keyed.sparkSession, _DeltaBatchSource)
    (
        keyed.write.format(DELTA_WRITER_SOURCE)
        .mode("append")
        .option("table_uri", table_uri)
        .option("partition_by", json.dumps(partition_cols))
        .option("keys", json.dumps(keys))
        # The key holds "secret" so Spark redacts the value in plans and logs.
        .option("storage_secret_options", json.dumps(dict(sink.storage_options)))
        .save()
    )
