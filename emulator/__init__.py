"""A local Azure Event Hubs emulator (AMQP 1.0 on asyncio) that the real azure-eventhub SDK uses.

Start one in-process with :func:`dagster_eventhub_ingest.emulator.testing.running_emulator`, or from
the command line with ``ehingest emulator serve``. See ``docs/emulator.md``.
"""

from dagster_eventhub_ingest.emulator.hub import Hub, Namespace, Partition
from dagster_eventhub_ingest.emulator.partition_key import partition_for_key
from dagster_eventhub_ingest.emulator.server import EmulatorServer
from dagster_eventhub_ingest.emulator.testing import (
    EmulatedHub,
    EmulatorHandle,
    connection_string,
    running_emulator,
)

__all__ = [
    "EmulatedHub",
    "EmulatorHandle",
    "EmulatorServer",
    "Hub",
    "Namespace",
    "Partition",
    "connection_string",
    "partition_for_key",
    "running_emulator",
]
