"""How far a partition's checkpoint is behind the hub: the one lag formula.

The run's report (:mod:`dagster_eventhub_ingest.ops.run.processor`), ``ehingest status`` and the
Dagster lag check (:mod:`dagster_eventhub_ingest.ops.status`), and the Airflow lag sensor (through
:mod:`dagster_eventhub_ingest.ops.status`) all measure lag here, so the figure a sensor waits on is
the figure a run reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["PartitionLag", "age_seconds", "partition_lag"]


@dataclass(frozen=True)
class PartitionLag:
    """Events enqueued after the checkpoint, and where the oldest of them is."""

    #: Events after the checkpoint (0 when caught up).
    events: int
    #: Sequence number of the oldest unprocessed event still retained (None when caught up):
    #: the event whose enqueued time gives the lag in seconds.
    oldest_unprocessed: int | None


def partition_lag(
    begin_sequence_number: int, last_enqueued_sequence_number: int, checkpoint: int | None
) -> PartitionLag:
    """The lag of a partition with these bounds (inclusive; -1 when empty) and checkpoint.

    No checkpoint (or one to be ignored) means every retained event is still to be read.
    """
    done = checkpoint if checkpoint is not None else begin_sequence_number - 1
    events = max(0, last_enqueued_sequence_number - done)
    return PartitionLag(events, max(done + 1, begin_sequence_number) if events else None)


def age_seconds(now: datetime, enqueued: datetime) -> float:
    """Seconds since ``enqueued`` (never negative: clocks of the hub and here differ)."""
    return max(0.0, (now - enqueued).total_seconds())
