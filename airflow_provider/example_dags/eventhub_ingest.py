"""Every 5 minutes: look for work (waiting on the triggerer while there is none), then K
ingestion runs.

The K mapped copies of ``EventHubIngestOperator`` balance the partitions between them exactly as
K Dagster runs of one schedule tick do; together they bring every partition up to date. The
connections ``eventhub_default``, ``eventhub_store_default`` and ``eventhub_sink_default`` are
described in docs/airflow.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from dagster_eventhub_ingest.airflow_provider import EventHubIngestOperator, EventHubLagSensor

#: Concurrent ingestion runs per tick; each claims a balanced share of the partitions.
RUNS = 2

with DAG(
    dag_id="eventhub_ingest",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["eventhub"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
) as dag:
    has_work = EventHubLagSensor(
        task_id="has_work",
        min_lag_events=1,  # some partition has at least one event not yet landed
        poke_interval=20,
        timeout=timedelta(minutes=4).total_seconds(),
        soft_fail=True,  # nothing to do this tick: skip the ingest tasks, not a failure
        retries=0,
        deferrable=True,  # no work yet: waits on the triggerer, holding no worker slot
    )
    ingest = EventHubIngestOperator.partial(
        task_id="ingest",
        options={"max_events_per_partition": 100_000, "lease_expiry_seconds": 60},
        execution_timeout=timedelta(minutes=30),
    ).expand(copy_index=list(range(RUNS)))
    has_work >> ingest
