"""Fixtures of the Airflow tier (``scripts/tiers/airflow.sh``): a real Airflow 3 metadata DB.

Airflow reads its configuration when first imported, so this module points it at a throwaway
home (SQLite DB, ``tests/airflow/dags`` as DAG folder, no Airflow example DAGs) before anything
imports it. Without the ``airflow`` extra installed (the main run's venv), nothing is collected.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).resolve().parent / "dags"  # the example DAG and a test DAG

if importlib.util.find_spec("airflow") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    _HOME = tempfile.mkdtemp(prefix="ehingest-airflow-")
    os.environ.update(
        {
            "AIRFLOW_HOME": _HOME,
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        }
    )


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[str]:
    """A migrated Airflow metadata DB (SQLite) for the session; its home is removed after."""
    from airflow.utils import db

    db.initdb()
    yield os.environ["AIRFLOW_HOME"]
    shutil.rmtree(os.environ["AIRFLOW_HOME"], ignore_errors=True)


def connection_env(conn_id: str, **fields: Any) -> tuple[str, str]:
    """``(AIRFLOW_CONN_<ID>, json)``: how a test (or a deployment) defines a connection."""
    return f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields)
