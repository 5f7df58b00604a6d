"""Run a test DAG in this process, for the lost-worker test.

``python -m tests.airflow._run_dag test <dag_id> <logical-date>``: ``dag.test()``; with
``EHINGEST_FAULT`` set, the process is killed (SIGKILL) in the middle of the ingest task, like a
lost worker: the task instance stays ``running`` try 1 in the metadata DB.

``_retry(dag, logical_date)`` (or ``... retry <dag_id> <logical-date>``): what the scheduler
does next.
A task instance whose worker is gone (no heartbeat) is failed and, with retries left, set
``up_for_retry``; then the run continues with the same loop ``dag.test()`` runs (its own
``_run_task``), so the retry is try 2 of the same task instance in the same DAG run.

Prints ``RESULT {"state": ..., "run_id": ..., "tis": {"task[map_index]": [state, try]},
"left": [...]}``: ``left`` names the processes this one still has below it once the DAG run
ended (a task must leave none: no Spark JVM, no Python worker).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from datetime import datetime
from typing import Any


def _result(dr: Any) -> dict[str, Any]:
    states = {
        f"{ti.task_id}[{ti.map_index}]": [str(ti.state), ti.try_number]
        for ti in dr.get_task_instances()
    }
    import psutil

    left = sorted(f"{p.name()}({p.pid})" for p in psutil.Process().children(recursive=True))
    result = {"state": str(dr.state), "run_id": dr.run_id, "tis": states, "left": left}
    print("RESULT " + json.dumps(result), flush=True)
    return result


def _retry(dag: Any, logical_date: datetime) -> dict[str, Any]:
    from airflow.models.dagrun import DagRun
    from airflow.sdk import timezone
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    with create_session() as session:
        dr = (
            session.query(DagRun)
            .filter_by(dag_id=dag.dag_id, logical_date=timezone.coerce_datetime(logical_date))
            .one()
        )
        # As dag.test() does: the scheduler's view of the DAG decides what is runnable.
        dr.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        for ti in dr.get_task_instances(session=session):
            if ti.state == TaskInstanceState.RUNNING:  # its worker is gone
                ti.state = TaskInstanceState.UP_FOR_RETRY
                ti.end_date = timezone.utcnow()
        session.commit()
        deadline = time.monotonic() + 300
        while dr.state == DagRunState.RUNNING and time.monotonic() < deadline:
            session.expire_all()
            schedulable, _ = dr.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            if not schedulable:
                time.sleep(0.5)
            for ti in schedulable:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
        session.expire_all()
        dr.update_state(session=session)
        session.commit()
        return _result(dr)


def main() -> None:
    mode, dag_id, when = sys.argv[1:4]
    dag = importlib.import_module(f"tests.airflow.dags.{dag_id}").dag
    logical_date = datetime.fromisoformat(when)
    if mode == "test":
        _result(dag.test(logical_date=logical_date))
    else:
        _retry(dag, logical_date)


if __name__ == "__main__":
    main()
