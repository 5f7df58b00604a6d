"""Airflow's own floor under ``airflow dags test``: one task whose Python body does nothing.

bench/orchestrated.py runs it beside the example DAG (its ``airflow`` mode): the command's
launch to this task's success is what Airflow spends before and around any operator's task
body (the CLI, the DAG parsed and written, its run created, the in-process Execution API built
on the first task's first call, the task runner). Not part of the provider or its example DAGs.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task


@dag(dag_id="airflow_floor", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def airflow_floor() -> None:
    @task(task_id="noop")
    def noop() -> None:
        """A Python body in the task runner, as the ingest task's ``execute`` is."""

    noop()


airflow_floor()
