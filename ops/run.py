"""One ingestion run ("processor"): snapshot, claim, intent, read, write, checkpoint, release.

PUBLIC API CONTRACT (shared by the CLI and the Dagster integration). The types below are the
agreed interface; the implementation fills in ``run_ingestion``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from resources.settings import EventHubSettings, SinkSettings, StoreSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["IngestConfig", "PartitionReport", "ReplaySpec", "RunReport", "run_ingestion"]


@dataclass(frozen=True)
class IngestConfig:
    """Everything one run needs; the CLI builds it from YAML, Dagster from resources."""

    eventhub: EventHubSettings
    store: StoreSettings
    sink: SinkSettings
    strategy: str = "balanced"
    max_events_per_partition: int = 100_000
    lease_expiry_seconds: float = 60.0
    on_data_loss: Literal["fail", "skip"] = "fail"
    receive_timeout_seconds: float = 30.0
    prefetch: int = 300
    max_readers_per_partition: int = 1


@dataclass(frozen=True)
class ReplaySpec:
    """Re-read a range into the sink without touching the live checkpoint.

    Either ``ranges`` (partition id -> inclusive ``(start_seq, end_seq)``) or a
    ``starting_position`` / ``ending_position`` (sequence number, ``earliest``, ``latest``, ...).
    """

    ranges: dict[str, tuple[int, int]] | None = None
    starting_position: str | None = None
    ending_position: str | None = None


@dataclass
class PartitionReport:
    """What one run knows about one target partition when it ends (for logs and metadata)."""

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
    skipped_ranges: list[tuple[int, int]] = field(default_factory=list)
    up_to_date: bool = False


@dataclass
class RunReport:
    """The outcome of ``run_ingestion``; ``complete`` iff every target reached its bound."""

    owner_id: str
    partitions: dict[str, PartitionReport]
    complete: bool
    output_location: str | None = None


def run_ingestion(
    config: IngestConfig,
    spark: SparkSession | None,
    *,
    owner_id: str,
    partition_ids: Sequence[str] | None = None,
    replay: ReplaySpec | None = None,
    is_owner_dead: Callable[[str], bool] | None = None,
    log: Any = None,
) -> RunReport:
    """Bring ``partition_ids`` (default: all) up to their snapshot bound, exactly once."""
    raise NotImplementedError
