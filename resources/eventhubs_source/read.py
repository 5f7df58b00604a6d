"""Executor side: one Spark task reads exactly one sub-range into Arrow batches."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient
from dagster_eventhub_ingest.resources.errors import (
    DataLossError,
    EventHubIngestError,
    EventHubUnavailableError,
)
from dagster_eventhub_ingest.resources.eventhubs_source.events import ArrowBuilder, ColumnRows
from dagster_eventhub_ingest.resources.eventhubs_source.partition_range import PartitionRange
from dagster_eventhub_ingest.resources.eventhubs_source.progress import (
    ProgressTarget,
    ProgressWriter,
    slow_read_delay,
)
from dagster_eventhub_ingest.resources.eventhubs_source.receiver import (
    _BatchReceiver,
    _PartitionPull,
    sdk_receive,
)
from dagster_eventhub_ingest.resources.eventhubs_source.schema import source_arrow_schema
from dagster_eventhub_ingest.resources.limits import (
    DEFAULT_PREFETCH,
    DEFAULT_RECEIVE_TIMEOUT_SECONDS,
    OnDataLoss,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings

if TYPE_CHECKING:
    import pyarrow as pa

    from dagster_eventhub_ingest.resources.eventhubs_source.stats import SubRangeStats

logger = logging.getLogger(__name__)

# Rows per Arrow batch handed to Spark: large enough to amortise the JVM hand-off, small enough
# that a task holds a few MB at a time.
_BATCH_ROWS = 8192
# ... and body bytes: 8192 events of up to 1 MB each would hold GBs in a task, and an Arrow
# array's 32-bit offsets end at 2 GiB. A batch ends at the first event that reaches this.
_BATCH_BYTES = 32 * 1024 * 1024
# Unusual events (a body that is not data, bytes that are not AMQP) a reader logs one by one;
# the rest are counted and logged once, at the end of its range.
_UNUSUAL_LOGGED = 10


class EventHubsInputPartition(InputPartition):
    """One sub-range read by one Spark task; holds settings and range only (picklable)."""

    def __init__(
        self,
        settings: EventHubSettings,
        rng: PartitionRange,
        receive_timeout: float,
        prefetch: int,
        on_data_loss: OnDataLoss,
        progress: ProgressTarget | None = None,
        read_stats: int | None = None,
        data_loss_hint: str = "on_data_loss='skip'",
    ) -> None:
        super().__init__(rng)
        self.settings = settings
        self.range = rng
        self.receive_timeout = receive_timeout
        self.prefetch = prefetch
        self.on_data_loss = on_data_loss
        self.progress = progress
        self.read_stats = read_stats
        self.data_loss_hint = data_loss_hint

    def __repr__(self) -> str:
        # The settings hold a secret; the repr shows where, never how to authenticate.
        return f"EventHubsInputPartition({self.settings.eventhub_name}, {self.range})"


def read_input_partition(
    partition: InputPartition, on_done: Callable[[SubRangeStats], None] | None = None
) -> Iterator[pa.RecordBatch]:
    """Receive one planned sub-range on an executor: the batch and the stream reader's ``read``.

    The client is created here, never pickled; a partition of another source reads nothing.
    ``on_done`` gets what was read, after the last batch was taken (as the read-stats
    accumulator does when the partition names one).
    """
    if not isinstance(partition, EventHubsInputPartition):
        return iter(())
    aid = getattr(partition, "read_stats", None)
    if aid is not None:
        from dagster_eventhub_ingest.resources.eventhubs_source.stats import send_read_stats

        rng = partition.range
        key = (rng.partition_id, rng.start, rng.end)
        on_done = _both(partial(send_read_stats, aid, key), on_done)
    return read_range(
        partition.settings,
        partition.range,
        receive_timeout=partition.receive_timeout,
        prefetch=partition.prefetch,
        on_data_loss=partition.on_data_loss,
        progress=getattr(partition, "progress", None),
        on_done=on_done,
        data_loss_hint=getattr(partition, "data_loss_hint", "on_data_loss='skip'"),
    )


def read_range(
    settings: EventHubSettings,
    rng: PartitionRange,
    *,
    receive_timeout: float = DEFAULT_RECEIVE_TIMEOUT_SECONDS,
    prefetch: int = DEFAULT_PREFETCH,
    on_data_loss: OnDataLoss = "fail",
    batch_rows: int = _BATCH_ROWS,
    batch_bytes: int = _BATCH_BYTES,
    progress: ProgressTarget | None = None,
    on_done: Callable[[SubRangeStats], None] | None = None,
    data_loss_hint: str = "on_data_loss='skip'",
) -> Iterator[pa.RecordBatch]:
    """Receive exactly the events of ``rng`` and yield them as Arrow record batches.

    Runs wherever it is called (a Spark task, a benchmark); creates and closes its own client.
    With ``progress`` the running count goes to a small blob every few seconds
    (:mod:`dagster_eventhub_ingest.resources.eventhubs_source.progress`; a failed write is
    ignored). ``on_done``
    gets what was read (events, bytes, sequence and time bounds, the last offset) after the last
    batch was taken.

    Raises:
        DataLossError: a sequence number of the range is missing and ``on_data_loss='fail'``.
        EventHubUnavailableError: nothing arrived for ``receive_timeout`` seconds, or the
            service failed after the SDK's retries.
    """
    builder = ArrowBuilder(rng.partition_id, source_arrow_schema())
    expected = rng.start
    # Never ask for more credit than the range holds: events past the end would be wasted.
    credit = max(1, min(prefetch, rng.count))
    receive: dict[str, Any] = {
        "starting_position": rng.start,
        "prefetch": credit,
        "wait_seconds": receive_timeout,
    }
    receiver: _BatchReceiver | _PartitionPull
    if not sdk_receive():
        receiver = _PartitionPull(settings, rng.partition_id, end=rng.end, columns=True, **receive)
        seq_of: Callable[[Any], int | None] = receiver.sequence_number
        add: Callable[[Any, int], None] = builder.add_event
    else:
        receiver = _BatchReceiver(settings, rng.partition_id, max_batch_size=credit, **receive)
        seq_of, add = _event_sequence_number, builder.add
    where = f"Event Hub {settings.eventhub_name!r} consumer group {settings.consumer_group!r} {rng}"
    tracker = None if progress is None else ProgressWriter(progress, rng.partition_id, rng.range)
    slow = slow_read_delay()

    def lost(first: int, last: int) -> None:
        """A hole [first, last] in the range: fail, or log it and go on (skip)."""
        missing = f"sequence numbers [{first}, {last}] of {rng} are missing"
        if on_data_loss == "fail":
            raise DataLossError(
                f"{where}: {missing} (expired by retention or a gap in the partition); "
                f"set {data_loss_hint} to read what is left"
            )
        logger.warning(
            "Event Hub %s consumer group %s partition %s: skipping: %s",
            settings.eventhub_name,
            settings.consumer_group,
            rng.partition_id,
            missing,
        )

    unusual = _Unusual(settings, rng)

    with receiver:
        for events in receiver:
            if not events:
                # Silence: either the rest of the range expired meanwhile (data loss) or the
                # service is not delivering (retryable). The partition properties tell which.
                first_available = _first_available(settings, rng.partition_id)
                if first_available is not None and first_available > expected:
                    lost(expected, rng.end)
                    expected = rng.end + 1
                    break
                raise EventHubUnavailableError(
                    f"{where}: no event received for {receive_timeout:g}s while waiting for "
                    f"sequence number {expected} (receive_timeout); the hub may be unreachable "
                    "or overloaded"
                )
            for event in events:
                if type(event) is ColumnRows:  # a native run (fastpath): its rows in segments
                    past_end = False
                    for a, b, lo in event.segments():
                        hi = lo + (b - a) - 1
                        if lo > rng.end:
                            past_end = True
                            break
                        first, last = max(lo, expected), min(hi, rng.end)
                        if first <= last:
                            if lo > expected:
                                lost(expected, lo - 1)
                            i, j = a + (first - lo), a + (last - lo) + 1
                            while i < j:
                                # No further than the row that fills the batch (rows or bytes).
                                k = min(j, i + max(1, batch_rows - len(builder)))
                                k = event.rows_reaching(i, k, batch_bytes - builder.body_bytes)
                                builder.add_rows(event, i, k)
                                i = k
                                if len(builder) >= batch_rows or builder.body_bytes >= batch_bytes:
                                    yield builder.flush()
                            expected = last + 1
                        if hi > rng.end:
                            past_end = True
                            break
                    if past_end:
                        break
                    continue
                seq = seq_of(event)
                if seq is None or seq < expected:
                    continue  # a redelivery after a reconnect: already read
                if seq > rng.end:
                    break
                if seq > expected:
                    lost(expected, seq - 1)
                add(event, seq)
                expected = seq + 1
                if len(builder) >= batch_rows or builder.body_bytes >= batch_bytes:
                    yield builder.flush()
            if builder.unusual:
                unusual.log(builder.unusual)
            if tracker is not None:
                tracker.update(expected - rng.start)
            if slow:
                time.sleep(slow)
            last_seen = seq_of(events[-1])
            if expected > rng.end or (last_seen is not None and last_seen > rng.end):
                break
        if expected > rng.end:
            # Complete: hand the last rows to Spark now; the client closes behind them.
            receiver.close(wait=False)
    if expected <= rng.end:
        # The partition moved past the range's end without delivering its tail.
        lost(expected, rng.end)
    unusual.log(builder.unusual)
    unusual.close()
    if tracker is not None:
        tracker.update(expected - rng.start, final=True)
        tracker.close()
    if len(builder):
        yield builder.flush()
    if on_done is not None:
        on_done(builder.summary())


class _Unusual:
    """Logs the events a reader read with their body or their whole message in amqpBody: the
    first ones one by one, with their sequence numbers, the rest counted at the end."""

    def __init__(self, settings: EventHubSettings, rng: PartitionRange) -> None:
        self.where = (settings.eventhub_name, settings.consumer_group, rng.partition_id)
        self.count = 0
        self.first: int | None = None  # of those not logged one by one
        self.last: int | None = None

    def log(self, notes: list[tuple[int, str]]) -> None:
        """Log (or count) ``notes`` (sequence number, what is unusual) and clear them."""
        for seq, why in notes:
            if self.count < _UNUSUAL_LOGGED:
                logger.warning(
                    "Event Hub %s consumer group %s partition %s: sequence number %d: %s",
                    *self.where,
                    seq,
                    why,
                )
            else:
                self.first = seq if self.first is None else self.first
                self.last = seq
            self.count += 1
        notes.clear()

    def close(self) -> None:
        if self.count > _UNUSUAL_LOGGED:
            logger.warning(
                "Event Hub %s consumer group %s partition %s: %d more events with their body or "
                "their whole message in amqpBody, sequence numbers %s to %s",
                *self.where,
                self.count - _UNUSUAL_LOGGED,
                self.first,
                self.last,
            )


def _both(
    first: Callable[[SubRangeStats], None], second: Callable[[SubRangeStats], None] | None
) -> Callable[[SubRangeStats], None]:
    if second is None:
        return first

    def both(stats: SubRangeStats) -> None:
        first(stats)
        second(stats)

    return both


def _event_sequence_number(event: Any) -> int | None:
    seq: int | None = event.sequence_number
    return seq


def _first_available(settings: EventHubSettings, partition_id: str) -> int | None:
    try:
        _, infos = EventHubClient(settings, retry_total=None).snapshot([partition_id])
    except EventHubIngestError:
        return None
    info = infos.get(partition_id)
    return None if info is None else info.begin_sequence_number
