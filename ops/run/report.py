"""What a run reports when it ends: per target partition, and for the whole run."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dagster_eventhub_ingest.ops.lag import age_seconds, partition_lag
from dagster_eventhub_ingest.ops.run.hub import PartitionInfo
from dagster_eventhub_ingest.ops.run.plan import PartitionTarget, satisfied
from dagster_eventhub_ingest.ops.sinks.batch import PartitionWriteStats
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.records import Checkpoint

__all__ = ["PartitionReport", "RunReport", "record_end_state"]


@dataclass
class PartitionReport:
    """What one run knows about one target partition when it ends (for logs and metadata).

    ``events``/``bytes``/sequence and enqueued-time ranges count what THIS run wrote;
    ``checkpoint_sequence_number`` and the lag are the partition's state at the end, whoever
    read it. ``read_by`` names the owners seen moving the checkpoint during the run
    (``"unknown"`` when a peer did it between two looks). ``skipped_ranges`` are inclusive
    ranges lost to retention and passed over (``on_data_loss: skip``). ``checkpoint_reset``
    says why and from where this run reset the checkpoint (``on_checkpoint_ahead``), or moved
    it past what the sink already held (a checkpoint lost or older than the sink).
    ``replayed_intents`` are pending ranges another owner recorded and this run replayed:
    ``(start, end, owner)``.
    """

    partition_id: str
    events: int = 0
    bytes: int = 0
    first_sequence_number: int | None = None
    last_sequence_number: int | None = None
    first_enqueued_time: datetime | None = None
    last_enqueued_time: datetime | None = None
    checkpoint_sequence_number: int | None = None
    snapshot_end_sequence_number: int | None = None
    lag_events: int | None = None
    lag_seconds: float | None = None
    read_by: list[str] = field(default_factory=list)
    skipped_ranges: list[SeqRange] = field(default_factory=list)
    checkpoint_reset: str | None = None
    up_to_date: bool = False
    last_enqueued_sequence_number: int | None = None
    ranges_written: list[SeqRange] = field(default_factory=list)
    replayed_intents: list[tuple[int, int, str]] = field(default_factory=list)
    #: Events landed in the sink for the partition in all (the checkpoint's ``landed``); None
    #: when unknown.
    landed_total: int | None = None

    def add(self, result: PartitionWriteStats, owner_id: str) -> None:
        """Fold one written range into the report."""
        self.events += result.events
        self.bytes += result.bytes
        self.ranges_written.append(SeqRange(result.start, result.end))
        if result.first_sequence_number is not None and (
            self.first_sequence_number is None
            or result.first_sequence_number < self.first_sequence_number
        ):
            self.first_sequence_number = result.first_sequence_number
        if result.last_sequence_number is not None and (
            self.last_sequence_number is None
            or result.last_sequence_number > self.last_sequence_number
        ):
            self.last_sequence_number = result.last_sequence_number
        if result.first_enqueued_time is not None and (
            self.first_enqueued_time is None
            or result.first_enqueued_time < self.first_enqueued_time
        ):
            self.first_enqueued_time = result.first_enqueued_time
        if result.last_enqueued_time is not None and (
            self.last_enqueued_time is None or result.last_enqueued_time > self.last_enqueued_time
        ):
            self.last_enqueued_time = result.last_enqueued_time
        if owner_id not in self.read_by:
            self.read_by.append(owner_id)


@dataclass
class RunReport:
    """The outcome of ``run_ingestion``; ``complete`` iff every target reached its bound.

    In replay mode ``complete`` means every requested range was written; checkpoints untouched.
    """

    owner_id: str
    partitions: dict[str, PartitionReport]
    complete: bool
    output_location: str | None = None
    hub: str = ""
    consumer_group: str = ""
    replay: bool = False
    cycles: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: Wall and driver-CPU seconds per phase (``dagster_eventhub_ingest.ops.run.progress.PHASES``):
    #: where the run's time went, e.g. ``{"spark_start": {"seconds": 4.1, "cpu_seconds": 0.2},
    #: ...}``.
    phases: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def events(self) -> int:
        """Events this run wrote, over all partitions."""
        return sum(p.events for p in self.partitions.values())

    @property
    def bytes(self) -> int:
        """Body bytes this run wrote, over all partitions."""
        return sum(p.bytes for p in self.partitions.values())

    @property
    def incomplete_partitions(self) -> list[str]:
        """Target partitions that did not reach their bound."""
        return [p for p, r in self.partitions.items() if not r.up_to_date]


def record_end_state(
    reports: Mapping[str, PartitionReport],
    targets: Sequence[str],
    infos: Mapping[str, PartitionInfo],
    cps: Mapping[str, Checkpoint],
    bounds: Mapping[str, PartitionTarget],
    *,
    now: datetime,
    replay: bool,
    resets: Collection[str],
    report_lag_seconds: bool,
) -> dict[str, int]:
    """Fill each target's state at the end: checkpoint, lag, up to date, a gap a peer passed.

    ``resets``: partitions whose checkpoint is still to be reset (never up to date). Returns
    the partitions whose lag in seconds needs the enqueued time of their oldest unprocessed
    event, which neither the partition's properties nor this run's writes tell (partition id ->
    that event's sequence number).
    """
    wanted: dict[str, int] = {}
    for pid in targets:
        r, info, cp = reports[pid], infos[pid], cps.get(pid)
        r.checkpoint_sequence_number = cp.sequence_number if cp else None
        r.landed_total = cp.landed if cp else None
        r.last_enqueued_sequence_number = info.last_enqueued_sequence_number
        lag = partition_lag(
            info.begin_sequence_number,
            info.last_enqueued_sequence_number,
            cp.sequence_number if cp else None,
        )
        r.lag_events = lag.events
        if lag.oldest_unprocessed is None:
            r.lag_seconds = 0.0
        elif report_lag_seconds:
            since = _oldest_unprocessed_bound(r, info, cp)
            if since is not None:
                r.lag_seconds = age_seconds(now, since)
            else:
                wanted[pid] = lag.oldest_unprocessed
        if not replay:
            bound = bounds[pid]
            r.up_to_date = satisfied(bound, cp) and pid not in resets
            if (
                bound.gap is not None
                and not r.skipped_ranges
                and cp is not None
                and cp.sequence_number >= bound.gap.end
            ):
                r.skipped_ranges.append(bound.gap)  # a peer passed over it
    return wanted


def _oldest_unprocessed_bound(
    report: PartitionReport, info: PartitionInfo, cp: Checkpoint | None
) -> datetime | None:
    """When the oldest unprocessed event was enqueued (or a time no later), without a receive.

    One event behind: it is the last enqueued event, whose time the partition properties give
    (exact). Otherwise, when this run wrote the checkpointed event, the next one was enqueued
    at or after it: its time bounds the age from above (tight on a busy partition). None when
    neither applies (the caller then receives that event).
    """
    if report.lag_events == 1 and info.last_enqueued_time is not None:
        return info.last_enqueued_time
    if (
        cp is not None
        and report.last_sequence_number == cp.sequence_number
        and report.last_enqueued_time is not None
    ):
        return report.last_enqueued_time
    return None
