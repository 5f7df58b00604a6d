"""A sensor that keeps dynamic partitions in sync with the Event Hub's partition ids.

Event Hubs can gain partitions (premium/dedicated tiers scale up; never down), so with dynamic
partitions the asset learns new ones here instead of needing a redeploy.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from dagster_eventhub_ingest.dagster_project.resources import EventHubResource
from dagster_eventhub_ingest.resources.azure.hub_client import sort_partition_ids
from dagster_eventhub_ingest.resources.config import AssetOptions

__all__ = ["build_partition_sync_sensor", "partitions_to_add"]


def partitions_to_add(hub_ids: Sequence[str], known: Sequence[str]) -> list[str]:
    """Hub partition ids Dagster does not know yet, in numeric order."""
    have = set(known)
    return [pid for pid in sort_partition_ids(hub_ids) if pid not in have]


def build_partition_sync_sensor(
    partitions_def: dg.DynamicPartitionsDefinition,
    *,
    eventhub_resource_key: str = "eventhub",
    name: str | None = None,
    minimum_interval_seconds: int = AssetOptions.model_fields[
        "partition_sync_interval_seconds"
    ].default,
    running: bool = True,
) -> dg.SensorDefinition:
    """A sensor adding every partition id the hub reports to ``partitions_def``.

    Args:
        partitions_def: the asset's dynamic partitions.
        eventhub_resource_key: key of the :class:`EventHubResource` to ask.
        name: sensor name (default ``{partitions name}_sync``).
        minimum_interval_seconds: how often to ask the hub.
        running: start switched on (default), so a fresh deployment gets its partitions.
    """
    assert partitions_def.name is not None

    @dg.sensor(
        name=name or f"{partitions_def.name}_sync",
        minimum_interval_seconds=minimum_interval_seconds,
        required_resource_keys={eventhub_resource_key},
        default_status=(
            dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED
        ),
        description="Adds the Event Hub's partition ids to the asset's dynamic partitions.",
    )
    def _sync(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        eventhub: EventHubResource = getattr(context.resources, eventhub_resource_key)
        hub_ids = eventhub.partition_ids()
        assert partitions_def.name is not None  # the component always names it
        known = context.instance.get_dynamic_partitions(partitions_def.name)
        new = partitions_to_add(hub_ids, known)
        if not new:
            return dg.SkipReason(f"all {len(hub_ids)} hub partitions are known")
        context.log.info(f"hub {eventhub.eventhub_name}: adding partitions {new}")
        return dg.SensorResult(dynamic_partitions_requests=[partitions_def.build_add_request(new)])

    return _sync
