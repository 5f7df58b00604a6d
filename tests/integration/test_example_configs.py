"""docs/example-config.yaml is loaded AND run end to end, so it cannot drift from the code.

(The project's example ``dagster_project/defs/eventhub_events/defs.yaml`` is loaded by
tests/integration/test_dagster_definitions.py and run end to end by two ``dagster asset
materialize`` processes in tests/integration/test_dagster_runs.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from dagster_eventhub_ingest.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "example-config.yaml"


def test_example_config_runs_end_to_end(
    make_eventhub: Any, azurite_connection_string: str, container_name: str, tmp_path: Path, spark
) -> None:
    hub = make_eventhub(partitions=2)
    for pid in hub.partition_ids:
        hub.send(pid, [f"{pid}-{i}".encode() for i in range(7)])
    doc = yaml.safe_load(EXAMPLE.read_text())
    # Only where things are changes (this machine's hub, container and folder); every other
    # key is run as the documentation shows it.
    doc["eventhub"]["eventhub_name"] = hub.name
    doc["store"]["container"] = container_name
    doc["sink"]["path"] = str(tmp_path / "out")
    path = tmp_path / "ehingest.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {
        "EVENTHUB_CONNECTION_STRING": hub.connection_string,
        "STORAGE_CONNECTION_STRING": azurite_connection_string,
    }
    result = CliRunner().invoke(main, ["run", "--config", str(path)], env=env)
    assert result.exit_code == 0, result.output
    assert "14 events" in result.output and "complete" in result.output
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 14
    # partition_by: [partition] as documented: one folder per Event Hub partition.
    assert {p.name for p in (tmp_path / "out").iterdir() if p.is_dir()} == {
        "partition=0",
        "partition=1",
    }


def test_example_config_shows_every_key() -> None:
    """The file says it shows every key: each one of the model is there, set or commented."""
    import re

    from dagster_eventhub_ingest.cli.config import CliConfig
    from dagster_eventhub_ingest.resources.config import (
        EventHubConfig,
        SinkConfig,
        SparkConfig,
        StoreConfig,
    )

    shown = set(re.findall(r"^[\s#]*([a-z_]+):", EXAMPLE.read_text(), flags=re.M))
    wanted = {
        "top": set(CliConfig.model_fields),
        "eventhub": set(EventHubConfig.model_fields),
        "store": set(StoreConfig.model_fields),
        "sink": set(SinkConfig.model_fields),
        "spark": set(SparkConfig.model_fields),
    }
    missing = {where: sorted(keys - shown) for where, keys in wanted.items() if keys - shown}
    assert not missing, f"docs/example-config.yaml lacks {missing}"


def _defs_yaml_blocks(doc: str) -> list[str]:
    """The defs.yaml examples (```yaml blocks of the Component) of a Markdown file."""
    import re

    text = (EXAMPLE.parent.parent / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)
    return [b for b in blocks if "EventHubIngestComponent" in b]


@pytest.mark.parametrize("doc", ["README.md", "docs/dagster.md"])
def test_documented_defs_yaml_runs_end_to_end(
    doc: str,
    make_eventhub: Any,
    azurite_connection_string: str,
    container_name: str,
    tmp_path: Path,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    dagster_instance: Any,
) -> None:
    """Every defs.yaml the docs show is materialized as written: only the hub's name, the
    container and the sink folder change (and the schedule stays off); the credentials are
    the environment variables the block names."""
    import dagster as dg
    from dagster.components.testing.utils import component_defs

    from dagster_eventhub_ingest.dagster_project.component import EventHubIngestComponent

    blocks = _defs_yaml_blocks(doc)
    assert blocks, f"{doc} shows no defs.yaml"
    hub = make_eventhub(partitions=4)
    sent = {pid: hub.send(pid, [f"{pid}-{i}".encode() for i in range(5)]) for pid in "0123"}
    for n, block in enumerate(blocks):
        attributes = yaml.safe_load(block)["attributes"]
        attributes["eventhub"]["eventhub_name"] = hub.name
        attributes["store"]["container"] = f"{container_name}-{n}"
        out = tmp_path / f"out-{n}"
        attributes["sink"] = {**attributes["sink"], "path": str(out)}
        attributes["sink"].pop("table", None)
        for section, value in (
            ("eventhub", hub.connection_string),
            ("store", azurite_connection_string),
        ):
            env_name = attributes[section]["credential"]["connection_string_env"]
            monkeypatch.setenv(env_name, value)
        component = EventHubIngestComponent.resolve_from_yaml(yaml.safe_dump(attributes))
        defs = component_defs(component=component)
        key = dg.AssetKey(component.asset_key.split("/"))
        job = defs.resolve_job_def(f"{key.to_python_identifier()}_job")
        result = job.execute_in_process(
            instance=dagster_instance,
            tags={
                "dagster/asset_partition_range_start": "0",
                "dagster/asset_partition_range_end": "3",
            },
        )
        assert result.success
        assert dagster_instance.get_materialized_partitions(key) == {"0", "1", "2", "3"}
        landed = spark.read.parquet(str(out))
        assert landed.count() == sum(sent.values()) == 20
        assert landed.select("partition", "sequenceNumber").distinct().count() == 20
