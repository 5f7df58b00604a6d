"""The example DAG and the operator under real Airflow 3 (``dag.test()``): Azurite, the Event
Hubs emulator with the real SDK, a local Spark. Run by ``scripts/tiers/airflow.sh``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from resources.settings import SinkSettings, StoreSettings
from tests.airflow.conftest import connection_env

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def connections(
    monkeypatch: pytest.MonkeyPatch,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
    tmp_path: Path,
) -> dict[str, Any]:
    hub = make_eventhub(partitions=4)
    sink = tmp_path / "sink"
    monkeypatch.setenv(
        *connection_env(
            "eventhub_default",
            conn_type="azure_eventhub_ingest",
            password=hub.connection_string,
            schema=hub.name,
        )
    )
    monkeypatch.setenv(
        *connection_env(
            "eventhub_store_default",
            conn_type="azure_eventhub_ingest",
            password=blob_store_settings.connection_string,
            extra={"container": blob_store_settings.container},
        )
    )
    monkeypatch.setenv(
        *connection_env(
            "eventhub_sink_default",
            conn_type="azure_eventhub_ingest",
            extra={"format": "parquet", "path": str(sink), "spark": {"master": "local[2]"}},
        )
    )
    return {"hub": hub, "sink": SinkSettings(path=str(sink)), "store": blob_store_settings}


def test_example_dag_lands_every_event_once(
    airflow_db: str, connections: dict[str, Any], spark: Any
) -> None:
    from airflow_provider.example_dags.eventhub_ingest import dag

    hub = connections["hub"]
    sent = {}
    for pid in hub.partition_ids:
        sent[pid] = [f"p{pid}-e{i}" for i in range(25)]
        hub.send(pid, sent[pid])
    dr = dag.test()
    states = {(ti.task_id, ti.map_index): ti.state for ti in dr.get_task_instances()}
    print(states)
    assert dr.state == "success", states
