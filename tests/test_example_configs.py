"""docs/example-config.yaml is loaded AND run end to end, so it cannot drift from the code.

(The project's example ``dagster_project/defs/eventhub_events/defs.yaml`` is loaded by
tests/test_dagster_definitions.py and run end to end by two ``dagster asset materialize``
processes in tests/test_dagster_runs.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "example-config.yaml"


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

    from cli.config import CliSpec
    from resources.config import EventHubConfig, SinkConfig, SparkConfig, StoreConfig

    shown = set(re.findall(r"^[\s#]*([a-z_]+):", EXAMPLE.read_text(), flags=re.M))
    wanted = {
        "top": set(CliSpec.model_fields),
        "eventhub": set(EventHubConfig.model_fields),
        "store": set(StoreConfig.model_fields),
        "sink": set(SinkConfig.model_fields),
        "spark": set(SparkConfig.model_fields),
    }
    missing = {where: sorted(keys - shown) for where, keys in wanted.items() if keys - shown}
    assert not missing, f"docs/example-config.yaml lacks {missing}"
