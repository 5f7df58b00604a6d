"""The sink as the checkpoint of last resort: never read a range the sink already holds.

The store's checkpoint is behind the sink when it was lost (the SDK blob deleted and the fenced
copy removed, an ownership blob deleted with its intent) or restored from an older copy: read
from there, the sink's events would land again under other batch keys. Kafka Connect's S3 sink
recovers its offsets from the names of the objects it wrote; here the batch keys name the
ranges. So before the run records an intent, under the partition's lease, :class:`LastResort`
looks at the partition's batches in the sink (this source's, this hub generation's; listed once
per claim cycle):

* when batches hold the range's first event, the checkpoint moves past every batch that follows
  without a gap (with the offset the sink holds for its last event), recorded like a reset;
* a read never reaches into a batch the sink holds further on (a replay ahead of the
  checkpoint): it stops before it, and the next cycle passes over it;
* batches that cannot be this hub's (past its last event, or enqueued before it was created:
  an earlier hub of the same name whose checkpoints were lost too) are refused, or with
  ``on_checkpoint_ahead: reset_to_earliest`` this hub gets a generation of its own.

The listing may be older than the lease (a cycle's): it can only miss batches written since, by
owners whose checkpoints the store then shows. A pending intent is not looked at here: it is
replayed exactly as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.ops.run.plan import (
    PartitionTarget,
    Step,
    next_step,
    sink_coverage,
    snapshot_bound,
)
from dagster_eventhub_ingest.resources.errors import (
    CheckpointAheadError,
    ConfigurationError,
    SinkError,
)
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.balancing.base import RunLog
    from dagster_eventhub_ingest.ops.run.hub import PartitionInfo
    from dagster_eventhub_ingest.ops.run.ingestor import Ingestor, SinkEvent
    from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings
    from dagster_eventhub_ingest.ops.sinks.batch import BatchKey

__all__ = ["Adjusted", "LastResort"]

_UNLISTED: Any = object()


@dataclass(frozen=True)
class Adjusted:
    """A read step as :meth:`LastResort.adjust` leaves it.

    ``moved``: the checkpoint the run moved past what the sink holds (None: not moved), with
    ``note`` (what was recorded in ``ehireset``) and the partition's ``bound`` taken again from
    it.
    """

    step: Step
    generation: int | None
    bound: PartitionTarget
    moved: Checkpoint | None = None
    note: str | None = None


class LastResort:
    """What the sink holds, as one run's checkpoint of last resort (module docstring).

    Args:
        config: the run's settings (``on_checkpoint_ahead``, ``on_data_loss``, bounds).
        store: where a moved checkpoint is written (fenced, through the lease keeper).
        owner_id / hub_desc / log: for the notes and log lines.
    """

    def __init__(
        self,
        config: IngestSettings,
        store: PartitionStore,
        owner_id: str,
        hub_desc: str,
        log: RunLog,
    ) -> None:
        self.config = config
        self.store = store
        self.owner_id = owner_id
        self.hub_desc = hub_desc
        self.log = log
        self.ingestor: Ingestor | None = None
        self._listing: dict[str, list[BatchKey]] | None = _UNLISTED

    def new_cycle(self, ingestor: Ingestor) -> None:
        """Start a claim cycle: the next :meth:`adjust` lists the sink again, through
        ``ingestor`` (``sink_batches``; ``sink_event`` reads one event back; an ingestor
        without them trusts the store alone)."""
        self.ingestor = ingestor
        self._listing = _UNLISTED

    def _batches(self, pid: str) -> list[BatchKey]:
        """The partition's batches in the sink, from this cycle's listing."""
        if self._listing is _UNLISTED:
            assert self.ingestor is not None, "new_cycle() first"
            try:
                self._listing = self.ingestor.sink_batches()
            except (SinkError, ConfigurationError):
                raise
            except Exception as exc:
                from dagster_eventhub_ingest.ops.sinks.failures import sink_failure_retryable

                raise SinkError(
                    f"sink {self.ingestor.output_location!r}: cannot list the batches it holds "
                    f"({type(exc).__name__}: {str(exc)[:300]}); nothing was read. The run looks "
                    "before reading so that it never lands an event the sink already holds.",
                    retryable=sink_failure_retryable(exc),
                ) from exc
            if self._listing is None:
                self.log.warning(
                    f"sink {self.ingestor.output_location!r} cannot tell which batches it holds: "
                    "the run trusts the store's checkpoints alone"
                )
        return (self._listing or {}).get(pid, [])

    def adjust(
        self,
        keeper: LeaseKeeper,
        pid: str,
        cp: Checkpoint | None,
        step: Step,
        bound: PartitionTarget,
        info: PartitionInfo,
        generation: int | None,
        *,
        hub_created: int | None,
        cap: int | None,
    ) -> Adjusted:
        """``step`` (a read of ``pid`` planned from checkpoint ``cp``, lease held) adjusted to
        what the sink holds; the checkpoint moved first when the sink holds its first event.

        ``generation``: the hub generation the store knows for the partition; ``hub_created``:
        the hub's creation time (ms); ``cap``: the cycle's size (``next_step``).
        """
        held = self._batches(pid)
        if not held:
            return Adjusted(step, generation, bound)
        if (
            generation is None
            and hub_created is not None
            and any(b.generation == hub_created for b in held)
        ):
            # The store lost the generation a reset gave this hub; its batches name it.
            generation = hub_created
        moved: Checkpoint | None = None
        note: str | None = None
        while step.kind == "read":
            batches = [b for b in held if b.generation == generation]
            covered, stop = sink_coverage(
                step.start, step.end, [SeqRange(b.start, b.end) for b in batches]
            )
            if covered is None:
                if stop < step.end:
                    self.log.info(
                        f"read cut before a batch the sink holds hub={self.hub_desc} "
                        f"partition={pid} range=[{step.start}, {stop}] (was up to {step.end})"
                    )
                    step = Step("read", step.start, stop, skipped=step.skipped)
                break
            last = max((b for b in batches if b.end == covered), key=lambda b: b.start)
            assert self.ingestor is not None, "new_cycle() first"
            event = self.ingestor.sink_event(last, covered)
            earlier = self._earlier_hub(covered, event, info, hub_created)
            if earlier is not None:
                generation, note = self._new_generation(keeper, pid, cp, earlier, info, hub_created)
                cp = Checkpoint(pid, info.begin_sequence_number - 1, "-1")
            else:
                offset = event.offset if event is not None else None
                cp, note = self._pass(
                    keeper, pid, cp, step.start, covered, offset, last, hub_created
                )
            moved = cp
            skipped = step.skipped
            # The bound as if the snapshot had seen this checkpoint.
            bound = snapshot_bound(
                info, cp, self.config.max_events_per_partition, "skip", self.hub_desc
            )
            step = next_step(
                bound,
                cp,
                None,
                info.begin_sequence_number,
                self.config.on_data_loss,
                self.hub_desc,
                cap,
            )
            if step.kind == "read" and skipped is not None and step.skipped is None:
                step = Step("read", step.start, step.end, skipped=skipped)
        return Adjusted(step, generation, bound, moved, note)

    def _earlier_hub(
        self, covered: int, event: SinkEvent | None, info: PartitionInfo, hub_created: int | None
    ) -> str | None:
        """Why the sink's batches up to ``covered`` (``event`` is that last one as the sink
        holds it) cannot be this hub's events, or None."""
        if covered > info.last_enqueued_sequence_number:
            return (
                f"they reach {covered}, past the hub's last enqueued event "
                f"{info.last_enqueued_sequence_number}"
            )
        if hub_created is not None and event is not None and event.enqueued_time is not None:
            created = datetime.fromtimestamp(hub_created / 1000, timezone.utc)
            if event.enqueued_time < created:
                return (
                    f"event {covered} there was enqueued at {event.enqueued_time.isoformat()}, "
                    f"before this hub was created at {created.isoformat(timespec='seconds')}"
                )
        return None

    def _pass(
        self,
        keeper: LeaseKeeper,
        pid: str,
        cp: Checkpoint | None,
        start: int,
        covered: int,
        offset: str | None,
        last: BatchKey,
        hub_created: int | None,
    ) -> tuple[Checkpoint, str]:
        """Move the checkpoint past the batches the sink holds from ``start`` to ``covered``
        (``offset``: that of event ``covered``, as the sink holds it)."""
        before = cp.sequence_number if cp is not None else None
        why = (
            "its checkpoint was lost (a deleted blob)"
            if cp is None
            else "its checkpoint is older than the sink (restored from an older copy?)"
        )
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        note = (
            f"moved from {before} to {covered} at {now} by {self.owner_id}: the sink already "
            f"holds [{start}, {covered}] of this partition and {why}"
        )
        keeper.apply(
            pid,
            lambda o: self.store.reset_checkpoint(
                o,
                covered,
                offset,
                note,
                hub_created_ms=hub_created,
                generation=last.generation,
                landed_unknown=True,  # events landed that the count never saw
            ),
        )
        self.log.warning(f"checkpoint behind the sink hub={self.hub_desc} partition={pid}: {note}")
        return Checkpoint(pid, covered, offset, generation=last.generation), note

    def _new_generation(
        self,
        keeper: LeaseKeeper,
        pid: str,
        cp: Checkpoint | None,
        why: str,
        info: PartitionInfo,
        hub_created: int | None,
    ) -> tuple[int, str]:
        """The sink's batches of this partition are an earlier hub's: refuse, or (opted in)
        give this hub a generation of its own, so its batches never replace them."""
        target = info.begin_sequence_number - 1
        if self.config.on_checkpoint_ahead != "reset_to_earliest" or hub_created is None:
            raise CheckpointAheadError(
                f"hub={self.hub_desc} partition={pid}: the checkpoint is "
                f"{cp.sequence_number if cp is not None else 'missing'}, and the sink holds "
                f"batches of this partition from {target + 1} on, but {why}: they belong to an "
                "earlier hub of the same name (deleted and re-created, its sequence numbers "
                "restarted). Reading on after them would skip this hub's events, reading from "
                "the checkpoint would replace them, so nothing was read. To land this hub's "
                "events under batch keys of its own next to them, run once with "
                "on_checkpoint_ahead: reset_to_earliest (`ehingest run --config FILE "
                f"--partition {pid} --on-checkpoint-ahead reset_to_earliest`)."
            )
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        note = (
            f"reset from {cp.sequence_number if cp else None} to {target} at {now} by "
            f"{self.owner_id}: the sink's batches of this partition are an earlier hub's ({why})"
        )
        keeper.apply(
            pid,
            lambda o: self.store.reset_checkpoint(
                o, target, "-1", note, hub_created_ms=hub_created, generation=hub_created
            ),
        )
        self.log.warning(f"checkpoint reset hub={self.hub_desc} partition={pid}: {note}")
        return hub_created, note
