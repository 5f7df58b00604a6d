"""Driver side: options resolved to exact ranges, checked against what the hub retains."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.azure.hub_client import EventHubClient, PartitionInfo
from dagster_eventhub_ingest.resources.errors import DataLossError, RangeError
from dagster_eventhub_ingest.resources.eventhubs_source.options import ReadOptions
from dagster_eventhub_ingest.resources.eventhubs_source.partition_range import (
    DataGap,
    PartitionRange,
    split_range,
)
from dagster_eventhub_ingest.resources.eventhubs_source.position import EventPosition
from dagster_eventhub_ingest.resources.eventhubs_source.receiver import first_event_at
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.settings import EventHubSettings

if TYPE_CHECKING:
    from azure.eventhub import EventHubConsumerClient

    from dagster_eventhub_ingest.resources.eventhubs_source.read import EventHubsInputPartition

logger = logging.getLogger(__name__)


def input_partitions(
    ranges: Sequence[PartitionRange], options: ReadOptions
) -> list[EventHubsInputPartition]:
    """One input partition per sub-range of each range, batch or stream alike.

    At most ``max_readers_per_partition`` readers per range; a hole inside a range follows
    ``on_data_loss`` on the executor (the driver already decided about expired starts).
    """
    # An input partition is pyspark's: imported when a read is planned, not with the plan.
    from dagster_eventhub_ingest.resources.eventhubs_source.read import EventHubsInputPartition

    return [
        EventHubsInputPartition(
            settings=options.settings,
            rng=sub,
            receive_timeout=options.receive_timeout,
            prefetch=options.prefetch,
            on_data_loss=options.on_data_loss,
            progress=options.progress,
            read_stats=options.read_stats,
            data_loss_hint=options.data_loss_hint,
        )
        for rng in ranges
        for sub in split_range(
            rng, options.max_readers_per_partition, options.min_events_per_reader
        )
    ]


@dataclass(frozen=True)
class ReadPlan:
    """Resolved, validated ranges of one read; what the ``eventhubs`` DataFrame will contain.

    ``ranges`` are the readable parts only (empty partitions are left out); ``gaps`` are the
    parts skipped because of ``on_data_loss=skip`` (known before reading: retention).
    """

    options: ReadOptions
    ranges: tuple[PartitionRange, ...]
    gaps: tuple[DataGap, ...] = ()
    #: The ranges as asked for (positions resolved), before skipped parts were cut off.
    requested: tuple[PartitionRange, ...] = ()

    @property
    def settings(self) -> EventHubSettings:
        """The hub settings of this read."""
        return self.options.settings

    def ranges_dict(self) -> dict[str, SeqRange]:
        """Partition id -> inclusive ``(start, end)`` of what will be read."""
        return {r.partition_id: r.range for r in self.ranges}

    def intent_ranges(self) -> dict[str, SeqRange]:
        """Partition id -> the requested ``(start, end)``: the batch keys to write under.

        Equal to :meth:`ranges_dict` unless ``on_data_loss='skip'`` cut a lost part off; pass
        this to ``dagster_eventhub_ingest.ops.sinks.write.write_batch`` so a replay of the same
        intent replaces the same batch even if more (or less) of it has expired since.
        """
        return {r.partition_id: r.range for r in (self.requested or self.ranges)}

    def input_partitions(self) -> list[EventHubsInputPartition]:
        """One input partition per sub-range (``max_readers_per_partition`` per range at most)."""
        return input_partitions(self.ranges, self.options)

    def spark_options(self) -> dict[str, str]:
        """Reader options with the resolved ranges, so ``load()`` reads exactly this plan."""
        if not self.ranges:
            # An empty plan: reading nothing must still be expressible.
            return {**replace(self.options, ranges=None).to_options(), "ranges": "{}"}
        return replace(self.options, ranges=self.ranges, partition_ids=None).to_options()


def plan_read(
    options: ReadOptions,
    *,
    client: EventHubConsumerClient | None = None,
) -> ReadPlan:
    """Resolve ``options`` to exact inclusive ranges and check them against the service.

    Runs on the driver. Positions become sequence numbers (``earliest`` -> the first retained,
    ``latest`` -> the last enqueued; a starting position is inclusive, an ending sequence number
    or offset is inclusive, an ending enqueued time is exclusive so consecutive windows never
    overlap). Explicit ranges must name existing partitions and end at or before the last
    enqueued sequence number.

    Raises:
        RangeError: unknown partition (the message lists the valid ids), range past the end.
        DataLossError: part of a range is no longer retained and ``on_data_loss='fail'``.
        ConfigurationError: the hub does not exist or the credential may not read it.
        EventHubUnavailableError: the service cannot be reached.
    """
    settings = options.settings
    known = _known_infos(options)
    own = client is None and known is None
    cl = settings.consumer_client() if own else client
    try:
        if options.ranges is not None:
            wanted = [r.partition_id for r in options.ranges]
        else:
            wanted = list(options.partition_ids) if options.partition_ids else []
        if known is not None:
            # The caller's own look, moments old (a new connection from Spark's planner
            # process costs seconds); retention that moved since is the readers' to find.
            all_ids, infos = list(known), known
        else:
            # One round of concurrent management calls when the partitions are named.
            hub = EventHubClient(settings, retry_total=None)  # the SDK's retries, as readers
            all_ids, infos = hub.snapshot(wanted or None, client=cl)
        unknown = [p for p in wanted if p not in all_ids]
        if unknown:
            option = "ranges" if options.ranges is not None else "partition_ids"
            raise RangeError(
                f"{option}: unknown partition {', '.join(repr(p) for p in unknown)} of Event Hub "
                f"{settings.eventhub_name!r}; valid partition ids: {', '.join(all_ids)}"
            )
        if options.ranges is not None:
            requested = list(options.ranges)
        else:
            requested = []
            for pid in wanted or all_ids:
                rng = _resolve_positions(options, infos[pid])
                if rng is not None:
                    requested.append(rng)
        ranges: list[PartitionRange] = []
        gaps: list[DataGap] = []
        for rng in requested:
            readable, gap = _check_retained(rng, infos[rng.partition_id], options)
            if gap is not None:
                gaps.append(gap)
            if readable is not None:
                ranges.append(readable)
        plan = ReadPlan(
            options=options, ranges=tuple(ranges), gaps=tuple(gaps), requested=tuple(requested)
        )
        logger.info(
            "planned read of Event Hub %s consumer group %s: %s%s",
            settings.eventhub_name,
            settings.consumer_group,
            ", ".join(str(r) for r in plan.ranges) or "nothing to read",
            f"; skipped {len(gaps)} gap(s)" if gaps else "",
        )
        return plan
    finally:
        if own and cl is not None:
            cl.close()


def _known_infos(options: ReadOptions) -> dict[str, PartitionInfo] | None:
    """``known_bounds`` as partition infos, when they cover every range (else None: ask)."""
    if options.known_bounds is None or options.ranges is None:
        return None
    infos = {p: PartitionInfo(p, b, e) for p, b, e in options.known_bounds}
    if any(r.partition_id not in infos for r in options.ranges):
        return None
    return infos


def _check_retained(
    rng: PartitionRange, info: PartitionInfo, options: ReadOptions
) -> tuple[PartitionRange | None, DataGap | None]:
    last = info.last_enqueued_sequence_number
    if rng.end > last:
        raise RangeError(
            f"{rng}: ends after the last enqueued sequence number {last} of partition "
            f"{rng.partition_id}; events past it do not exist yet (end at most {last})"
        )
    first = info.begin_sequence_number
    if rng.start >= first:
        return rng, None
    lost_end = min(rng.end, first - 1)
    reason = (
        f"sequence numbers [{rng.start}, {lost_end}] of {rng} are no longer available: the "
        f"partition's first retained sequence number is {first} (expired by retention)"
    )
    if options.on_data_loss == "fail":
        raise DataLossError(
            f"{reason}; read from {first} instead, or set {options.data_loss_hint} to read what "
            "is left and report the gap"
        )
    logger.warning(
        "Event Hub %s consumer group %s partition %s: skipping lost range: %s",
        options.settings.eventhub_name,
        options.settings.consumer_group,
        rng.partition_id,
        reason,
    )
    gap = DataGap(rng.partition_id, rng.start, lost_end, reason)
    if lost_end >= rng.end:
        return None, gap
    return PartitionRange(rng.partition_id, first, rng.end), gap


def _resolve_positions(options: ReadOptions, info: PartitionInfo) -> PartitionRange | None:
    start = resolve_position(options, info, options.starting_position, ending=False)
    end = resolve_position(options, info, options.ending_position, ending=True)
    if end < start - 1:
        raise RangeError(
            f"{options.spelled('ending_position')}={options.ending_position} is before "
            f"{options.spelled('starting_position')}={options.starting_position} in partition "
            f"{info.partition_id} (they resolve to sequence numbers {end} and {start}); give an "
            "end at or after the start"
        )
    if end < start:
        return None  # the start is where the partition ends: nothing new
    return PartitionRange(info.partition_id, start, end)


def _past_the_end(
    options: ReadOptions, info: PartitionInfo, pos: EventPosition, *, ending: bool
) -> RangeError:
    """A position after the partition's last event: an error, never a cut-back or empty read
    (a job that takes the end it asked for as its next start would skip what arrives)."""
    last = info.last_enqueued_sequence_number
    name = options.spelled("ending_position" if ending else "starting_position")
    fix = (
        f"end at most at seq:{last} (inclusive), or use {name}=latest"
        if ending
        else f"start at most at seq:{last + 1} (nothing new yet), or use {name}=latest"
    )
    return RangeError(
        f"{name}={pos} is past the end of partition {info.partition_id}: its last event is "
        f"sequence number {last} (offset {info.last_enqueued_offset}) and events past it do not "
        f"exist yet; {fix}"
    )


def resolve_position(
    options: ReadOptions,
    info: PartitionInfo,
    pos: EventPosition,
    *,
    ending: bool,
) -> int:
    """The sequence number of ``pos``: a start's first event, an end's last event (inclusive)."""
    last = info.last_enqueued_sequence_number
    if pos.kind == "earliest":
        return info.begin_sequence_number if not ending else info.begin_sequence_number - 1
    if pos.kind == "latest":
        return last if ending else last + 1
    if pos.kind == "sequence_number":
        assert isinstance(pos.value, int)
        if pos.value > (last if ending else last + 1):
            raise _past_the_end(options, info, pos, ending=ending)
        return pos.value
    if pos.kind == "offset" and info.is_empty:
        raise _past_the_end(options, info, pos, ending=ending)
    if info.is_empty:
        return last if ending else last + 1
    if pos.kind == "enqueued_time":
        assert isinstance(pos.value, datetime)
        if info.last_enqueued_time is not None and pos.value > info.last_enqueued_time:
            return last if ending else last + 1
        probe = _probe(options, info.partition_id, pos.value)
        if probe is None:
            return last if ending else last + 1
        # Starting: the first event at or after the time. Ending (exclusive): the one before it.
        return probe[0] - 1 if ending else probe[0]
    assert isinstance(pos.value, str)
    newest_offset = info.last_enqueued_offset or ""
    if pos.value == newest_offset:
        return last
    numeric = pos.value.isdigit() and newest_offset.isdigit()
    if numeric and int(pos.value) > int(newest_offset):
        raise _past_the_end(options, info, pos, ending=ending)
    probe = _probe(options, info.partition_id, pos.value)
    if probe is None:
        raise _past_the_end(options, info, pos, ending=ending)
    seq, offset = probe
    if ending:
        # Inclusive: the event at this offset, or the last one before it if the offset lies
        # between events.
        return seq if offset == pos.value else seq - 1
    return seq


def _probe(
    options: ReadOptions,
    partition_id: str,
    position: str | datetime,
) -> tuple[int, str] | None:
    """Sequence number and offset of the first event at or after ``position``, or None."""
    return first_event_at(
        options.settings,
        partition_id,
        position,
        inclusive=True,
        wait_seconds=min(options.receive_timeout, 10.0),
    )
