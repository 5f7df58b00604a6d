"""Pure planning: a run's per-partition bound, the next range to ingest, replay ranges.

No I/O here, so every rule about ranges (bounds, pending intents, retention gaps, replay
positions) is unit-tested without a hub, a store or Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dagster_eventhub_ingest.ops.run.hub import PartitionInfo
from dagster_eventhub_ingest.resources.config import OnDataLoss
from dagster_eventhub_ingest.resources.errors import ConfigurationError, DataLossError, RangeError
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Intent

__all__ = [
    "PartitionTarget",
    "Step",
    "check_intent_layout",
    "checkpoint_problem",
    "effective_checkpoint",
    "next_step",
    "replay_ranges",
    "satisfied",
    "sink_coverage",
    "sink_layout",
    "snapshot_bound",
]


@dataclass(frozen=True)
class PartitionTarget:
    """A run's target for one partition: bring the checkpoint to ``end`` (inclusive).

    ``start`` is where reading would begin at snapshot time; ``end < start`` means there is
    nothing to read. ``gap`` is a retention gap ``(first, last)`` found at snapshot time.
    """

    partition_id: str
    start: int
    end: int
    checkpoint: int | None
    gap: SeqRange | None = None

    @property
    def target(self) -> int | None:
        """The checkpoint value that satisfies this bound (None: no checkpoint needed)."""
        if self.end >= self.start or self.gap is not None:
            return self.end
        return self.checkpoint


def check_intent_layout(hub: str, partition_id: str, intent: Intent | None, layout: str) -> None:
    """A pending intent is replayed into the sink layout it was written with, or refused.

    Its batch may already be in the sink under the old layout; the replay would add it a
    second time under the new one (and leave a folder no reader accepts).
    """
    if intent is None or intent.layout is None or intent.layout == layout:
        return
    raise ConfigurationError(
        f"sink: hub={hub} partition={partition_id}: the pending intent [{intent.start}, "
        f"{intent.end}] left by owner {intent.owner_id!r} was written with sink "
        f"{intent.layout}, but the sink is now {layout}. Replaying it into another "
        "layout would land its events twice; nothing was claimed or read. Run once more "
        "with the previous sink settings to finish it, then change them (or write to a new "
        "path)."
    )


def satisfied(bound: PartitionTarget, cp: Checkpoint | None) -> bool:
    """Whether the checkpoint ``cp`` reached the bound (a bound with no target always is)."""
    target = bound.target
    return target is None or (cp is not None and cp.sequence_number >= target)


def effective_checkpoint(*cps: Checkpoint | None) -> Checkpoint | None:
    """The furthest of the given checkpoints (the SDK's, the lease's progress), or None."""
    best: Checkpoint | None = None
    for cp in cps:
        if cp is not None and (best is None or cp.sequence_number > best.sequence_number):
            best = cp
    return best


def _data_loss_message(
    hub: str, partition_id: str, first_missing: int, last_missing: int, begin: int
) -> str:
    return (
        f"hub={hub} partition={partition_id}: events {first_missing}..{last_missing} expired "
        f"before they were ingested (the checkpoint is at {first_missing - 1}, the earliest "
        f"retained event is {begin}); they cannot be read any more. To continue from "
        f"{begin} and record the gap in the run report set on_data_loss: skip; to keep them "
        "next time raise the hub's retention or run ingestion more often."
    )


def sink_layout(format: str, partition_by: Sequence[str]) -> str:
    """How a batch is laid out in the sink, as recorded with each intent (compared as text)."""
    return f"format={format} partition_by=[{','.join(partition_by)}]"


def checkpoint_problem(
    info: PartitionInfo,
    checkpoint: Checkpoint | None,
    intent: Intent | None = None,
    hub_created_ms: int | None = None,
) -> str | None:
    """Why ``checkpoint`` (or a pending ``intent``) cannot belong to this hub, or None.

    A checkpoint past the hub's last enqueued event, a negative one (below -1, "nothing read"),
    an offset past the last enqueued offset, or one recorded for a hub created at another time
    (deleted and re-created under the same name: sequence numbers restart at 0) would make the
    run skip every new event up to it, silently. The hub's numbers only grow, so read the
    checkpoint before the partition properties to compare them safely.
    """
    last = info.last_enqueued_sequence_number
    if checkpoint is not None:
        seq = checkpoint.sequence_number
        if seq < -1:
            return f"the checkpoint {seq} is negative (sequence numbers start at 0)"
        if (
            checkpoint.hub_created_ms is not None
            and hub_created_ms is not None
            and checkpoint.hub_created_ms != hub_created_ms
        ):
            return (
                f"the checkpoint {seq} was written for an earlier hub of the same name "
                f"(created at {_ms_iso(checkpoint.hub_created_ms)}; this one was created at "
                f"{_ms_iso(hub_created_ms)}: it was deleted and re-created, and its sequence "
                f"numbers restarted; last enqueued is now {last})"
            )
        if seq > last:
            return (
                f"the checkpoint {seq} is ahead of the hub's last enqueued event {last} (the hub "
                "was re-created, or the checkpoint was edited by hand)"
            )
        cp_off, last_off = _as_int(checkpoint.offset), _as_int(info.last_enqueued_offset)
        if cp_off is not None and last_off is not None and cp_off > last_off:
            return (
                f"the checkpoint's offset {checkpoint.offset} is ahead of the hub's last "
                f"enqueued offset {info.last_enqueued_offset} (unknown to the hub)"
            )
    if (
        intent is not None
        and intent.end > last
        and (checkpoint is None or intent.end > checkpoint.sequence_number)
    ):
        return (
            f"the pending intent [{intent.start}, {intent.end}] left by owner "
            f"{intent.owner_id!r} ends after the hub's last enqueued event {last}"
        )
    return None


def _as_int(raw: str | None) -> int | None:
    try:
        return int(raw) if raw not in (None, "") else None
    except ValueError:
        return None


def _ms_iso(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds")


def snapshot_bound(
    info: PartitionInfo,
    checkpoint: Checkpoint | None,
    max_events: int,
    on_data_loss: OnDataLoss,
    hub: str = "",
) -> PartitionTarget:
    """The bound ``end_p = min(last_enqueued, checkpoint_p + max_events)`` of one partition.

    A partition never checkpointed starts at its earliest retained event (nothing was lost).
    A checkpoint older than retention is data loss: :class:`DataLossError`, or with
    ``on_data_loss='skip'`` reading starts at ``begin_sequence_number`` and ``gap`` says what
    was skipped.
    """
    if max_events < 1:
        raise RangeError(f"max_events_per_partition must be >= 1, got {max_events}")
    begin, last = info.begin_sequence_number, info.last_enqueued_sequence_number
    cp = checkpoint.sequence_number if checkpoint is not None else None
    start = begin if cp is None else cp + 1
    gap = None
    if cp is not None and begin > cp + 1:
        if on_data_loss != "skip":
            raise DataLossError(
                _data_loss_message(hub, info.partition_id, cp + 1, begin - 1, begin)
            )
        gap = SeqRange(cp + 1, begin - 1)
        start = begin
    end = min(last, start - 1 + max_events)
    if end < start and gap is None:
        end = start - 1
    return PartitionTarget(info.partition_id, start, end, cp, gap)


@dataclass(frozen=True)
class Step:
    """What the current owner does with a claimed partition in one cycle.

    ``kind``: ``read`` (record intent ``[start, end]`` then read it), ``replay`` (read exactly
    the pending intent), ``skip`` (checkpoint to ``end`` without reading: retention gap with
    ``on_data_loss: skip``), ``clear`` (a stale intent already covered by the checkpoint),
    ``done`` (nothing to do for this run's bound).
    """

    kind: Literal["read", "replay", "skip", "clear", "done"]
    start: int = 0
    end: int = -1
    skipped: SeqRange | None = None

    @property
    def range(self) -> SeqRange:
        """The range this step reads (``read``/``replay``) or checkpoints past (``skip``)."""
        return SeqRange(self.start, self.end)


#: A lone run's cycle size grows by this factor per cycle, after ``_ALONE_BEFORE_GROWING``
#: cycles alone, up to ``max_events_per_cycle`` times ``_MAX_GROWTH``.
_GROWTH = 4
_ALONE_BEFORE_GROWING = 2
_MAX_GROWTH = 16
#: What a lone run's only pending partition is read at from its first cycle (1,280,000 events
#: by default): a peer can take no share of it, so a bound only limits what a crash replays,
#: and every cycle costs a Spark job (~1 s on 2 cores: planning, reader connections, the
#: readers' tails, commit, verification).
_LONE_PARTITION_GROWTH = 64
#: A cycle also reads the rest of its partition's range when the rest is at most
#: ``max_events_per_cycle // _TAIL`` events (``next_step``).
_TAIL = 4


def cycle_size(
    max_events_per_cycle: int | None, cycles_alone: int, pending: int | None = None
) -> int | None:
    """Events per partition this claim cycle reads: ``max_events_per_cycle``, grown while alone.

    The configured size lets a run that joins mid-read claim its share at the next cycle
    boundary; but every cycle is a Spark job with its own fixed cost (task start, connections,
    commit, verification), so a run that keeps claiming every pending partition (nobody to
    share with) reads bigger batches: after 2 cycles alone 4x, then 16x the configured size
    (20,000 -> 80,000 -> 320,000 by default). A cycle that claims less than every pending
    partition (a peer took its share) starts over at the configured size. None stays None
    (one cycle per run).

    A lone run whose ``pending`` partitions are one (a hot partition; the last one behind)
    reads 64x from its first cycle (1,280,000 events by default): a partition is read by one
    owner at a time, so a peer that joined could only take it over whole at a boundary
    (nothing read in parallel), and smaller cycles would buy no share, only a Spark job each
    (~1 s each on 2 cores). The bound that stays limits what a crash replays.
    """
    if max_events_per_cycle is None:
        return None
    if pending == 1 and cycles_alone > 0:
        return max_events_per_cycle * _LONE_PARTITION_GROWTH
    grown = max(0, cycles_alone - _ALONE_BEFORE_GROWING)
    return max_events_per_cycle * min(_GROWTH**grown, _MAX_GROWTH)


def next_step(
    bound: PartitionTarget,
    checkpoint: Checkpoint | None,
    intent: Intent | None,
    begin_sequence_number: int,
    on_data_loss: OnDataLoss,
    hub: str = "",
    max_events: int | None = None,
) -> Step:
    """Decide one cycle's work on a partition from the state read under a held lease.

    A pending intent is always replayed exactly (same range, so the idempotent write yields the
    same output once), whatever this run's bound is. Otherwise the range is
    ``[checkpoint + 1, bound.end]`` (a peer may have moved the checkpoint since the snapshot),
    cut to its first ``max_events`` events (``max_events_per_cycle``): the rest is read in
    later cycles, by this run or a peer that claims the partition meanwhile. A rest of at most
    a quarter of ``max_events`` is read now: a cycle of its own would be a whole Spark job
    (planning, tasks, commit, verification) for a few events.
    """
    cp = checkpoint.sequence_number if checkpoint is not None else None
    pid = bound.partition_id
    begin = begin_sequence_number
    if intent is not None:
        if cp is not None and intent.end <= cp:
            return Step("clear", cp, cp)
        if intent.start < begin_sequence_number:
            if on_data_loss != "skip":
                raise DataLossError(
                    f"hub={hub} partition={pid}: the pending intent [{intent.start}, "
                    f"{intent.end}] left by owner {intent.owner_id!r} can no longer be replayed: "
                    f"events before {begin_sequence_number} expired. Its output may or may not "
                    "have been written. Set on_data_loss: skip to write what is still retained of "
                    "it and checkpoint past it (the run report lists the expired part as "
                    "skipped)."
                )
            if intent.end < begin_sequence_number:
                return Step("skip", intent.start, intent.end, skipped=intent.range)
            # Only the head expired: replay what is left under the intent's own batch key (so
            # it replaces what a crashed attempt may have written, never adds to it).
            return Step(
                "replay",
                intent.start,
                intent.end,
                skipped=SeqRange(intent.start, begin_sequence_number - 1),
            )
        return Step("replay", intent.start, intent.end)
    target = bound.target
    if target is None or (cp is not None and cp >= target):
        return Step("done")
    start = begin_sequence_number if cp is None else cp + 1
    skipped = None
    if cp is not None and begin_sequence_number > cp + 1:
        if on_data_loss != "skip":
            raise DataLossError(_data_loss_message(hub, pid, cp + 1, begin - 1, begin))
        skipped = SeqRange(cp + 1, begin_sequence_number - 1)
        start = begin_sequence_number
    end = target
    if max_events is not None and target - (start - 1 + max_events) > max_events // _TAIL:
        end = start - 1 + max_events
    if end < start:
        if skipped is not None:
            return Step("skip", skipped.start, skipped.end, skipped=skipped)
        return Step("done")
    return Step("read", start, end, skipped=skipped)


def sink_coverage(start: int, end: int, held: Sequence[SeqRange]) -> tuple[int | None, int]:
    """What the sink already holds of the range ``[start, end]`` a run is about to read.

    ``held``: the ranges of the partition's batches in the sink (this source, this hub
    generation). Returns ``(covered, stop)``: ``covered`` is the last sequence number of the
    batches that hold ``start`` and what follows it without a gap (None when no batch holds
    ``start``): the checkpoint belongs there, not behind. ``stop`` is where a read from
    ``start`` must end so as not to overlap a batch the sink holds further on (``end`` when
    none does): its events would land twice under two keys.
    """
    covered = start - 1
    moved = True
    while moved:
        moved = False
        for first, last in held:
            if first <= covered + 1 <= last:
                covered, moved = last, True
    if covered >= start:
        return covered, end
    later = [first for first, _ in held if start < first <= end]
    return None, (min(later) - 1 if later else end)


def _position(
    raw: str | int | None,
    info: PartitionInfo,
    checkpoint: Checkpoint | None,
    name: str,
    default: int,
) -> int:
    if raw is None or raw == "":
        return default
    if isinstance(raw, int) or raw.lstrip("-").isdigit():
        return int(raw)
    key = raw.strip().lower()
    if key == "earliest":
        return info.begin_sequence_number
    if key == "latest":
        return info.last_enqueued_sequence_number
    if key == "checkpoint":
        # Never checkpointed: nothing ingested yet, i.e. just before the earliest event.
        return checkpoint.sequence_number if checkpoint else info.begin_sequence_number - 1
    raise RangeError(
        f"replay {name}={raw!r} is not valid; use a sequence number, 'earliest', 'latest' or "
        "'checkpoint'"
    )


def replay_ranges(
    partition_ids: Sequence[str],
    infos: Mapping[str, PartitionInfo],
    checkpoints: Mapping[str, Checkpoint],
    *,
    ranges: Mapping[str, SeqRange] | None,
    starting_position: str | None,
    ending_position: str | None,
    on_data_loss: OnDataLoss,
    hub: str = "",
) -> tuple[dict[str, SeqRange], dict[str, SeqRange]]:
    """Resolve a replay into inclusive ranges per partition, and the expired parts skipped.

    Raises :class:`RangeError` for a reversed range or one past the last enqueued event, and
    :class:`DataLossError` for an expired start unless ``on_data_loss='skip'`` (then clipped).
    """
    if ranges is not None and (starting_position or ending_position):
        raise RangeError("replay: give either ranges or starting/ending position, not both")
    resolved: dict[str, SeqRange] = {}
    skipped: dict[str, SeqRange] = {}
    wanted: dict[str, SeqRange] = {}
    if ranges is not None:
        unknown = [p for p in ranges if p not in infos]
        if unknown:
            raise RangeError(
                f"replay: partition(s) {', '.join(unknown)} unknown; valid: {', '.join(infos)}"
            )
        wanted = {p: SeqRange(int(s), int(e)) for p, (s, e) in ranges.items()}
    else:
        for pid in partition_ids:
            info, cp = infos[pid], checkpoints.get(pid)
            start = _position(
                starting_position, info, cp, "starting_position", info.begin_sequence_number
            )
            end = _position(
                ending_position, info, cp, "ending_position", info.last_enqueued_sequence_number
            )
            wanted[pid] = SeqRange(start, end)
    for pid, (start, end) in wanted.items():
        info = infos[pid]
        if end < start:
            if ranges is None:
                continue  # positions that select nothing in this partition
            raise RangeError(f"replay partition {pid}: end {end} is before start {start}")
        if end > info.last_enqueued_sequence_number:
            raise RangeError(
                f"replay partition {pid}: end {end} is after the last enqueued event "
                f"{info.last_enqueued_sequence_number}"
            )
        if start < info.begin_sequence_number:
            if on_data_loss != "skip":
                raise DataLossError(
                    f"hub={hub} partition={pid}: replay start {start} expired; the earliest "
                    f"retained event is {info.begin_sequence_number}. Start at or after it, or "
                    "set on_data_loss: skip to clip the range."
                )
            skipped[pid] = SeqRange(start, info.begin_sequence_number - 1)
            start = info.begin_sequence_number
            if end < start:
                continue
        resolved[pid] = SeqRange(start, end)
    return resolved, skipped
