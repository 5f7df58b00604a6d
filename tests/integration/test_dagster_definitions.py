"""Dagster definitions without services: Component from YAML, schedule, run config, lag check,
run liveness, and secrets kept out of what the UI shows."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value
from dagster.components.testing.utils import component_defs
from dagster_pyspark import PySparkResource

from dagster_eventhub_ingest.dagster_project.assets import (
    ReplayConfig,
    build_eventhub_ingest_asset,
    dagster_run_is_dead,
    stopped_is_final,
)
from dagster_eventhub_ingest.dagster_project.checks import (
    LAG_CHECK_NAME,
    LastBatch,
    lag_check_result,
)
from dagster_eventhub_ingest.dagster_project.component import EventHubIngestComponent
from dagster_eventhub_ingest.dagster_project.metadata import (
    materialization_plan,
    partition_metadata,
)
from dagster_eventhub_ingest.dagster_project.resources import EventHubResource
from dagster_eventhub_ingest.dagster_project.schedules import (
    RUNNER_TAG,
    build_ingest_job,
    build_ingest_schedule,
    every_minutes_cron,
)
from dagster_eventhub_ingest.dagster_project.sensors import partitions_to_add
from dagster_eventhub_ingest.ops.run.report import PartitionReport
from dagster_eventhub_ingest.ops.sinks.read import output_schema
from dagster_eventhub_ingest.resources.config import IngestAssetConfig, LagCheckOptions, SparkConfig
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.spark.code_shipping import SHIP_CODE_CONF

ROOT = Path(__file__).resolve().parents[2]
SECRET = "c2VjcmV0LWtleS1uZXZlci1zaG93bg=="
EH_CONN = f"Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey={SECRET}"
ST_CONN = (
    "DefaultEndpointsProtocol=https;AccountName=acct;"
    f"AccountKey={SECRET};EndpointSuffix=core.windows.net"
)

YAML = """
type: dagster_eventhub_ingest.EventHubIngestComponent
attributes:
  asset_key: raw/telemetry
  eventhub:
    eventhub_name: telemetry
    credential: {connection_string_env: TEST_EH_CONN}
  store:
    container: "{{ env('TEST_EHI_CONTAINER', 'eventhub-state') }}"
    credential: {connection_string_env: TEST_ST_CONN}
  sink:
    path: /tmp/out
  partitions: [0, 1, 2, 10]
  schedule: {every_minutes: 10, runs: 3}
  lag_check: {max_lag_events: 50}
"""


def _component(yaml_text: str) -> EventHubIngestComponent:
    import yaml

    attributes = yaml.safe_load(yaml_text)["attributes"]
    return EventHubIngestComponent.resolve_from_yaml(yaml.safe_dump(attributes))


def test_component_from_yaml_coerces_partition_ids_and_builds_everything() -> None:
    component = _component(YAML)
    assert component.partitions == ["0", "1", "2", "10"]
    assert component.store.container == "eventhub-state"  # templates resolve in nested models
    defs = component_defs(component=component)
    asset = defs.resolve_assets_def(dg.AssetKey(["raw", "telemetry"]))
    assert asset.partitions_def is not None
    assert asset.partitions_def.get_partition_keys() == ["0", "1", "2", "10"]
    assert asset.backfill_policy == dg.BackfillPolicy.single_run()
    lag_key = dg.AssetCheckKey(asset.key, LAG_CHECK_NAME)
    # Its own definition (runnable alone), not a step the ingestion run plans at its start.
    assert lag_key not in asset.check_keys and defs.resolve_asset_graph().has(lag_key)
    job = defs.resolve_job_def("raw__telemetry_job")
    assert lag_key not in (job.asset_layer.asset_graph.asset_check_keys)
    # Besides every ingestion run, a sensor evaluates the lag check without a run.
    lag_sensor = defs.resolve_sensor_def("raw__telemetry_lag")
    assert lag_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert lag_sensor.minimum_interval_seconds == 300
    schedule = defs.resolve_schedule_def("raw__telemetry_job_schedule")
    assert schedule.cron_schedule == "*/10 * * * *"
    # Retries with backoff, a concurrency pool, a freshness check of 3 periods (read from how
    # current the sink is, not from the last materialization), standard definition metadata.
    assert asset.op.retry_policy is not None and asset.op.retry_policy.max_retries == 3
    assert asset.op.retry_policy.backoff == dg.Backoff.EXPONENTIAL
    assert asset.op.pool == "eventhub_ingest"
    spec = next(iter(asset.specs))
    assert spec.freshness_policy is None
    freshness = defs.resolve_sensor_def("raw__telemetry_freshness")
    assert freshness.default_status == dg.DefaultSensorStatus.RUNNING
    (fresh_key,) = [
        k for k in defs.resolve_asset_graph().asset_check_keys if k.name != LAG_CHECK_NAME
    ]
    fresh_check = defs.resolve_asset_graph().get(fresh_key)
    assert fresh_check is not None
    assert spec.metadata["dagster/uri"] == "/tmp/out"
    # Not on the definition: Dagster's UI would merge it with the materializations' and show
    # the names lower-cased (sequencenumber); each materialization carries it as declared.
    assert "dagster/column_schema" not in spec.metadata
    assert set(defs.resources or {}) == {
        "raw__telemetry_eventhub",
        "raw__telemetry_partition_store",
        "raw__telemetry_sink",
        "raw__telemetry_pyspark",
    }


def test_the_sink_block_reaches_the_sink_resource_whole() -> None:
    """sources (a SinkConfig field) from defs.yaml to the run's settings, as every sink key."""
    component = _component(
        YAML.replace("    path: /tmp/out\n", "    path: /tmp/out\n    sources: many\n")
    )
    defs = component_defs(component=component)
    sink = (defs.resources or {})["raw__telemetry_sink"]
    assert sink.settings().sources == "many"
    assert _component(YAML).sink.sources == "one"


