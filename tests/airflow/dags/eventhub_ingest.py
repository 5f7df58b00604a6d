"""The DAG folder of the Airflow tests: the shipped example DAG, unchanged."""

from dagster_eventhub_ingest.airflow_provider.example_dags.eventhub_ingest import dag

__all__ = ["dag"]
