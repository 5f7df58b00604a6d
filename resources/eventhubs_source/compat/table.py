"""Every reader option of azure-event-hubs-spark and Kafka's source, and what it becomes here.

:data:`CONNECTOR_OPTIONS` and :data:`KAFKA_OPTIONS` are the tables docs/spark_source.md lists
(tests/unit/test_eventhubs_options.py keeps the two in step); :func:`documented` spells a key
the way those docs do after Spark lower-cased it.
"""

from __future__ import annotations

from typing import Literal

from dagster_eventhub_ingest.resources.eventhubs_source.options import (
    camel_case,
    canonical_option,
    own_spellings,
)
from dagster_eventhub_ingest.resources.limits import MAX_READERS_PER_PARTITION

__all__ = [
    "CONNECTOR_OPTIONS",
    "FOREIGN_OPTIONS",
    "KAFKA_OPTIONS",
    "RENAMES",
    "accepted",
    "accepted_options",
    "documented",
]

#: Every azure-event-hubs-spark (2.3.22) reader option, as its docs spell it -> how it is
#: handled here (keys are matched case-insensitively).
#: ``mapped``: honoured (the text says as what); ``refused``: an error whose message is the text.
CONNECTOR_OPTIONS: dict[str, tuple[Literal["mapped", "refused"], str]] = {
    "eventhubs.connectionString": (
        "mapped",
        "connection_string; plain or encrypted by the connector's EventHubsUtils.encrypt; the hub "
        "name is taken from EntityPath when eventhub_name is not given",
    ),
    "eventhubs.consumerGroup": ("mapped", "consumer_group"),
    "eventhubs.startingPosition": (
        "mapped",
        "EventPosition JSON (offset/seqNo/enqueuedTime/isInclusive), start inclusive",
    ),
    "eventhubs.startingPositions": (
        "mapped",
        'per-partition EventPosition JSON keyed by {"ehName": ..., "partitionId": n}',
    ),
    "eventhubs.endingPosition": ("mapped", "EventPosition JSON, end exclusive (batch only)"),
    "eventhubs.endingPositions": ("mapped", "per-partition EventPosition JSON, end exclusive"),
    "eventhubs.prefetchCount": ("mapped", "prefetch"),
    "eventhubs.receiverTimeout": ("mapped", "receive_timeout (ISO-8601 duration, e.g. PT60S)"),
    "eventhubs.operationTimeout": (
        "mapped",
        "deadline of the driver's management calls at load() and per micro-batch",
    ),
    "maxEventsPerTrigger": ("mapped", "streaming admission control (ReadMaxRows)"),
    "eventhubs.maxEventsPerTrigger": ("mapped", "alias of maxEventsPerTrigger"),
    "eventhubs.DynamicPartitionDiscovery": (
        "mapped",
        "always on: a stream reads the partition ids at every micro-batch",
    ),
    "eventhubs.useExclusiveReceiver": (
        "refused",
        "this source uses non-exclusive (non-epoch) readers only, up to "
        f"{MAX_READERS_PER_PARTITION} per partition and consumer group; remove the option or set "
        "it to false",
    ),
    "eventhubs.maxRatePerPartition": (
        "refused",
        "a DStream option; use maxEventsPerTrigger to bound a micro-batch",
    ),
    "eventhubs.maxRatesPerPartition": (
        "refused",
        "a DStream option; use maxEventsPerTrigger to bound a micro-batch",
    ),
    "eventhubs.threadPoolSize": (
        "refused",
        "a JVM client setting with no counterpart (each Spark task runs its own Python client); "
        "remove it",
    ),
    "eventhubs.maxSilentTime": (
        "refused",
        "a JVM receiver setting with no counterpart; remove it (receive_timeout bounds silence)",
    ),
    "eventhubs.slowPartitionAdjustment": (
        "refused",
        "not supported; remove it (use maxEventsPerTrigger, and max_readers_per_partition for "
        "large partitions)",
    ),
    "eventhubs.maxAcceptableBatchReceiveTime": (
        "refused",
        "belongs to slowPartitionAdjustment, which is not supported; remove it",
    ),
    "eventhubs.throttlingStatusPlugin": (
        "refused",
        "a JVM plugin class; not supported; remove it (Spark's StreamingQueryProgress reports "
        "rows per batch)",
    ),
    "eventhubs.metricPlugin": (
        "refused",
        "a JVM plugin class; not supported; remove it (the source logs each planned range)",
    ),
    "eventhubs.useAadAuth": (
        "refused",
        "use fully_qualified_namespace='<ns>.servicebus.windows.net' with "
        "credential_type='default_azure_credential' (azure-identity on every executor)",
    ),
    "eventhubs.aadAuthCallback": (
        "refused",
        "JVM callback classes cannot run here; use fully_qualified_namespace with "
        "credential_type='default_azure_credential'",
    ),
    "eventhubs.AadAuthCallbackParams": (
        "refused",
        "JVM callback classes cannot run here; use fully_qualified_namespace with "
        "credential_type='default_azure_credential'",
    ),
    "partitionPreferredLocationStrategy": (
        "refused",
        "executor placement of the JVM connector; remove it (Spark schedules the tasks)",
    ),
    "useSimulatedClient": ("refused", "the connector's test client; remove it"),
}