def test_component_without_partitions_is_dynamic_with_a_sync_sensor() -> None:
    component = _component(YAML.replace("  partitions: [0, 1, 2, 10]\n", ""))
    defs = component_defs(component=component)
    asset = defs.resolve_assets_def(dg.AssetKey(["raw", "telemetry"]))
    assert isinstance(asset.partitions_def, dg.DynamicPartitionsDefinition)
    sensor = defs.resolve_sensor_def("raw__telemetry_partitions_sync")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        ("  partitions: [0, 0]\n", "duplicates"),
        ("  partitions: []\n", "the list is empty"),
        ("  partitions: [0, [1]]\n", "partitions.list"),
        ("  backfill_max_partitions_per_run: 0\n", "backfill_max_partitions_per_run: 0"),
        ("  max_events_per_partition: 0\n", "max_events_per_partition: 0 must be an integer >= 1"),
    ],
)
def test_component_bad_input_names_the_field(snippet: str, message: str) -> None:
    text = YAML.replace("  partitions: [0, 1, 2, 10]\n", "") + snippet
    with pytest.raises(Exception) as info:
        component_defs(component=_component(text))
    assert message in str(info.value)


def _without(yaml_text: str, key: str) -> str:
    """``yaml_text`` without the top-level attribute ``key`` (and its indented block)."""
    out, skipping = [], False
    for line in yaml_text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            skipping = line.startswith(f"  {key}:")
        if not skipping:
            out.append(line + "\n")
    return "".join(out)


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "  strategy: greedyy\n",
            "strategy: 'greedyy' is not valid; did you mean 'greedy'? valid: greedy, balanced, "
            "eph, equal, jump_hash, delay_race",
        ),
        ("  prefetch: 0\n", "prefetch: 0 must be 1..10000"),
        (
            "  max_readers_per_partition: 9\n",
            "max_readers_per_partition: 9 must be 1..5 (Event Hubs allows 5 readers per "
            "partition and consumer group)",
        ),
        (
            "  freshness_fail_minutes: 0\n",
            "freshness_fail_minutes: 0 must be > 0 (or unset)",
        ),
        (
            "  sink: {path: /tmp/out, format: parqet}\n",
            "sink.format: 'parqet' is not a known format; did you mean 'parquet'? valid: parquet, "
            "delta, orc, avro, json, iceberg, hudi, deltalake, or a data source's fully qualified "
            "class name",
        ),
        (
            "  sink: {path: /tmp/out, partition_by: [partition_id]}\n",
            "sink.partition_by: 'partition_id' is not a column of the output; did you mean "
            "'partition'?",
        ),
        (
            "  schedule: {every_minutes: 7}\n",
            "schedule.every_minutes: 7 does not divide an hour or a day evenly",
        ),
        ("  schedule: {runs: 0}\n", "schedule.runs: 0 must be an integer >= 1"),
        (
            "  lag_check: {max_lag_events: -1}\n",
            "lag_check.max_lag_events: -1 must be >= 0 (or unset for no threshold)",
        ),
        (
            "  spark: {master: lcoal}\n",
            "spark.master: 'lcoal' is not a Spark master; expected local, local[n]",
        ),
        (
            "  spark: {master: 'local[2]', remote: 'sc://h:15002'}\n",
            "spark: give master ('local[2]') or remote ('sc://h:15002'), not both",
        ),
        (
            "  strategy_options: {delay: 1}\n",
            "strategy_options: strategy 'balanced' takes no options (got delay); only delay_race "
            "does",
        ),
        (
            "  strategy: delay_race\n  strategy_options: {delay: -1}\n",
            "strategy_options.delay: -1 must be > 0 (seconds)",
        ),
    ],
)
def test_component_bad_values_fail_at_load_in_one_line(snippet: str, message: str) -> None:
    text = _without(YAML, snippet.strip().split(":")[0])
    with pytest.raises(Exception) as info:
        component_defs(component=_component(text + snippet))
    shown = str(info.value) + "\n"
    assert message in shown
    # The CLI's wording, not pydantic's dump.
    assert "validation error for" not in shown and "Value error," not in shown
    assert "spark_config" not in shown and "spark_remote" not in shown


