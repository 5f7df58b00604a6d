"""``spark.readStream.format("eventhubs")``: micro-batches of sequence-number ranges.

A PySpark streaming Python data source (``DataSourceStreamReader``, Spark 4.2+) with admission
control (``maxEventsPerTrigger`` as ``ReadMaxRows``) and ``Trigger.AvailableNow``
(``SupportsTriggerAvailableNow``). The offsets are plain JSON in Spark's checkpointLocation,
shaped like the azure-event-hubs-spark connector's: ``{"<hub>": {"<partition>": next}}`` where
``next`` is the first sequence number not yet read (the exclusive end of the last batch).

Exactly once: Spark writes a batch's end offset to its offset log before running it and, after a
crash, runs the same batch again with the same ``start``/``end``; a range of sequence numbers is
always the same events, so a replay with an idempotent sink (the file sink's metadata log, Delta)
lands every event once.

Each batch's ranges are read on executors by the same code as the batch source
(:func:`~dagster_eventhub_ingest.resources.eventhubs_source.read_range`); only the frozen
settings and ranges travel.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient, PartitionInfo
from dagster_eventhub_ingest.resources.errors import ConfigurationError, DataLossError
from dagster_eventhub_ingest.resources.eventhubs_source.compat.bounds import Bound
from dagster_eventhub_ingest.resources.eventhubs_source.compat.options import SourceOptions
from dagster_eventhub_ingest.resources.eventhubs_source.compat.resolve import (
    resolve_bound,
    resolve_start_sequence_numbers,
    with_deadline,
)
from dagster_eventhub_ingest.resources.eventhubs_source.partition_range import PartitionRange
from dagster_eventhub_ingest.resources.eventhubs_source.plan import input_partitions
from dagster_eventhub_ingest.resources.eventhubs_source.read import read_input_partition

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EventHubsStreamReader", "admit"]

logger = logging.getLogger(__name__)


def admit(backlog: Mapping[str, int], limit: int) -> dict[str, int]:
    """Split at most ``limit`` events over the partitions in proportion to their backlog.

    Returns partition id -> events admitted. The total is ``min(limit, sum(backlog))`` exactly
    (largest remainders get the rounding), so a batch never exceeds ``maxEventsPerTrigger`` and
    any ``limit >= 1`` makes progress. The connector splits proportionally too.
    """
    total = sum(max(0, n) for n in backlog.values())
    if total <= limit:
        return {pid: max(0, n) for pid, n in backlog.items()}
    shares = {pid: limit * max(0, n) / total for pid, n in backlog.items()}
    out = {pid: int(share) for pid, share in shares.items()}
    rest = limit - sum(out.values())
    for pid in sorted(shares, key=lambda p: (out[p] - shares[p], p))[:rest]:
        out[pid] += 1
    return out


class EventHubsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader: offsets are the next sequence number to read per partition.

    Lives in Spark's streaming worker on the driver for the whole query (``latestOffset`` and
    ``partitions`` are called there); ``read`` runs on executors.
    """

    def __init__(self, source: SourceOptions) -> None:
        # Batch-only options (an end, ranges) are refused by the first call Spark makes, not
        # here: PySpark's streaming runner reports an error raised while it creates the reader
        # as an UnboundLocalError of its own.
        self._refused = source.batch_only_error()
        self.source = source
        self.hub = source.read.settings.eventhub_name
        # Trigger.AvailableNow: the latest offsets when the query started; never read past them.
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None

    def _check(self) -> None:
        if self._refused is not None:
            raise self._refused

    # ---- offsets ---------------------------------------------------------------------------

    def _offset(self, seqs: Mapping[str, int]) -> dict:
        return {self.hub: {pid: int(seq) for pid, seq in sorted(seqs.items(), key=_pid)}}

    def _seqs(self, offset: Mapping[str, object]) -> dict[str, int]:
        if set(offset) != {self.hub}:
            raise ConfigurationError(
                f"the checkpoint's offsets are of Event Hub(s) {', '.join(map(repr, offset))}, "
                f"but this query reads {self.hub!r}; use a new checkpointLocation for another hub"
            )
        parts = offset[self.hub]
        assert isinstance(parts, Mapping)
        return {str(pid): int(seq) for pid, seq in parts.items()}

    def _infos(self) -> dict[str, PartitionInfo]:
        settings = self.source.read.settings
        _, infos = with_deadline(
            self.source.operation_timeout,
            f"reading the partitions of Event Hub {self.hub!r}",
            lambda: EventHubClient(settings, retry_total=None).snapshot(),
        )
        wanted = self.source.read.partition_ids
        if wanted is not None:
            unknown = [p for p in wanted if p not in infos]
            if unknown:
                raise ConfigurationError(
                    f"partition_ids: unknown partition {', '.join(map(repr, unknown))} of Event "
                    f"Hub {self.hub!r}; valid partition ids: {', '.join(infos)}"
                )
            infos = {p: i for p, i in infos.items() if p in wanted}
        return infos

    def initialOffset(self) -> dict:
        """Where a new query starts: the start positions (default: the end of the stream)."""
        self._check()
        starts = resolve_start_sequence_numbers(self.source, self._infos())
        logger.info("Event Hub %s: new stream starts at %s", self.hub, starts)
        return self._offset(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxEventsPerTrigger)``, or everything available when it is not set."""
        self._check()
        limit = self.source.max_events_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the end of every partition now; the query stops when it has read up to it."""
        self._check()
        infos = self._infos()
        self._target = {pid: info.last_enqueued_sequence_number + 1 for pid, info in infos.items()}
        logger.info("Event Hub %s: Trigger.AvailableNow reads up to %s", self.hub, self._target)

    def reportLatestOffset(self) -> dict | None:
        """The end of every partition as ``latestOffset`` last saw it, for the query's progress.

        Spark asks right after ``latestOffset``; the answer it just read is fresh enough and
        spares a round of management calls per trigger.
        """
        return None if self._latest is None else self._offset(self._latest)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end offset of the next batch: up to the latest events, within ``limit``.

        A partition whose next sequence number has expired is a data loss: with
        ``failOnDataLoss`` (the default) the query fails here; otherwise the batch starts at the
        first retained event and the gap is logged. New partitions start at their first event.
        """
        self._check()
        begin = self._seqs(start)
        infos = self._infos()
        latest = {pid: info.last_enqueued_sequence_number + 1 for pid, info in infos.items()}
        self._latest = dict(latest)
        if self._target is not None:
            latest = {p: min(n, self._target[p]) for p, n in latest.items() if p in self._target}
        first: dict[str, int] = {}
        for pid, upto in latest.items():
            info = infos[pid]
            if pid not in begin:
                # A partition added while the query ran: this batch only records where it
                # starts (its first event), the next one reads it.
                first[pid] = resolve_bound(self.source.read, info, Bound("earliest"))
                latest[pid] = first[pid]
                continue
            nxt = begin[pid]
            if nxt < info.begin_sequence_number and nxt < upto:
                self._lost(pid, nxt, info.begin_sequence_number)
                nxt = info.begin_sequence_number
            first[pid] = nxt
        backlog = {pid: max(0, latest[pid] - first[pid]) for pid in latest}
        admitted = admit(backlog, limit.max_rows) if isinstance(limit, ReadMaxRows) else backlog
        end = dict(begin)
        for pid in latest:
            end[pid] = first[pid] + admitted[pid] if admitted[pid] else begin.get(pid, first[pid])
        if end == begin:
            return start
        return self._offset(end)

    def _lost(self, pid: str, nxt: int, first_available: int) -> None:
        settings = self.source.read.settings
        missing = (
            f"Event Hub {self.hub!r} consumer group {settings.consumer_group!r} partition {pid}: "
            f"sequence numbers [{nxt}, {first_available - 1}] expired before the stream read "
            f"them (the first retained one is {first_available})"
        )
        read = self.source.read
        if read.on_data_loss == "fail":
            raise DataLossError(
                f"{missing}; set {read.data_loss_hint} to go on from {first_available}"
            )
        logger.warning("%s; skipping them (%s)", missing, read.data_loss_hint)

    # ---- reading ---------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One input partition per (partition, sub-range) of ``[start, end)``."""
        begin, stop = self._seqs(start), self._seqs(end)
        ranges = [
            PartitionRange(pid, begin[pid], stop[pid] - 1)
            for pid in sorted(stop, key=_pid)
            # A new partition enters an offset with nothing to read (see latestOffset).
            if begin.get(pid) is not None and stop[pid] > begin[pid]
        ]
        return input_partitions(ranges, self.source.read)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Receive one sub-range on an executor (the client is created here, never pickled)."""
        return read_input_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpointLocation, not in the hub."""


def _pid(item: object) -> tuple[int, str]:
    pid = item[0] if isinstance(item, tuple) else item
    text = str(pid)
    return (int(text), text) if text.isdigit() else (1 << 62, text)
