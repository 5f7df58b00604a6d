"""What the run asks Event Hubs directly (on the driver): partition ids, bounds, one event's time.

Everything else is read on Spark executors by the ``eventhubs`` data source. The driver only
makes management calls, which are cheap, and at most one single-event receive per lagging
partition to tell how old the oldest unprocessed event is.

This module is the run's view of the hub: :class:`HubClient`, the calls the run makes (fakes
implement it in tests and simulations). The client that makes them against the service is
:class:`dagster_eventhub_ingest.resources.azure.hub_client.EventHubClient`; :class:`PartitionInfo`
is its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from dagster_eventhub_ingest.resources.azure.hub_client import PartitionInfo

__all__ = ["HubClient", "PartitionInfo"]


class HubClient(Protocol):
    """The few Event Hubs calls the run makes on the driver."""

    def partition_ids(self) -> list[str]:
        """Every partition id of the hub, in numeric order (``sort_partition_ids``)."""
        ...

    def hub_created_ms(self) -> int | None:
        """When the hub was created (ms since the epoch, the service's value), if known.

        Recorded with every checkpoint: a different value later means the hub was deleted and
        re-created under the same name, and sequence numbers restarted.
        """
        ...

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        """Bounds of each partition (one management call per partition)."""
        ...

    def enqueued_time_of(self, partition_id: str, sequence_number: int) -> datetime | None:
        """Enqueued time of one event, or None if it cannot be read quickly."""
        ...

    def enqueued_times(self, wanted: dict[str, int]) -> dict[str, datetime | None]:
        """:meth:`enqueued_time_of` for several partitions (partition -> sequence number)."""
        ...
