"""One ingest task with one retry, for the lost-worker test.

The lease expiry (10 minutes) is far longer than the test: when the retry takes the killed try's
partitions over, it is because it knows its own earlier try is over, not because leases expired.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from dagster_eventhub_ingest.airflow_provider import EventHubIngestOperator

with DAG(
    dag_id="eventhub_ingest_retry",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
) as dag:
    EventHubIngestOperator(
        task_id="ingest",
        options={"lease_expiry_seconds": 600, "join_grace_seconds": 0},
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
