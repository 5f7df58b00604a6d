"""One ingest task without retries, for the SIGTERM test: a try that Airflow kills stays
failed, so what takes its partitions over is another DAG run (another owner), which can only
do so at once if the killed try released its leases (they expire after 10 minutes).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from dagster_eventhub_ingest.airflow_provider import EventHubIngestOperator

with DAG(
    dag_id="eventhub_ingest_once",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
) as dag:
    EventHubIngestOperator(
        task_id="ingest",
        options={
            "lease_expiry_seconds": 600,
            "join_grace_seconds": 0,
            "prefetch": 50,
            "run_timeout_seconds": 300,
        },
        retries=0,
    )
