"""Per-partition progress without running anything: owner, checkpoint, lag, pending intent.

``ehingest status`` prints it; the Dagster integration can show the same facts. Read-only: it
lists the store and asks the hub for bounds, never claims or writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from dagster_eventhub_ingest.ops.lag import age_seconds, partition_lag
from dagster_eventhub_ingest.ops.run.hub import HubClient
from dagster_eventhub_ingest.ops.run.plan import checkpoint_problem
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore

__all__ = ["PartitionStatus", "partition_status"]


@dataclass(frozen=True)
class PartitionStatus:
    """One partition as the store and the hub see it right now.

    ``owner`` is empty when nobody holds the lease; ``lease_expired`` is judged on the store's
    clock. ``lag_seconds`` is the age of the oldest event not yet checkpointed (0 when caught
    up, None when it could not be read in time). ``intent`` is a pending ``[start, end]``.
    ``problem`` says why the checkpoint (or intent) cannot belong to this hub (ahead of it, or
    written for a hub since re-created); a run refuses such a partition until it is reset.
    ``checkpoint_reset`` is the note of the last reset, if any.
    """

    partition_id: str
    owner: str
    lease_expired: bool
    checkpoint: int | None
    checkpoint_offset: str | None
    begin_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_time: datetime | None
    lag_events: int
    lag_seconds: float | None
    intent: SeqRange | None
    intent_owner: str | None
    problem: str | None = None
    checkpoint_reset: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO strings)."""
        out = asdict(self)
        out["last_enqueued_time"] = (
            self.last_enqueued_time.isoformat() if self.last_enqueued_time else None
        )
        out["intent"] = list(self.intent) if self.intent else None
        return out


def partition_status(
    store: PartitionStore,
    hub: HubClient,
    *,
    lease_expiry_seconds: float,
    partition_ids: Sequence[str] | None = None,
    lag_seconds: bool = True,
) -> list[PartitionStatus]:
    """The status of ``partition_ids`` (default: all), in the hub's partition order."""
    targets = list(partition_ids) if partition_ids else hub.partition_ids()
    created = hub.hub_created_ms()
    # The store before the hub, as the run does: a checkpoint written meanwhile is never ahead.
    owns = store.list_ownership()
    cps = store.list_checkpoints(owns)
    infos = hub.partition_info(targets)
    now = store.now()
    expiry = timedelta(seconds=lease_expiry_seconds)
    rows: list[dict[str, Any]] = []
    wanted: dict[str, int] = {}
    for pid in targets:
        info, own, cp = infos[pid], owns.get(pid), cps.get(pid)
        problem = checkpoint_problem(info, cp, own.intent if own else None, created)
        lag = partition_lag(
            info.begin_sequence_number,
            info.last_enqueued_sequence_number,
            # A checkpoint with a problem counts for nothing: every retained event is to be read.
            cp.sequence_number if cp and problem is None else None,
        )
        if lag.oldest_unprocessed is not None:
            wanted[pid] = lag.oldest_unprocessed
        rows.append(
            dict(
                partition_id=pid,
                owner=own.owner_id if own else "",
                lease_expired=bool(own and own.owner_id and own.is_expired(now, expiry)),
                checkpoint=cp.sequence_number if cp else None,
                checkpoint_offset=cp.offset if cp else None,
                begin_sequence_number=info.begin_sequence_number,
                last_enqueued_sequence_number=info.last_enqueued_sequence_number,
                last_enqueued_time=info.last_enqueued_time,
                lag_events=lag.events,
                lag_seconds=0.0 if lag.events == 0 else None,
                intent=own.intent.range if own and own.intent else None,
                intent_owner=own.intent.owner_id if own and own.intent else None,
                problem=problem,
                checkpoint_reset=cp.reset if cp else None,
            )
        )
    if wanted and lag_seconds:
        times = hub.enqueued_times(wanted)
        wall = datetime.now(timezone.utc)
        for row in rows:
            when = times.get(row["partition_id"])
            if when is not None:
                row["lag_seconds"] = age_seconds(wall, when)
    return [PartitionStatus(**row) for row in rows]
