"""The read+write step as the run sees it: ranges in, per-partition facts out.

:class:`SparkIngestor` is the real one: one DataFrame for every claimed range through the
``eventhubs`` data source, written by the idempotent sink writer; nothing is collected on the
driver, the per-partition facts come back from the readers (an accumulator) or as a small
aggregate. Pure logic tests use an
in-process fake with the same contract.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from dagster_eventhub_ingest.ops.sinks.batch import BatchKey, PartitionWriteStats, parse_batch_key
from dagster_eventhub_ingest.ops.sinks.source import SinkSource
from dagster_eventhub_ingest.resources.limits import (
    DEFAULT_PREFETCH,
    DEFAULT_READERS_PER_PARTITION,
    DEFAULT_RECEIVE_TIMEOUT_SECONDS,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import SparkSession

    from dagster_eventhub_ingest.ops.run.progress import ReadCounter
    from dagster_eventhub_ingest.resources.azure.hub_client import PartitionInfo
    from dagster_eventhub_ingest.resources.eventhubs_source import ReadOptions
    from dagster_eventhub_ingest.resources.eventhubs_source.stats import SubRangeKey, SubRangeStats
    from dagster_eventhub_ingest.resources.settings import EventHubSettings
    from dagster_eventhub_ingest.resources.sink import SinkSettings

__all__ = ["Ingestor", "SinkEvent", "SparkIngestor"]


logger = logging.getLogger(__name__)

#: What a read imports of pyspark and of this package's Spark side, on any thread.
READ_MODULES = (
    "pyspark.sql",
    "pyspark.sql.datasource",
    "dagster_eventhub_ingest.resources.eventhubs_source.read",
    "dagster_eventhub_ingest.resources.eventhubs_source.source",
    "dagster_eventhub_ingest.resources.spark.session",
)


def import_read_modules() -> None:
    """Import :data:`READ_MODULES` in the calling thread, before a second thread uses Spark.

    pyspark's modules import each other in cycles. Two threads importing them at once can each
    get the other's half-initialised module: ``ImportError: cannot import name 'SQLContext' from
    partially initialized module 'pyspark.sql'``, or the import system's "deadlock detected".
    A run with nothing to read imports none of them (the package's faces load lazily), so the
    run imports them here, once it knows it reads.
    """
    import importlib

    for name in READ_MODULES:
        importlib.import_module(name)


class SinkEvent(NamedTuple):
    """One event as the sink holds it."""

    offset: str | None
    enqueued_time: datetime | None


class Ingestor(ABC):
    """Reads the given inclusive ranges and writes them to the sink, idempotently per range.

    Must raise :class:`~dagster_eventhub_ingest.resources.errors.DataLossError` when a range has a
    gap and :class:`~dagster_eventhub_ingest.resources.errors.SinkError` when the sink cannot be
    written. Writing the same ranges twice must leave them in the sink once.

    :meth:`ingest` and :attr:`output_location` are what every ingestor does; the other methods
    have defaults for an ingestor with nothing to start, count or look up (a test's in-memory
    one): the run calls them all, always.
    """

    @abstractmethod
    def ingest(
        self,
        ranges: Mapping[str, SeqRange],
        *,
        expired_before: Mapping[str, int] | None = None,
        generations: Mapping[str, int] | None = None,
        partition_infos: Mapping[str, PartitionInfo] | None = None,
    ) -> dict[str, PartitionWriteStats]:
        """Read and write ``ranges``; the result has one entry per range written.

        ``expired_before`` (partition -> sequence number): for these ranges the events before
        that number expired; read the rest, but key the batch by the whole range (a replay of
        an intent must replace, never add to, what an earlier attempt wrote).
        ``generations`` (partition -> hub generation): part of those batches' keys
        (``dagster_eventhub_ingest.ops.sinks.batch.batch_key``), for a hub re-created and reset;
        the run passes it only when there is one. ``partition_infos``: the run's last look at
        these partitions (first retained and last enqueued sequence numbers), to check the
        ranges against instead of asking the service again; events that expired since must
        still raise DataLossError.
        """

    @property
    @abstractmethod
    def output_location(self) -> str | None:
        """Where the output lands (path or table), for reports."""

    def start_early(self) -> None:  # noqa: B027 (optional hook: nothing to start by default)
        """Start what the first read needs (a session) in the background; the run calls it once
        its snapshot shows something to read."""

    def prepare(self) -> None:  # noqa: B027 (optional hook)
        """Have what the read needs running; the run calls it after claiming and before
        recording intents."""

    @property
    def session_up(self) -> bool:
        """Whether :meth:`prepare` returns at once: nothing to start, or it has started."""
        return True

    def spark_start_seconds(self) -> float | None:
        """How long starting the session took, or has taken so far; None: none started."""
        return None

    def interrupt(self) -> None:  # noqa: B027 (optional hook)
        """Interrupt the read and write in flight (from any thread; a stop request calls it)."""

    def wind_down(self) -> None:  # noqa: B027 (optional hook)
        """End what :meth:`start_early` still runs in the background; the run calls it as it
        ends, before its caller stops the session."""

    def task_counts(self) -> tuple[int, int] | None:
        """(completed, total) tasks of the read in flight; None when it cannot tell."""
        return None

    def read_counts(self) -> dict[str, int]:
        """Events read so far per partition of the read in flight ({}: unknown)."""
        return {}

    def batch_written(
        self, partition_id: str, start: int, end: int, generation: int | None = None
    ) -> bool | None:
        """Whether the batch of range ``[start, end]`` is in the sink (None: cannot tell)."""
        return None

    def sink_batches(self) -> dict[str, list[BatchKey]] | None:
        """The batches of this run's source committed in the sink, by partition (None: the
        sink cannot tell, and the run trusts the store alone); what the run continues after
        when its checkpoint is behind."""
        return None

    def sink_event(self, batch: BatchKey, sequence_number: int) -> SinkEvent | None:
        """The offset and enqueued time of one event the sink holds in ``batch`` (None: not
        there, or cannot tell)."""
        return None


class SparkIngestor(Ingestor):
    """:class:`Ingestor` over a SparkSession, the ``eventhubs`` source and
    ``dagster_eventhub_ingest.ops.sinks.write``.

    Args:
        spark: the session (local or cluster); None starts a local one at the first read, so a
            run with nothing to read never starts a JVM.
        eventhub: the hub to read.
        sink: where to write.
        receive_timeout_seconds / prefetch / max_readers_per_partition: the reader settings
            (:class:`dagster_eventhub_ingest.resources.config.IngestConfig`; their defaults are
            ``dagster_eventhub_ingest.resources.limits``').
        spark_factory: starts the session when ``spark`` is None (default: a local one).
        read_counter: live read progress (the readers' running counts in the store); None
            for none.
    """

    def __init__(
        self,
        spark: SparkSession | None,
        eventhub: EventHubSettings,
        sink: SinkSettings,
        *,
        receive_timeout_seconds: float = DEFAULT_RECEIVE_TIMEOUT_SECONDS,
        prefetch: int = DEFAULT_PREFETCH,
        max_readers_per_partition: int = DEFAULT_READERS_PER_PARTITION,
        spark_factory: Callable[[], SparkSession] | None = None,
        read_counter: ReadCounter | None = None,
    ) -> None:
        self._spark = spark
        # start_early's thread, the session it started (or was given), and when it did.
        self._early: threading.Thread | None = None
        self._started: SparkSession | None = spark
        self._ready = threading.Event()
        self._winding_down = threading.Event()
        self._start_error: BaseException | None = None
        # When this ingestor began starting a session, and how long the start took.
        self._start_began: float | None = None
        self._start_took: float | None = None
        self.read_counter = read_counter
        self._factory = spark_factory
        self._location: str | None = None
        self.eventhub = eventhub
        self.sink = sink
        #: The source of the events (named by batch keys and rows when the sink is shared).
        self.source = SinkSource.of(eventhub.hub_ref())
        self.receive_timeout_seconds = receive_timeout_seconds
        self.prefetch = prefetch
        self.max_readers_per_partition = max_readers_per_partition
        # Every Spark operation of ingest() carries it, so interrupt() stops exactly those.
        self._tag = f"ehingest-{uuid.uuid4().hex[:12]}"
        self._warm_tag = f"{self._tag}-warm-up"
        self._interrupted = False

    @property
    def spark(self) -> SparkSession:
        """The session, started locally on first use when none was given (or the one
        :meth:`start_early` is starting, waited for: timed as ``spark_start``)."""
        if self._spark is None:
            from dagster_eventhub_ingest.ops.run.progress import phase

            with phase("spark_start"):
                if self._early is None:
                    self._spark = self._start_session()
                else:
                    self._ready.wait()
                    if self._start_error is not None:
                        error, self._start_error = self._start_error, None
                        self._early = None
                        raise error
                    assert self._started is not None
                    # Started on another thread, where it became the active session; Spark
                    # looks up Python data sources (the Delta writer) in the caller's.
                    from dagster_eventhub_ingest.resources.spark.session import make_active

                    make_active(self._started)
                    self._spark = self._started
        assert self._spark is not None
        return self._spark

    def _start_session(self) -> SparkSession:
        from dagster_eventhub_ingest.ops.run.fault import pause_point

        pause_point("spark_start")
        self._start_began = time.monotonic()
        try:
            if self._factory is not None:
                return self._factory()
            from dagster_eventhub_ingest.resources.spark.session import local_spark_session

            return local_spark_session("ehingest")
        finally:
            self._start_took = time.monotonic() - self._start_began

    @property
    def session_up(self) -> bool:
        """The session was given or has started: using it now does not wait for a start."""
        return self._spark is not None or self._start_took is not None

    def spark_start_seconds(self) -> float | None:
        """How long this ingestor's session start took, or has taken so far; None when it
        started none (a session was given, or nothing was read)."""
        if self._start_took is not None:
            return self._start_took
        return None if self._start_began is None else time.monotonic() - self._start_began

    def start_early(self) -> None:
        """Start the session (unless one was given) and its executors' Python workers on a
        thread now; the first use of :attr:`spark` waits for the session only.

        The run calls it once its snapshot shows something to read, so the JVM starts while
        the run waits out its join grace and claims (a second or more of store calls and
        waiting) instead of after; then the executors' Python workers start and import the
        reader (:func:`dagster_eventhub_ingest.ops.run.warm_up.warm_session`) while the run records
        intents and Spark plans the read, instead of inside the first read's tasks. Measured on 2
        cores, 100k events (bench/ingest_throughput.py): a cold ``ehingest run`` 12.2-12.6 ->
        11.5-12.2 s, an in-process run with the JVM up 9.5-9.6 -> 7.9-8.9 s. A failed start is
        raised where the session is first used; a failed warm-up only logged.
        """
        if self._early is not None:
            return
        import_read_modules()
        given = self._spark

        def work() -> None:
            from dagster_eventhub_ingest.ops.run.warm_up import warm_session

            try:
                session = given if given is not None else self._start_session()
                self._started = session
            except BaseException as exc:  # raised in the run's thread, by spark
                self._start_error = exc
                return
            finally:
                self._ready.set()
            if self._winding_down.is_set():
                return
            tags = _Tags(session)
            try:
                tags.add(self._warm_tag)  # wind_down cancels the warm-up's jobs by it
                try:
                    warm_session(session, with_planners=given is not None)
                finally:
                    tags.remove(self._warm_tag)
            except Exception:  # a session that ended meanwhile: the run says what happened
                logger.debug("tagging the warm-up's Spark jobs failed", exc_info=True)

        self._early = threading.Thread(target=work, name="ehingest-spark-start", daemon=True)
        self._early.start()

    def wind_down(self, timeout: float = 10.0) -> None:
        """Cancel :meth:`start_early`'s warm-up jobs and wait up to ``timeout`` seconds for its
        thread, so that the caller stops the session after them, not under them.

        A run that ends soon after its start (a configuration error found with the session, a
        cancelled run) would otherwise stop the JVM while the warm-up's job still talks to it,
        and py4j logs that as an error with its traceback. A session still starting is left to
        whoever stops it (``OwnedSession.close`` waits for or kills the start); its thread
        then warms nothing.
        """
        early = self._early
        if early is None or not early.is_alive():
            return
        self._winding_down.set()
        if not self._ready.is_set() or self._started is None:
            return
        try:
            _Tags(self._started).cancel(self._warm_tag)
        except Exception:
            logger.debug("cancelling the warm-up's Spark jobs failed", exc_info=True)
        early.join(timeout)

    @property
    def output_location(self) -> str | None:
        """The sink's path or table."""
        if self._location is not None:
            return self._location
        if self.sink.path is not None and "://" not in self.sink.path:
            return os.path.abspath(self.sink.path)
        return self.sink.path or self.sink.table

    def interrupt(self) -> None:
        """Interrupt the Spark jobs :meth:`ingest` has in flight (from any thread; the run's
        cancellation calls it). The write they belong to fails and is not committed, or was
        already: the run replays its intent either way."""
        self._interrupted = True
        session = self._spark if self._spark is not None else None
        if session is None and self._ready.is_set():
            session = self._started
        if session is not None:
            _Tags(session).cancel(self._tag)

    def prepare(self) -> None:
        """Have the session running (start it, or wait for :meth:`start_early`'s start): the run
        calls it after claiming and before recording intents, see
        ``dagster_eventhub_ingest.ops.run.processor``."""
        _ = self.spark

    def task_counts(self) -> tuple[int, int] | None:
        """(completed, total) Spark tasks of the read in flight; None under Spark Connect."""
        if self._spark is None:
            return None
        from dagster_eventhub_ingest.ops.run.progress import spark_task_counts

        return spark_task_counts(self._spark)

    def read_counts(self) -> dict[str, int]:
        """Events read so far per partition of the read in flight, as the readers last wrote
        them ({} without a read counter or a read)."""
        return {} if self.read_counter is None else self.read_counter.counts()

    def batch_written(
        self, partition_id: str, start: int, end: int, generation: int | None = None
    ) -> bool | None:
        """Whether the batch of ``[start, end]`` is in the sink (None: cannot tell)."""
        from dagster_eventhub_ingest.ops.sinks.batch import batch_key
        from dagster_eventhub_ingest.ops.sinks.place import batch_in_sink

        key = batch_key(partition_id, start, end, generation, self._source_tag)
        return batch_in_sink(self.sink, key, lambda: self.spark)

    @property
    def _source_tag(self) -> str | None:
        """The source's tag in batch keys (a sink several sources share), else None."""
        return self.source.tag if self.sink.sources == "many" else None

    def sink_batches(self) -> dict[str, list[BatchKey]] | None:
        """The batch keys of this source in the sink, by partition (None: cannot tell)."""
        from dagster_eventhub_ingest.ops.sinks.place import sink_place

        keys = sink_place(self.sink, lambda: self.spark).batch_keys()
        if keys is None:
            return None
        found: dict[str, list[BatchKey]] = {}
        for key in keys:
            batch = parse_batch_key(key)
            if batch is not None and batch.source == self._source_tag:
                found.setdefault(batch.partition_id, []).append(batch)
        return found

    def sink_event(self, batch: BatchKey, sequence_number: int) -> SinkEvent | None:
        """The offset and enqueued time of event ``sequence_number`` in ``batch`` of the
        sink (one small read of that batch)."""
        from pyspark.sql import functions as F

        from dagster_eventhub_ingest.ops.sinks.read import read_batches

        row = (
            read_batches(self.spark, self.sink, [batch.key])
            .where(F.col("sequenceNumber") == sequence_number)
            .select("offset", "enqueuedTime")
            .first()
        )
        if row is None:
            return None
        from dagster_eventhub_ingest.ops.sinks.statistics import as_utc

        return SinkEvent(None if row[0] is None else str(row[0]), as_utc(row[1]))

    def ingest(
        self,
        ranges: Mapping[str, SeqRange],
        *,
        expired_before: Mapping[str, int] | None = None,
        generations: Mapping[str, int] | None = None,
        partition_infos: Mapping[str, PartitionInfo] | None = None,
    ) -> dict[str, PartitionWriteStats]:
        """One DataFrame for all ``ranges``, written once; per-range facts from the writer.

        The source checks retention and bounds when the DataFrame is created (its errors are
        unwrapped from Spark's into this package's types); executors read, and
        ``dagster_eventhub_ingest.ops.sinks.write.write_batch`` writes in the same job. On a classic
        session the readers tell the driver what they read (an accumulator,
        ``dagster_eventhub_ingest.resources.eventhubs_source.stats``); elsewhere the writer
        aggregates
        the statistics during the write or reads them back. With ``expired_before`` the source reads
        what is left of those ranges (the run checks that only the expired head is missing); the
        batches keep the keys of the whole ranges. ``generations`` go into the batch keys
        (``dagster_eventhub_ingest.ops.sinks.batch.batch_key``). With ``partition_infos`` covering
        every range, the source checks the ranges against them rather than opening a connection of
        its own from Spark's planner process (~2 s of a cold run); the readers still find events
        that expired since (DataLossError).
        """
        from dagster_eventhub_ingest.ops.sinks.fused import fuses
        from dagster_eventhub_ingest.resources.errors import RunCancelledError
        from dagster_eventhub_ingest.resources.eventhubs_source.stats import read_stats_accumulator

        spark = self.spark
        tags = _Tags(spark)
        tags.add(self._tag)  # this thread's jobs, until removed
        try:
            if self._interrupted:
                raise RunCancelledError("interrupted before the read started")
            # What each reader read, through an accumulator where the session has them
            # (classic): the write then observes no statistics and verifies by a row count
            # (dagster_eventhub_ingest.ops.sinks.write). A read that may skip expired events keeps
            # the statistics of what the sink holds.
            # A fused read and write (dagster_eventhub_ingest.ops.sinks.fused) brings what each
            # reader read back with its commit message: no accumulator.
            no_stats = expired_before or fuses(self.sink, spark)
            with nullcontext() if no_stats else read_stats_accumulator(spark) as stats:
                return self._ingest(ranges, expired_before, generations, partition_infos, stats)
        finally:
            tags.remove(self._tag)

    def _ingest(
        self,
        ranges: Mapping[str, SeqRange],
        expired_before: Mapping[str, int] | None,
        generations: Mapping[str, int] | None,
        partition_infos: Mapping[str, PartitionInfo] | None,
        stats: Accumulator[Any] | None,
    ) -> dict[str, PartitionWriteStats]:
        """:meth:`ingest` with the read's statistics accumulator (None: the write's own)."""
        from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, ReadOptions

        options = ReadOptions(
            settings=self.eventhub,
            ranges=tuple(PartitionRange(p, s, e) for p, (s, e) in ranges.items()),
            receive_timeout=self.receive_timeout_seconds,
            prefetch=self.prefetch,
            max_readers_per_partition=self.max_readers_per_partition,
            on_data_loss="skip" if expired_before else "fail",
            progress=None if self.read_counter is None else self.read_counter.start(),
            known_bounds=None
            if partition_infos is None
            else tuple(
                (p, i.begin_sequence_number, i.last_enqueued_sequence_number)
                for p, i in partition_infos.items()
            ),
            read_stats=None if stats is None else stats.aid,
        )
        try:
            return self._read_write(
                options, ranges, generations, None if stats is None else lambda: stats.value
            )
        finally:
            if self.read_counter is not None:
                self.read_counter.finish()

    def _read_write(
        self,
        options: ReadOptions,
        ranges: Mapping[str, SeqRange],
        generations: Mapping[str, int] | None,
        read_stats: Callable[[], Mapping[SubRangeKey, SubRangeStats]] | None = None,
    ) -> dict[str, PartitionWriteStats]:
        from dagster_eventhub_ingest.ops.sinks.fused import fused_read
        from dagster_eventhub_ingest.ops.sinks.write import write_batch
        from dagster_eventhub_ingest.resources.errors import EventHubIngestError, SinkError
        from dagster_eventhub_ingest.resources.eventhubs_source import read_eventhubs

        try:
            # The source checks the ranges against the service when the read is planned. A
            # sink the reader tasks write themselves gets a fused read and write; any other a
            # DataFrame that write_batch writes.
            fused = fused_read(
                self.spark,
                options,
                self.sink,
                ranges,
                generations=generations,
                source=self.source,
            )
            if fused is None:
                df = read_eventhubs(self.spark, options)
                # Spark Connect creates the source lazily, when the plan is first analysed: do
                # it here so its errors (DataLossError for on_data_loss, RangeError) are
                # unwrapped.
                _ = df.columns
        except EventHubIngestError:
            raise  # the sink's checks, or the source's own error
        except Exception as exc:
            raise _unwrap(exc) from exc
        try:
            if fused is not None:
                result = fused.write()
            else:
                result = write_batch(
                    df,
                    self.sink,
                    dict(ranges),
                    generations=generations,
                    read_stats=read_stats,
                    source=self.source,
                )
        except SinkError as exc:
            # The job reads and writes in one pass: a reader's failure (the hub killed
            # mid-read, events expired) surfaces from the write. Say what really failed.
            cause = exc.__cause__
            if isinstance(cause, Exception):
                read_error = _unwrap(cause)
                if read_error is not cause:
                    raise read_error from cause
            raise
        self._location = result.output_location
        return dict(result.partitions)


class _Tags:
    """Tag the calling thread's Spark jobs, and cancel the jobs of a tag from any thread.

    A classic session tags jobs on its SparkContext (``SparkSession.interruptTag`` there does
    not reach the jobs of a DataFrame write); Spark Connect tags operations on the session.
    """

    def __init__(self, spark: SparkSession) -> None:
        from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

        self._spark = spark
        self._connect = is_connect_session(spark)

    def add(self, tag: str) -> None:
        if self._connect:
            self._spark.addTag(tag)
        else:
            self._spark.sparkContext.addJobTag(tag)

    def remove(self, tag: str) -> None:
        if self._connect:
            self._spark.removeTag(tag)
        else:
            self._spark.sparkContext.removeJobTag(tag)

    def cancel(self, tag: str) -> None:
        if self._connect:
            self._spark.interruptTag(tag)
        else:
            self._spark.sparkContext.cancelJobsWithTag(tag)


def _unwrap(exc: Exception) -> Exception:
    """The package error a Spark planner error carries, rebuilt with its message, or ``exc``."""
    from dagster_eventhub_ingest.resources.errors import (
        ConfigurationError,
        DataLossError,
        EventHubIngestError,
        EventHubUnavailableError,
        RangeError,
    )
    from dagster_eventhub_ingest.resources.spark.code_shipping import missing_module_error

    if isinstance(exc, EventHubIngestError):
        return exc
    missing_module = missing_module_error(exc)
    if missing_module is not None:
        return missing_module
    text = str(exc)
    kinds: list[type[EventHubIngestError]] = [
        DataLossError,
        RangeError,
        EventHubUnavailableError,
        ConfigurationError,
    ]
    for kind in kinds:
        marker = f"{kind.__name__}: "
        if marker in text:
            message = text.split(marker, 1)[1].strip().splitlines()[0]
            return kind(message)
    return exc