def test_component_spark_block_is_the_cli_spark_block() -> None:
    text = YAML + (
        "  spark:\n"
        "    master: local[3]\n"
        "    app_name: telemetry\n"
        "    ship_code: false\n"
        "    conf: {spark.sql.shuffle.partitions: 4, spark.sql.ansi.enabled: true}\n"
    )
    component = _component(text)
    assert component.spark is not None
    import yaml

    cli = SparkConfig.from_dict(yaml.safe_load(text)["attributes"]["spark"], where="spark")
    assert SparkConfig.model_validate(component.spark.model_dump()) == cli
    conf = component_defs(component=component).resources["raw__telemetry_pyspark"].spark_config
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.app.name"] == "telemetry"
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert conf["spark.sql.ansi.enabled"] == "true"
    assert conf[SHIP_CODE_CONF] == "false"
    assert conf["spark.driver.host"] == "127.0.0.1"  # a local master keeps the loopback pins


@pytest.mark.parametrize(
    ("snippet", "where"),
    [
        # Unknown keys, at any depth: Dagster's schema check names the key and its line.
        ("  stratgy: greedy\n", "stratgy at <string>:"),
        ("  sink: {path: /tmp/out, formt: parquet}\n", "sink.SinkModel.formt at <string>:"),
        (
            "  eventhub: {eventhub_name: telemetry, credentail: {}}\n",
            "eventhub.EventHubModel.credentail at <string>:",
        ),
        # Keys the schema does not have: refused at their line, never ignored.
        ("  spark_config: {spark.master: 'local[2]'}\n", "spark_config at <string>:"),
        ("  spark_remote: sc://spark.example:15002\n", "spark_remote at <string>:"),
    ],
)
def test_component_unknown_and_removed_keys_are_refused_at_their_line(
    snippet: str, where: str
) -> None:
    text = _without(YAML, snippet.strip().split(":")[0])
    with pytest.raises(Exception) as info:
        _component(text + snippet)
    shown = str(info.value)
    assert where in shown and "Extra inputs are not permitted" in shown, shown


def test_component_schema_describes_every_key_with_clean_names() -> None:
    """What ``dg utils inspect-component`` and the UI's component page show."""
    import re

    schema = EventHubIngestComponent.model().model_json_schema()
    markup = re.compile(r":(class|func|meth|mod):|::|``")
    blocks = schema.get("$defs", {})
    assert {"EventHubModel", "StoreModel", "SinkModel", "ScheduleModel", "SparkModel"} <= set(
        blocks
    )
    assert not [n for n in blocks if n.endswith("ModelModel")], sorted(blocks)
    for name, block in [("attributes", schema), *blocks.items()]:
        for key, field in block.get("properties", {}).items():
            text = field.get("description")
            assert text, f"{name}.{key} has no description"
            assert not markup.search(text), f"{name}.{key}: {text}"
    assert not {"spark_config", "spark_remote"} & set(schema["properties"])
    for block in ("EventHubModel", "StoreModel"):
        assert "connection_string_env" not in blocks[block]["properties"]  # only in credential


