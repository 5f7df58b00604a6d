"""Airflow 3 provider for dagster-eventhub-ingest: a hook, an ingest operator, a lag sensor.

Install with the ``airflow`` extra (``pip install "dagster-eventhub-ingest[airflow]"``): Airflow
finds the provider through its ``apache_airflow_provider`` entry point
(:mod:`dagster_eventhub_ingest.airflow_provider.get_provider_info`). The operator runs the same
ingestion (``dagster_eventhub_ingest.ops.run.entry.run_ingestion``) as the Dagster asset and the
``ehingest`` CLI, configured from Airflow connections. docs/airflow.md has the connections, the
example DAG and how each piece maps to the Dagster integration.

Layering: this package imports ``ops`` and ``resources``, never Dagster; nothing in the project
imports it. Its classes load on first use, so that Airflow's provider discovery, which imports
this package for ``get_provider_info``, loads neither Airflow's task SDK nor the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook
    from dagster_eventhub_ingest.airflow_provider.operators import (
        EventHubIngestOperator,
        owner_id_for,
        report_to_json,
    )
    from dagster_eventhub_ingest.airflow_provider.sensors import EventHubLagSensor
    from dagster_eventhub_ingest.airflow_provider.triggers import EventHubLagTrigger

__all__ = [
    "EventHubIngestHook",
    "EventHubIngestOperator",
    "EventHubLagSensor",
    "EventHubLagTrigger",
    "owner_id_for",
    "report_to_json",
]

_WHERE = {
    "EventHubIngestHook": ".hooks",
    "EventHubIngestOperator": ".operators",
    "owner_id_for": ".operators",
    "report_to_json": ".operators",
    "EventHubLagSensor": ".sensors",
    "EventHubLagTrigger": ".triggers",
}


__getattr__, __dir__ = lazy_face(__name__, _WHERE)
