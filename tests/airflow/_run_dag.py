"""Run the example DAG once with ``dag.test()`` in this process: the fault test runs it in a
subprocess (killed mid-run by ``EHINGEST_FAULT``), then again to retry. Prints the TI states.

Usage: python -m tests.airflow._run_dag <logical-date-iso>
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime


def main() -> None:
    logging.getLogger("azure").setLevel(logging.WARNING)
    from airflow_provider.example_dags.eventhub_ingest import dag

    dr = dag.test(logical_date=datetime.fromisoformat(sys.argv[1]))
    states = {
        f"{ti.task_id}[{ti.map_index}]": [str(ti.state), ti.try_number]
        for ti in dr.get_task_instances()
    }
    print("RESULT " + json.dumps({"state": str(dr.state), "tis": states}), flush=True)


if __name__ == "__main__":
    main()
