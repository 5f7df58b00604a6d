"""Airflow 3 provider for dagster-eventhub-ingest: a hook, an ingest operator, a lag sensor.

Install with the ``airflow`` extra (``pip install "dagster-eventhub-ingest[airflow]"``); the
operator runs the same ingestion (``dagster_eventhub_ingest.ops.run.run_ingestion``) as the Dagster
asset and the ``ehingest`` CLI, configured from Airflow connections. docs/airflow.md has the
connections, the example DAG and how each piece maps to the Dagster integration.

Layering: this package imports ``ops`` and ``resources``; nothing in the project imports it.
"""

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
