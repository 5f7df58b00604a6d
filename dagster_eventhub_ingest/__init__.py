"""dagster_eventhub_ingest: land Azure Event Hubs events into Spark tables, exactly once.

One import name holds every part:

- ``dagster_eventhub_ingest.resources``: clients, the partition store, the ``eventhubs`` Spark
  source, settings and errors;
- ``dagster_eventhub_ingest.ops``: the run's steps (claim, plan, read, write, checkpoint);
- ``dagster_eventhub_ingest.dagster_project``: the Dagster resources, asset and Component;
- ``dagster_eventhub_ingest.airflow_provider``: the Airflow provider;
- ``dagster_eventhub_ingest.cli``: the ``ehingest`` command;
- ``dagster_eventhub_ingest.emulator``: the local Event Hubs emulator, for tests.

``dagster_eventhub_ingest.EventHubIngestComponent`` is the Dagster Component's one name (the
``type:`` of a ``defs.yaml``, what ``dg list components`` shows). Importing this package imports
none of the parts: the Component loads on first use, so an Airflow install never loads Dagster,
and the CLI's first import stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster_eventhub_ingest.dagster_project.component import EventHubIngestComponent

__all__ = ["EventHubIngestComponent"]


def __getattr__(name: str) -> Any:
    if name == "EventHubIngestComponent":
        from dagster_eventhub_ingest.dagster_project.component import EventHubIngestComponent

        return EventHubIngestComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