def test_dg_check_defs_names_a_bad_value_in_one_line(tmp_path: Path) -> None:
    """A real ``dg check defs`` over a project whose defs.yaml has a typo."""
    (tmp_path / "dg.toml").write_text(
        'directory_type = "project"\n[project]\nroot_module = "badproj"\n'
        'defs_module = "badproj.defs"\n'
    )
    package = tmp_path / "badproj"
    (package / "defs" / "hub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n\n@dg.definitions\n"
        "def defs():\n"
        "    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n"
    )
    (package / "defs" / "hub" / "defs.yaml").write_text(
        _without(YAML, "sink") + "  sink: {path: /tmp/out, format: parqet}\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "DAGSTER_HOME": str(home),
        "VIRTUAL_ENV": sys.prefix,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    dg_bin = str(Path(sys.executable).with_name("dg"))
    checked = subprocess.run(
        [dg_bin, "check", "defs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = checked.stdout + checked.stderr
    assert checked.returncode != 0, out
    assert (
        "sink.format: 'parqet' is not a known format; did you mean 'parquet'? valid: parquet, "
        "delta, orc, avro, json, iceberg, hudi, deltalake, or a data source's fully qualified "
        "class name"
    ) in out
    assert "validation error for" not in out


def test_component_old_credential_keys_are_refused_at_their_line() -> None:
    old = YAML.replace(
        "    credential: {connection_string_env: TEST_EH_CONN}",
        "    connection_string_env: TEST_EH_CONN",
    )
    with pytest.raises(
        Exception, match=r"eventhub.EventHubModel.connection_string_env at <string>:"
    ):
        _component(old)


def test_bad_schedule_period_is_explained() -> None:
    with pytest.raises(ConfigurationError, match="every_minutes: 7 does not divide"):
        every_minutes_cron(7)
    assert every_minutes_cron(1) == "* * * * *"
    assert every_minutes_cron(15) == "*/15 * * * *"
    assert every_minutes_cron(120) == "0 */2 * * *"


def test_project_definitions_load_the_example_defs_yaml() -> None:
    from dagster_eventhub_ingest.dagster_project.definitions import defs

    loaded = defs()
    asset = loaded.resolve_assets_def("eventhub_events")
    assert asset.partitions_def is not None
    assert asset.partitions_def.get_partition_keys() == ["0", "1", "2", "3"]
    loaded.resolve_job_def("eventhub_events_job")


# What only a run's step needs: loading the definitions (a code server, the daemon, every run
# before RUN_START, ``dg check defs``) imports none of it.
_STEP_ONLY = (
    "pyspark",
    "py4j",
    "dagster_pyspark",
    "pyarrow",
    "azure.eventhub",
    "azure.storage.blob",
)


def test_loading_the_definitions_imports_nothing_only_a_run_needs() -> None:
    """A fresh interpreter that loads ``definitions.py`` and resolves its job has imported no
    pyspark, Azure SDK or Arrow; importing the ``eventhubs`` data source then does import
    pyspark (what the first check would miss if the names were wrong). The run's entry point
    imports it only when there is something to read (tests/integration/test_quiet_run.py)."""
    ns = "dagster_eventhub_ingest"
    code = (
        "import sys\n"
        f"from {ns}.dagster_project.definitions import defs\n"
        "loaded = defs()\n"
        "loaded.resolve_job_def('eventhub_events_job')\n"
        f"print(sorted(m for m in {_STEP_ONLY!r} if m in sys.modules))\n"
        f"import {ns}.ops.run.entry, {ns}.resources.eventhubs_source.source\n"
        f"print(sorted(m for m in {_STEP_ONLY!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    at_load, after_source = out.stdout.strip().splitlines()
    assert at_load == "[]", f"loading the definitions imports {at_load}"
    assert "pyspark" in after_source, after_source


def test_the_pyspark_resource_serves_an_asset_annotated_with_dagster_pysparks_type() -> None:
    """``LocalPySparkResource`` is not a ``PySparkResource`` subclass; an asset of the user's
    that annotates its ``pyspark`` parameter with dagster-pyspark's type gets it by key, with
    the same interface, and no session starts until one is asked for."""
    from dagster_eventhub_ingest.dagster_project.resources import (
        LocalPySparkResource,
        local_pyspark_resource,
    )

    seen: dict[str, object] = {}

    @dg.asset
    def users_asset(pyspark: PySparkResource) -> None:
        seen["type"] = type(pyspark)
        seen["master"] = pyspark.spark_config["spark.master"]
        seen["interface"] = all(
            hasattr(type(pyspark), name) for name in ("spark_session", "spark_context")
        )
        seen["started"] = pyspark._spark_session is not None

    result = dg.materialize(
        [users_asset], resources={"pyspark": local_pyspark_resource({"spark.master": "local[1]"})}
    )
    assert result.success
    assert seen == {
        "type": LocalPySparkResource,
        "master": "local[1]",
        "interface": True,
        "started": False,
    }


def test_dg_lists_the_component_and_checks_the_project() -> None:
    env = {**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1", "VIRTUAL_ENV": sys.prefix}
    dg_bin = str(Path(sys.executable).with_name("dg"))
    listed = subprocess.run(
        [dg_bin, "list", "components", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr
    assert '"key": "dagster_eventhub_ingest.EventHubIngestComponent"' in listed.stdout
    checked = subprocess.run(
        [dg_bin, "check", "defs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr


_PROJECT_TOML = """
[project]
name = "userproj"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["dagster", "dagster-eventhub-ingest[dagster]"]

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "userproj"
"""

_DEFINITIONS = """
from pathlib import Path

from dagster import definitions, load_from_defs_folder


@definitions
def defs():
    return load_from_defs_folder(project_root=Path(__file__).parent.parent.parent)
"""


def test_dg_scaffolds_a_commented_defs_yaml_that_dg_check_accepts(tmp_path: Path) -> None:
    """A user's project (create-dagster's layout, with a ``resources.py`` and an ``ops``
    package of its own): ``dg scaffold defs`` writes the commented defs.yaml, which loads once
    its environment variables are set."""
    project = tmp_path / "userproj"
    src = project / "src" / "userproj"
    (src / "defs").mkdir(parents=True)
    (src / "ops").mkdir()
    (project / "pyproject.toml").write_text(_PROJECT_TOML)
    (src / "__init__.py").write_text("")
    (src / "defs" / "__init__.py").write_text("")
    (src / "definitions.py").write_text(_DEFINITIONS)
    (src / "resources.py").write_text("USER_RESOURCE = 1\n")
    (src / "ops" / "__init__.py").write_text("USER_OP = 1\n")
    env = {
        **os.environ,
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "VIRTUAL_ENV": sys.prefix,
        "PYTHONPATH": str(project / "src"),
        "EVENTHUB_CONNECTION_STRING": EH_CONN,
        "AZURE_STORAGE_CONNECTION_STRING": ST_CONN,
    }
    dg_bin = str(Path(sys.executable).with_name("dg"))

    def dg_run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [dg_bin, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    dg_run("scaffold", "defs", "dagster_eventhub_ingest.EventHubIngestComponent", "telemetry")
    text = (src / "defs" / "telemetry" / "defs.yaml").read_text()
    assert text.startswith("# Lands one Azure Event Hub")
    assert "type: dagster_eventhub_ingest.EventHubIngestComponent" in text
    assert "asset_key: telemetry" in text and "attributes: {}" not in text
    assert "connection_string_env: EVENTHUB_CONNECTION_STRING" in text
    checked = dg_run("check", "defs")
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    listed = dg_run("list", "defs", "--json")
    assert '"telemetry"' in listed.stdout and "telemetry_job" in listed.stdout


def test_secrets_from_env_vars_never_reach_the_ui_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_EH_CONN", EH_CONN)
    monkeypatch.setenv("TEST_ST_CONN", ST_CONN)
    component = _component(YAML)
    defs = component_defs(component=component)
    repo = defs.get_repository_def()
    snapshot = serialize_value(RepositorySnap.from_def(repo))
    assert "TEST_EH_CONN" in snapshot
    assert SECRET not in snapshot
    # The value is still resolved when a run uses the resource.
    seen: list[str] = []

    @dg.asset
    def probe(eventhub: EventHubResource) -> None:
        settings = eventhub.settings()
        assert SECRET not in repr(settings)
        seen.append(settings.connection_string or "")

    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [probe], resources={"eventhub": component.eventhub.resource()}, instance=instance
        )
        assert result.success
        logs = " ".join(str(e.message) for e in instance.all_logs(result.run_id) if e.message)
    assert seen == [EH_CONN]
    assert SECRET not in logs


def _static_job() -> tuple[dg.AssetsDefinition, dg.UnresolvedAssetJobDefinition]:
    asset = build_eventhub_ingest_asset(key="events", partition_ids=["0", "1", "2", "3"])
    return asset, build_ingest_job(asset)


def test_schedule_launches_k_runs_each_over_every_partition(
    dagster_instance: dg.DagsterInstance,
) -> None:
    asset, job = _static_job()
    assert asset.partitions_def is not None
    schedule = build_ingest_schedule(job, asset.partitions_def, every_minutes=5, runs=3)
    tick = datetime(2026, 1, 1, 12, 5, tzinfo=timezone.utc)
    ctx = dg.build_schedule_context(instance=dagster_instance, scheduled_execution_time=tick)
    requests = schedule.evaluate_tick(ctx).run_requests
    assert requests is not None and len(requests) == 3
    assert len({r.run_key for r in requests}) == 3
    for i, request in enumerate(requests, start=1):
        assert request.tags["dagster/asset_partition_range_start"] == "0"
        assert request.tags["dagster/asset_partition_range_end"] == "3"
        assert request.tags[RUNNER_TAG] == f"{i}/3"


def test_schedule_skips_a_tick_while_the_previous_ticks_runs_are_going(
    dagster_instance: dg.DagsterInstance,
) -> None:
    from dagster._core.storage.dagster_run import DagsterRun

    asset, job = _static_job()
    assert asset.partitions_def is not None
    schedule = build_ingest_schedule(job, asset.partitions_def, every_minutes=5, runs=2)
    tick = datetime(2026, 1, 1, 12, 5, tzinfo=timezone.utc)
    other = DagsterRun(job_name=job.name, run_id=str(uuid.uuid4()), tags={})
    dagster_instance.add_run(other.with_status(dg.DagsterRunStatus.STARTED))  # a manual run
    ctx = dg.build_schedule_context(instance=dagster_instance, scheduled_execution_time=tick)
    assert len(schedule.evaluate_tick(ctx).run_requests or []) == 2
    mine = DagsterRun(
        job_name=job.name,
        run_id=str(uuid.uuid4()),
        tags={"dagster/schedule_name": schedule.name},
    )
    dagster_instance.add_run(mine.with_status(dg.DagsterRunStatus.STARTED))
    data = schedule.evaluate_tick(
        dg.build_schedule_context(instance=dagster_instance, scheduled_execution_time=tick)
    )
    assert not data.run_requests
    assert data.skip_message and "still going" in data.skip_message
    assert mine.run_id[:8] in data.skip_message


def test_schedule_over_dynamic_partitions_uses_what_the_instance_knows(
    dagster_instance: dg.DagsterInstance,
) -> None:
    asset = build_eventhub_ingest_asset(key="events", partition_ids=None)
    pdef = asset.partitions_def
    assert isinstance(pdef, dg.DynamicPartitionsDefinition) and pdef.name
    schedule = build_ingest_schedule(build_ingest_job(asset), pdef, every_minutes=1, runs=2)
    tick = datetime(2026, 1, 1, 12, 5, tzinfo=timezone.utc)
    ctx = dg.build_schedule_context(instance=dagster_instance, scheduled_execution_time=tick)
    data = schedule.evaluate_tick(ctx)
    assert not data.run_requests and data.skip_message and "no partitions yet" in data.skip_message
    dagster_instance.add_dynamic_partitions(pdef.name, ["0", "1", "2"])
    ctx = dg.build_schedule_context(instance=dagster_instance, scheduled_execution_time=tick)
    requests = schedule.evaluate_tick(ctx).run_requests
    assert requests is not None and len(requests) == 2
    assert {r.tags["dagster/asset_partition_range_end"] for r in requests} == {"2"}


def test_partitions_to_add_only_new_ids_in_numeric_order() -> None:
    assert partitions_to_add(["10", "2", "0", "1"], ["0", "1"]) == ["2", "10"]
    assert partitions_to_add(["0", "1"], ["0", "1"]) == []


def test_replay_run_config_is_validated_with_clear_messages() -> None:
    assert ReplayConfig().replay_settings(["0"]) is None
    spec = ReplayConfig(replay_ranges={"0": [5, 9]}).replay_settings(["0", "1"])
    assert spec is not None and spec.ranges == {"0": (5, 9)}
    spec = ReplayConfig(replay_from="earliest").replay_settings(["0"])
    assert spec is not None and spec.starting_position == "earliest"
    cases = [
        (ReplayConfig(replay_ranges={"7": [1, 2]}), "partition '7' is not among"),
        (ReplayConfig(replay_ranges={"0": [9, 5]}), "must be [first, last]"),
        (ReplayConfig(replay_ranges={"0": [1]}), "must be [first, last]"),
        (ReplayConfig(replay_to="10"), "replay_to: needs replay_from"),
        (
            ReplayConfig(replay_ranges={"0": [1, 2]}, replay_from="earliest"),
            "either replay_ranges or replay_from",
        ),
    ]
    for config, message in cases:
        with pytest.raises(ConfigurationError) as info:
            config.replay_settings(["0", "1"])
        assert message in str(info.value)


def test_asset_config_places_the_lag_check_and_names_a_misplaced_key() -> None:
    opts = IngestAssetConfig(lag_check=LagCheckOptions(max_lag_events=10))
    assert opts.lag_thresholds == LagCheckOptions(max_lag_events=10)
    assert IngestAssetConfig(lag_check=LagCheckOptions(severity="ERROR")).lag_thresholds is None
    with pytest.raises(ConfigurationError, match=r"^lag_check.max_lag_events: -1 must be >= 0"):
        IngestAssetConfig(lag_check={"max_lag_events": -1})
    with pytest.raises(
        ConfigurationError,
        match=r"^max_lag_events: unknown key here; it belongs in lag_check: write lag_check: "
        r"\{max_lag_events: \.\.\.\}$",
    ):
        IngestAssetConfig(max_lag_events=10)
    with pytest.raises(ConfigurationError, match=r"^lag_check_severity: unknown key; did you mean"):
        IngestAssetConfig(lag_check_severity="ERROR")


def _report(pid: str, lag_events: int | None, lag_seconds: float | None) -> PartitionReport:
    return PartitionReport(partition_id=pid, lag_events=lag_events, lag_seconds=lag_seconds)


def test_lag_check_passes_within_and_fails_over_threshold() -> None:
    key = dg.AssetKey("events")
    opts = LagCheckOptions(max_lag_events=10, max_lag_seconds=60.0)
    ok = lag_check_result(key, opts, {"0": _report("0", 0, 0.0), "1": _report("1", 10, 59.0)})
    assert ok.passed
    assert ok.metadata["eventhub/partition_ids_over_threshold"].value == "none"
    # The asset-level summary: totals, a count, and ids labelled as ids.
    assert ok.metadata["eventhub/total_lag_events"].value == 10
    assert ok.metadata["eventhub/partitions_behind"].value == 1
    assert ok.metadata["eventhub/partition_ids_behind"].value == "partition ids 1"
    over_events = lag_check_result(key, opts, {"0": _report("0", 11, 1.0)})
    assert not over_events.passed
    assert over_events.metadata["eventhub/partition_ids_over_threshold"].value == "partition ids 0"
    assert over_events.metadata["eventhub/max_lag_events"].value == 11
    over_seconds = lag_check_result(key, opts, {"0": _report("0", 1, 248.257711)})
    assert not over_seconds.passed
    assert over_seconds.metadata["eventhub/max_lag_seconds"].value == 248  # whole seconds
    # Each partition's row names its last batch, when and by which run.
    batch = LastBatch("100..199", 1_700_000_000.0, "0123456789abcdef")
    table = (
        lag_check_result(
            key,
            opts,
            {"0": _report("0", 3, 2.6)},
            checkpoints={"0": 199},
            last_batches={"0": batch},
        )
        .metadata["eventhub/partitions"]
        .value
    )
    assert "| 0 | 199 | 3 | 3 | 100..199 | 2023-11-14 22:13:20 UTC | 01234567 |" in table
    missing = lag_check_result(key, opts, {"0": _report("0", 0, 0.0), "1": None})
    assert not missing.passed
    assert missing.metadata["eventhub/partition_ids_over_threshold"].value == "partition ids 1"


def _written(pid: str, events: int, **kw: object) -> PartitionReport:
    return PartitionReport(
        partition_id=pid,
        events=events,
        bytes=events * 10,
        up_to_date=True,
        first_sequence_number=0 if events else None,
        last_sequence_number=events - 1 if events else None,
        lag_events=0,
        lag_seconds=0.4,
        **kw,  # type: ignore[arg-type]
    )


def test_materialization_plan_one_point_per_batch_but_requested_partitions_done() -> None:
    reports = {"0": _written("0", 5), "1": _written("1", 0), "2": _written("2", 0)}
    reports["3"] = PartitionReport(partition_id="3", up_to_date=False)
    targets = ["0", "1", "2", "3"]
    # A scheduled run: only the batch it landed, plus a partition never seen materialized.
    assert materialization_plan(
        targets, reports, complete=False, explicit_request=False, never_materialized={"2"}
    ) == ["0", "2"]
    # A backfill or launchpad run: every requested partition that is up to date.
    assert materialization_plan(
        targets, reports, complete=False, explicit_request=True, never_materialized=set()
    ) == ["0", "1", "2"]


def _described(md: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in md["dagster/column_schema"].value.columns]


def _spark_columns(schema: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def test_partition_metadata_has_standard_keys_and_no_zero_noise() -> None:
    md = partition_metadata(
        _written("0", 5, landed_total=25, checkpoint_sequence_number=4),
        output_location="/data/ev",
        replay=False,
    )
    # Dagster's meaning: the rows the partition holds (all batches), beside this batch's.
    assert md["dagster/partition_row_count"].value == 25 and md["dagster/row_count"].value == 5
    assert md["dagster/uri"].value == "/data/ev"
    assert isinstance(md["dagster/column_schema"].value, dg.TableSchema)
    names = [c.name for c in md["dagster/column_schema"].value.columns]
    assert names[:4] == ["body", "partition", "offset", "sequenceNumber"] and "eh_batch" in names
    assert "eh_source" not in names
    shared = partition_metadata(
        _written("0", 5), output_location="/data/ev", replay=False, sink_sources="many"
    )
    names = [c.name for c in shared["dagster/column_schema"].value.columns]
    assert names[-2:] == ["eh_source", "eh_batch"]
    # Described without pyspark, as the sink's Spark schema has them (Spark SQL type names).
    assert _described(md) == _spark_columns(output_schema("one"))
    assert _described(shared) == _spark_columns(output_schema("many"))
    # No frozen lag, no second copy of dagster/uri, the rest under the project's namespace.
    assert not {k for k in md if "lag" in k} and "output_location" not in md
    assert all(k.startswith(("dagster/", "eventhub/")) for k in md), sorted(md)
    assert isinstance(md["eventhub/bytes"], dg.IntMetadataValue)
    assert md["eventhub/checkpoint"].value == "sequence number 4"
    table = partition_metadata(
        _written("0", 5), output_location="db.ev", replay=False, sink_table="db.ev"
    )
    assert table["dagster/table_name"].value == "db.ev" and "dagster/uri" not in table
    quiet = partition_metadata(
        _written("1", 0, read_by=["run-b"], landed_total=12), output_location="/d", replay=False
    )
    assert not {"dagster/row_count", "eventhub/bytes"} & set(quiet)
    assert quiet["dagster/partition_row_count"].value == 12  # the size, not a zero
    assert "read by run-b" in quiet["eventhub/batch"].value
    unknown = partition_metadata(_written("1", 4), output_location="/d", replay=False)
    assert "dagster/partition_row_count" not in unknown
    assert unknown["dagster/row_count"].value == 4
    took_over = partition_metadata(
        _written("2", 3, replayed_intents=[(10, 12, "run-dead")]),
        output_location="/d",
        replay=False,
    )
    assert took_over["eventhub/replay"].value == "pending range 10..12 left by run-dead"


def test_an_interrupted_step_in_process_fails_once_without_the_retry_policys_retries() -> None:
    """In the run's own process (``dg.materialize``, the in-process executor) Dagster turns an
    interrupt into a retry under a RetryPolicy; the asset's wrapper makes it a final failure."""

    def interrupted() -> Iterator[dg.MaterializeResult]:
        raise dg.DagsterExecutionInterruptedError()
        yield  # a generator, as the asset's body is

    def steps(wrap: bool) -> tuple[list[str], dg.ExecuteInProcessResult]:
        @dg.asset(name=f"stopped_{wrap}", retry_policy=dg.RetryPolicy(max_retries=2))
        def stopped() -> Iterator[dg.MaterializeResult]:
            yield from stopped_is_final(interrupted()) if wrap else interrupted()

        result = dg.materialize([stopped], raise_on_error=False)
        return [e.event_type_value for e in result.all_events], result

    plain, _ = steps(wrap=False)  # what the wrapper is for: Dagster's own behaviour
    assert plain.count("STEP_UP_FOR_RETRY") == 2 and plain.count("STEP_RESTARTED") == 2, plain
    final, result = steps(wrap=True)
    assert "STEP_UP_FOR_RETRY" not in final and "STEP_RESTARTED" not in final, final
    assert final.count("STEP_FAILURE") == 1 and not result.success
    failure = result.get_step_failure_events()[0].step_failure_data
    assert failure.user_failure_data is not None
    assert failure.user_failure_data.description is not None
    assert "is not retried" in failure.user_failure_data.description
    assert failure.user_failure_data.metadata["error"].value == "DagsterExecutionInterruptedError"


def test_is_owner_dead_follows_the_instance_run_status(
    dagster_instance: dg.DagsterInstance,
) -> None:
    @dg.asset
    def fails() -> None:
        raise RuntimeError("boom")

    @dg.asset
    def works() -> None:
        return None

    failed = dg.materialize([fails], instance=dagster_instance, raise_on_error=False)
    succeeded = dg.materialize([works], instance=dagster_instance)
    assert not failed.success
    is_dead = dagster_run_is_dead(dagster_instance)
    assert is_dead(failed.run_id)
    assert not is_dead(succeeded.run_id)
    assert not is_dead(str(uuid.uuid4()))  # unknown run: wait for lease expiry instead
    assert not is_dead("ehingest-cli@host-1")  # not a run id at all
    assert not is_dead("")


def _yaml_blocks(doc: str) -> list[str]:
    """The ```yaml blocks of a Markdown file under the repository root."""
    import re

    text = (ROOT / doc).read_text(encoding="utf-8")
    return re.findall(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("doc", ["README.md", "docs/dagster.md"])
def test_the_documented_defs_yaml_loads_and_builds(doc: str) -> None:
    """Every defs.yaml shown in the docs loads as written and builds its definitions."""
    blocks = [b for b in _yaml_blocks(doc) if "EventHubIngestComponent" in b]
    assert blocks, f"{doc} shows no defs.yaml"
    for block in blocks:
        component = _component(block)
        defs = component_defs(component=component)
        key = dg.AssetKey(component.asset_key.split("/"))
        asset = defs.resolve_assets_def(key)
        assert asset.partitions_def is not None
        assert asset.partitions_def.get_partition_keys() == ["0", "1", "2", "3"]
        assert defs.resolve_asset_graph().has(dg.AssetCheckKey(key, LAG_CHECK_NAME))
        assert defs.resolve_schedule_def(f"{key.to_python_identifier()}_job_schedule")


def test_the_documented_sink_block_loads_in_the_cli_file() -> None:
    import yaml

    from dagster_eventhub_ingest.cli.config import parse_config

    (block,) = [b for b in _yaml_blocks("docs/sinks.md") if b.startswith("sink:")]
    doc = {
        "eventhub": {"eventhub_name": "telemetry"},
        "store": {"container": "state"},
        **yaml.safe_load(block),
    }
    env = {
        "EVENTHUB_CONNECTION_STRING": EH_CONN,
        "AZURE_STORAGE_CONNECTION_STRING": ST_CONN,
        "SINK_ACCOUNT_KEY": SECRET,
    }
    sink = parse_config(doc, env).ingest.sink
    assert (sink.format, sink.storage_options["account_key"]) == ("deltalake", SECRET)


def test_resources_read_like_documentation_in_the_ui() -> None:
    """The UI shows a resource's docstring and its fields' descriptions: plain text, all there."""
    import re

    from dagster_eventhub_ingest.dagster_project import resources

    markup = re.compile(r":(class|func|meth|mod):|::|``")
    for name in [
        "EventHubResource",
        "PartitionStoreResource",
        "SinkResource",
        "LocalPySparkResource",
        "EventHubConnectionString",
        "EventHubIdentity",
        "StoreConnectionString",
        "StoreIdentity",
    ]:
        cls = getattr(resources, name)
        assert cls.__doc__ and not markup.search(cls.__doc__), name
        for field, info in cls.model_fields.items():
            assert info.description, f"{name}.{field} has no description"
            assert not markup.search(info.description), f"{name}.{field}: {info.description}"
