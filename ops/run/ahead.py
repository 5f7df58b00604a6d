"""Checkpoints the hub cannot have produced (``on_checkpoint_ahead``): found, refused or reset.

A checkpoint ahead of the partition's last event, or from a hub since re-created, would make
the run skip every new event up to it. At the snapshot :meth:`CheckpointsAhead.find` refuses
the run (``fail``) or marks the partitions; under the lease :meth:`CheckpointsAhead.reset`
looks again and resets each marked checkpoint to the earliest retained event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.ops.run.hub import HubClient, PartitionInfo
from dagster_eventhub_ingest.ops.run.lease import LeaseKeeper
from dagster_eventhub_ingest.ops.run.log import TeeLog
from dagster_eventhub_ingest.ops.run.plan import checkpoint_problem, effective_checkpoint
from dagster_eventhub_ingest.resources.errors import CheckpointAheadError
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import Checkpoint, Ownership

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.config import OnCheckpointAhead

__all__ = ["CheckpointsAhead", "Reset"]


@dataclass(frozen=True)
class Reset:
    """A checkpoint reset under the lease: the lease and the checkpoint as they are now, and
    the note recorded with it (also the run report's ``checkpoint_reset``)."""

    ownership: Ownership
    checkpoint: Checkpoint
    note: str


class CheckpointsAhead:
    """One run's checkpoints ahead of the hub; ``pending``: partition -> why, still to reset."""

    def __init__(
        self,
        policy: OnCheckpointAhead,
        store: PartitionStore,
        hub: HubClient,
        *,
        owner_id: str,
        hub_desc: str,
        log: TeeLog,
    ) -> None:
        self.policy = policy
        self.store = store
        self.hub = hub
        self.owner_id = owner_id
        self.hub_desc = hub_desc
        self.log = log
        self.pending: dict[str, str] = {}

    def find(
        self,
        targets: Sequence[str],
        infos: Mapping[str, PartitionInfo],
        cps: Mapping[str, Checkpoint],
        owns: Mapping[str, Ownership],
        hub_created: int | None,
    ) -> None:
        """Find checkpoints the hub cannot have produced; fail, or mark them for a reset."""
        problems: dict[str, str] = {}
        for pid in targets:
            own = owns.get(pid)
            why = checkpoint_problem(
                infos[pid], cps.get(pid), own.intent if own else None, hub_created
            )
            if why is not None:
                problems[pid] = why
        if not problems:
            return
        if self.policy != "reset_to_earliest":
            detail = "; ".join(
                f"partition {pid}: {why}, earliest retained event "
                f"{infos[pid].begin_sequence_number}"
                for pid, why in problems.items()
            )
            flags = " ".join(f"--partition {pid}" for pid in problems)
            raise CheckpointAheadError(
                f"hub={self.hub_desc}: checkpoint ahead of the hub, {detail}. Reading on would "
                "skip every new event up to the checkpoint, so nothing was claimed or read. To "
                "restart from the earliest retained event, run once with on_checkpoint_ahead: "
                f"reset_to_earliest (`ehingest run --config FILE {flags} --on-checkpoint-ahead "
                "reset_to_earliest`, or that key in the Dagster run config); it is recorded in "
                "the run report and the checkpoint's ehireset metadata. If the checkpoint was "
                "edited by mistake, restore it instead."
            )
        for pid, why in problems.items():
            self.log.warning(
                f"checkpoint ahead hub={self.hub_desc} partition={pid} owner={self.owner_id}: "
                f"{why}; resetting to the earliest retained event "
                f"{infos[pid].begin_sequence_number} (on_checkpoint_ahead=reset_to_earliest)"
            )
        self.pending.update(problems)

    def reset(
        self,
        keeper: LeaseKeeper,
        pid: str,
        own: Ownership,
        sdk_cp: Checkpoint | None,
        infos: dict[str, PartitionInfo],
        hub_created: int | None,
    ) -> Reset | None:
        """Under the lease: look again (``infos`` updated), and reset the checkpoint if it is
        still impossible. None when a peer reset it meanwhile."""
        cp = effective_checkpoint(sdk_cp, own.progress)
        infos.update(self.hub.partition_info([pid]))
        info = infos[pid]
        why = checkpoint_problem(info, cp, own.intent, hub_created)
        del self.pending[pid]
        if why is None:
            return None
        target = info.begin_sequence_number - 1
        # Sequence numbers restarted, so batch keys would repeat the old hub's and replace its
        # batches in the sink: unless the checkpoint is known to be this very hub's, the new
        # hub's batches get its creation time as their generation
        # (dagster_eventhub_ingest.ops.sinks.batch.batch_key).
        generation = None
        if hub_created is not None and (cp is None or cp.hub_created_ms != hub_created):
            generation = hub_created
        note = (
            f"reset from {cp.sequence_number if cp else None} to {target} at "
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} by {self.owner_id}: {why}"
        )
        updated = keeper.apply(
            pid,
            lambda o: self.store.reset_checkpoint(
                o, target, "-1", note, hub_created_ms=hub_created, generation=generation
            ),
        )
        self.log.warning(f"checkpoint reset hub={self.hub_desc} partition={pid}: {note}")
        return Reset(
            updated,
            Checkpoint(pid, target, "-1", hub_created_ms=hub_created, generation=generation),
            note,
        )