#: Kafka source options users bring along, as Spark's docs spell them -> handling (same shape
#: as above).
KAFKA_OPTIONS: dict[str, tuple[Literal["mapped", "refused"], str]] = {
    "startingOffsets": (
        "mapped",
        'earliest | latest | {"<hub>": {"<partition>": n}} (-2 earliest, -1 latest), inclusive',
    ),
    "endingOffsets": (
        "mapped",
        'latest | {"<hub>": {"<partition>": n}} (-1 latest), exclusive; batch only',
    ),
    "failOnDataLoss": ("mapped", "on_data_loss: true -> fail, false -> skip"),
    "maxOffsetsPerTrigger": ("mapped", "alias of maxEventsPerTrigger"),
    "startingOffsetsByTimestamp": (
        "refused",
        'use eventhubs.startingPosition {"enqueuedTime": ...} or '
        "starting_position='enqueued:<ISO time>'",
    ),
    "endingOffsetsByTimestamp": (
        "refused",
        'use eventhubs.endingPosition {"enqueuedTime": ...} or ending_position='
        "'enqueued:<ISO time>'",
    ),
    "minOffsetsPerTrigger": ("refused", "not supported; use maxEventsPerTrigger only"),
    "maxTriggerDelay": ("refused", "not supported (it goes with minOffsetsPerTrigger)"),
    "subscribe": ("refused", "this is the Event Hubs source: give eventhub_name"),
    "subscribePattern": ("refused", "this is the Event Hubs source: give eventhub_name"),
    "assign": (
        "refused",
        "this is the Event Hubs source: give eventhub_name (and partition_ids to restrict)",
    ),
    "kafka.bootstrap.servers": (
        "refused",
        "this is the Event Hubs source: give a connection string or fully_qualified_namespace",
    ),
}

#: Both tables by lower-cased key (Spark hands a data source its options lower-cased).
FOREIGN_OPTIONS = {k.lower(): v for k, v in {**CONNECTOR_OPTIONS, **KAFKA_OPTIONS}.items()}
#: Keys of ours that the connector spells differently but means the same (no translation).
RENAMES = {
    "eventhubs.connectionstring": "connection_string",
    "eventhubs.consumergroup": "consumer_group",
    "eventhubs.prefetchcount": "prefetch",
}


def accepted(table: dict[str, tuple[Literal["mapped", "refused"], str]]) -> list[str]:
    """The keys of ``table`` that are honoured (``mapped``), in the table's order."""
    return [key for key, (status, _) in table.items() if status == "mapped"]


def accepted_options() -> tuple[str, ...]:
    """Every option key the source accepts: ours (also in camelCase), the connector's and
    Kafka's (what a did-you-mean may offer; keys match without case)."""
    return own_spellings() + tuple(accepted(CONNECTOR_OPTIONS)) + tuple(accepted(KAFKA_OPTIONS))


_DOCUMENTED = {k.lower(): k for k in (*CONNECTOR_OPTIONS, *KAFKA_OPTIONS)}


def documented(key: str) -> str:
    """An option key as the user wrote it, or as its docs spell it when Spark lower-cased it
    (Spark hands a data source its options lower-cased): ``failondataloss`` ->
    ``failOnDataLoss``, ``consumergroup`` -> ``consumerGroup``."""
    low = key.strip().lower()
    if key.strip() != low:
        return key.strip()  # the user's own casing survived
    if low in _DOCUMENTED:
        return _DOCUMENTED[low]
    name = canonical_option(low)
    bare = low.removeprefix("eventhubs.")
    if name is not None and "_" not in bare and bare != name:
        return low[: len(low) - len(bare)] + camel_case(name)
    return key.strip()
