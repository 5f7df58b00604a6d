"""The one configuration model (resources/config/): declared once, read by every surface."""

from __future__ import annotations

import pytest

from dagster_eventhub_ingest.resources.azure.credentials import make_credential
from dagster_eventhub_ingest.resources.config import (
    OUTPUT_COLUMNS,
    PARTITION_COLUMNS,
    STRATEGY_NAMES,
    EventHubConfig,
    IngestConfig,
    PipelineConfig,
    SparkConfig,
    StoreConfig,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.settings import EventHubSettings

SECRET = "c2VjcmV0LWtleQ=="
EH = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey={SECRET}"
ST = (
    f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={SECRET};"
    "EndpointSuffix=core.windows.net"
)
ENV = {"EVENTHUB_CONNECTION_STRING": EH, "AZURE_STORAGE_CONNECTION_STRING": ST}


def pipeline(**over: object) -> dict:
    base: dict = {
        "eventhub": {"eventhub_name": "telemetry"},
        "store": {"container": "state"},
        "sink": {"path": "/data/out"},
    }
    base.update(over)
    return base


def test_strategy_names_are_the_registered_strategies() -> None:
    from dagster_eventhub_ingest.ops.balancing import STRATEGIES

    assert set(STRATEGY_NAMES) == set(STRATEGIES)


def test_output_columns_are_the_source_schema() -> None:
    from dagster_eventhub_ingest.resources.eventhubs_source import eventhubs_schema
    from dagster_eventhub_ingest.resources.settings import EVENT_FIELDS

    assert list(OUTPUT_COLUMNS) == eventhubs_schema().fieldNames()
    # The declared Spark SQL types are the schema's (the Dagster column schema shows them).
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in eventhubs_schema().fields] == [
        (name, sql, True) for name, sql in EVENT_FIELDS
    ]
    assert set(PARTITION_COLUMNS) <= set(OUTPUT_COLUMNS)


def test_a_plain_dict_builds_the_run_config_with_default_env_vars() -> None:
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings

    config = IngestSettings.from_config(
        PipelineConfig.from_dict(pipeline(strategy="greedy", prefetch=50)), ENV
    )
    assert (config.strategy, config.prefetch, config.max_events_per_partition) == (
        "greedy",
        50,
        100_000,
    )
    assert config.eventhub.connection_string == EH and config.store.connection_string == ST
    assert SECRET not in repr(config)


def test_entity_path_names_the_hub() -> None:
    hub = EventHubConfig.from_dict({"credential": {"connection_string_env": "C"}})
    settings = hub.settings({"C": EH + ";EntityPath=telemetry"})
    assert settings.eventhub_name == "telemetry"
    assert settings.namespace == "ns.servicebus.windows.net"
    with pytest.raises(ConfigurationError, match="EntityPath='telemetry' differs from"):
        EventHubSettings(eventhub_name="other", connection_string=EH + ";EntityPath=telemetry")
    with pytest.raises(ConfigurationError, match=r"eventhub_name: required .* EntityPath=<hub>"):
        hub.settings({"C": EH})


_IN_A_WORKER = """
import pickle, sys
settings = pickle.loads(sys.stdin.buffer.read())
from dagster_eventhub_ingest.resources.amqp.cbs import audience_of, token_source
source = token_source(settings)
print(type(source).__name__, audience_of(settings), "azure.eventhub" in sys.modules)
"""


def test_settings_unpickled_in_a_worker_authorize_without_the_sdk() -> None:
    """A Spark worker's reader gets its tokens and audience from the unpickled settings without
    importing azure-eventhub (~0.3 s of CPU per Python worker); the parts are the SDK's."""
    import pickle
    import subprocess
    import sys

    settings = EventHubSettings(eventhub_name="h", connection_string=EH)
    assert settings.connection_parts() == (
        "ns.servicebus.windows.net",
        None,
        "listen",
        SECRET,
    )
    assert SECRET not in repr(settings)
    assert settings == EventHubSettings(eventhub_name="h", connection_string=EH)
    done = subprocess.run(
        [sys.executable, "-c", _IN_A_WORKER],
        input=pickle.dumps(settings),
        capture_output=True,
        check=True,
    )
    assert done.stdout.decode().split() == [
        "_SharedKey",
        "sb://ns.servicebus.windows.net/h/consumergroups/$Default",
        "False",
    ]


def test_malformed_eventhub_connection_string_is_reported_by_the_sdk_parser() -> None:
    hub = EventHubConfig.from_dict({"eventhub_name": "h", "credential": {}})
    with pytest.raises(ConfigurationError) as err:
        hub.settings({"EVENTHUB_CONNECTION_STRING": f"Endpoint=ns;SharedAccessKey={SECRET}"})
    assert str(err.value).startswith("eventhub.connection_string: ")
    assert "the value is not shown" in str(err.value) and SECRET not in str(err.value)


def test_missing_env_var_is_named() -> None:
    hub = EventHubConfig.from_dict({"eventhub_name": "h"}, where="eventhub")
    with pytest.raises(ConfigurationError) as err:
        hub.settings({})
    assert str(err.value) == (
        "eventhub.credential.connection_string_env: environment variable "
        "EVENTHUB_CONNECTION_STRING is not set (or empty); export the connection string in it "
        "before running"
    )


def test_identity_options_reach_default_azure_credential() -> None:
    store = StoreConfig.from_dict(
        {
            "container": "state",
            "credential": {
                "credential_type": "default_azure_credential",
                "account_url": "https://a.blob.core.windows.net",
                "managed_identity_client_id": "11111111-2222-3333-4444-555555555555",
                "tenant_id": "tenant-1",
                "exclude_environment_credential": True,
                "exclude_workload_identity_credential": True,
                "exclude_shared_token_cache_credential": True,
                "exclude_cli_credential": True,
                "exclude_developer_cli_credential": True,
                "exclude_powershell_credential": True,
                "exclude_visual_studio_code_credential": True,
                "exclude_broker_credential": True,
            },
        }
    )
    settings = store.settings({})
    options = dict(settings.credential_options)
    assert options["managed_identity_client_id"] == "11111111-2222-3333-4444-555555555555"
    credential = make_credential(settings.credential_type, settings.credential_options)
    # Only managed identity is left in the chain (no network call is made by building it).
    chain = [type(c).__name__ for c in credential.credentials]  # type: ignore[attr-defined]
    assert chain == ["ManagedIdentityCredential"]


def test_spark_settings_accept_numbers_and_booleans() -> None:
    conf = SparkConfig.from_dict({"conf": {"spark.sql.shuffle.partitions": 4, "x.y": True}}).conf
    assert conf == {"spark.sql.shuffle.partitions": "4", "x.y": "true"}


def test_run_override_of_zero_is_an_error_not_the_default() -> None:
    options = IngestConfig(max_events_per_partition=500)
    assert options.with_overrides(max_events_per_partition=None) is options
    assert options.with_overrides(max_events_per_partition=7).max_events_per_partition == 7
    with pytest.raises(
        ConfigurationError, match=r"^max_events_per_partition: 0 must be an integer >= 1$"
    ):
        options.with_overrides(max_events_per_partition=0)


def test_the_asset_run_config_override_of_zero_is_rejected() -> None:
    import dagster as dg

    from dagster_eventhub_ingest.dagster_project.assets import build_eventhub_ingest_asset
    from dagster_eventhub_ingest.dagster_project.resources import (
        EventHubConnectionString,
        EventHubResource,
        PartitionStoreResource,
        SinkResource,
        StoreConnectionString,
    )
    from dagster_eventhub_ingest.resources.config import IngestAssetConfig

    asset = build_eventhub_ingest_asset(
        key="events", partition_ids=["0"], options=IngestAssetConfig(max_events_per_partition=9)
    )
    result = dg.materialize(
        [asset],
        partition_key="0",
        resources={
            "eventhub": EventHubResource(
                eventhub_name="h", credential=EventHubConnectionString(connection_string=EH)
            ),
            "partition_store": PartitionStoreResource(
                container="state", credential=StoreConnectionString(connection_string=ST)
            ),
            "sink": SinkResource(path="/nonexistent/never-written"),
            "pyspark": object(),
        },
        run_config={"ops": {"events": {"config": {"max_events_per_partition": 0}}}},
        raise_on_error=False,
    )
    assert not result.success
    failure = result.get_step_failure_events()[0]
    assert "max_events_per_partition: 0 must be an integer >= 1" in str(
        failure.event_specific_data.error  # type: ignore[union-attr]
    )


def test_identity_options_travel_to_the_executors_in_the_reader_options() -> None:
    from dagster_eventhub_ingest.resources.eventhubs_source import ReadOptions

    settings = EventHubSettings(
        eventhub_name="h",
        fully_qualified_namespace="ns.servicebus.windows.net",
        credential_type="default_azure_credential",
        credential_options=(
            ("managed_identity_client_id", "cid"),
            ("exclude_cli_credential", True),
        ),
    )
    again = ReadOptions.from_options(ReadOptions(settings=settings).to_options()).settings
    assert again == settings


def test_the_sink_resource_is_the_sink_config_and_keeps_storage_options() -> None:
    from dagster_eventhub_ingest.dagster_project.resources import SinkResource
    from dagster_eventhub_ingest.resources.config import SinkConfig

    yaml_sink = SinkConfig.from_dict(
        {
            "format": "deltalake",
            "path": "abfss://bronze@acct.dfs.core.windows.net/t",
            "storage_options": {"account_name": "acct", "use_emulator": True},
        },
        where="sink",
    )
    resource = SinkResource.from_config(yaml_sink)
    assert resource.settings() == yaml_sink.settings()
    assert resource.settings().storage_options == {"account_name": "acct", "use_emulator": "True"}
    # The same checks as the YAML, at construction, in one line.
    with pytest.raises(ConfigurationError) as info:
        SinkResource(path="/out", format="parqet")
    assert str(info.value) == (
        "format: 'parqet' is not a known format; did you mean 'parquet'? valid: parquet, delta, "
        "orc, avro, json, iceberg, hudi, deltalake, or a data source's fully qualified class name"
    )
    with pytest.raises(ConfigurationError, match=r"^partition_by: 'partition_id' is not a column"):
        SinkResource(path="/out", partition_by=["partition_id"])


def test_the_resources_take_the_yaml_credential_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_eventhub_ingest.dagster_project.resources import (
        EventHubConnectionString,
        EventHubResource,
        PartitionStoreResource,
        StoreConnectionString,
    )

    monkeypatch.setenv("MY_EH", EH)
    monkeypatch.setenv("MY_ST", ST)
    # By the variable's name, as in YAML ...
    by_name = EventHubResource(
        eventhub_name="h", credential=EventHubConnectionString(connection_string_env="MY_EH")
    )
    # ... or by value (dg.EnvVar in a real project): the same settings.
    by_value = EventHubResource(
        eventhub_name="h", credential=EventHubConnectionString(connection_string=EH)
    )
    assert by_name.settings() == by_value.settings()
    assert (
        by_name.settings()
        == EventHubConfig.from_dict(
            {"eventhub_name": "h", "credential": {"connection_string_env": "MY_EH"}}
        ).settings()
    )
    store = PartitionStoreResource(
        container="state", credential=StoreConnectionString(connection_string_env="MY_ST")
    )
    assert (
        store.settings()
        == StoreConfig.from_dict(
            {"container": "state", "credential": {"connection_string_env": "MY_ST"}}
        ).settings()
    )
    unset = EventHubResource(
        eventhub_name="h", credential=EventHubConnectionString(connection_string_env="NOT_SET_X")
    )
    with pytest.raises(ConfigurationError) as info:
        unset.settings()
    assert str(info.value).startswith(
        "eventhub.credential.connection_string_env: environment variable NOT_SET_X is not set"
    )


def test_resources_check_an_env_var_value_when_it_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from dagster_eventhub_ingest.dagster_project.resources import (
        PartitionStoreResource,
        StoreConnectionString,
    )

    monkeypatch.setenv("MY_CONTAINER", "leases-x")
    monkeypatch.setenv("MY_ST", ST)
    # The variable's name is not judged as a container name; its value is, when Dagster sets it.
    resource = PartitionStoreResource(
        container=dg.EnvVar("MY_CONTAINER"),
        credential=StoreConnectionString(connection_string=dg.EnvVar("MY_ST")),
    )

    @dg.asset(required_resource_keys={"store"})
    def probe(context) -> str:  # type: ignore[no-untyped-def]
        return context.resources.store.settings().container

    result = dg.materialize([probe], resources={"store": resource})
    assert result.output_for_node("probe") == "leases-x"
    with pytest.raises(ConfigurationError, match=r"^container: 'Bad_Name' is not a valid Blob"):
        PartitionStoreResource(container="Bad_Name", credential=StoreConnectionString())


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/data/t[1]", "which Spark reads as a glob pattern"),
        ("/data/*", "which Spark reads as a glob pattern"),
        ("/", "is the root of the file system"),
        ("", "is empty"),
    ],
)
def test_every_surface_refuses_a_dangerous_sink_path(path: str, why: str) -> None:
    """The check lives in the model (resources/settings.py's sink_path_problem), so the YAML
    (CLI, defs.yaml), the Dagster resource and hand-built settings refuse the same path with the
    same words (the Airflow connection is read by SinkConfig too: tests/airflow)."""
    from dagster_eventhub_ingest.dagster_project.resources import SinkResource
    from dagster_eventhub_ingest.resources.sink import SinkSettings

    surfaces = {
        "yaml": lambda: PipelineConfig.from_dict(pipeline(sink={"path": path})),
        "resource": lambda: SinkResource(path=path).settings(),
        "settings": lambda: SinkSettings(path=path),
    }
    for name, build in surfaces.items():
        with pytest.raises(ConfigurationError) as info:
            build()
        assert why in str(info.value) and "path" in str(info.value), (name, str(info.value))


def test_env_references_are_expanded_once_and_empty_ones_refused_inside_a_value() -> None:
    from dagster_eventhub_ingest.resources.config import expand_env

    env = {"ROOT": "/lake", "EMPTY": "", "OPTS": ""}
    doc = {"sink": {"path": "${ROOT}/t"}, "spark": {"conf": {"x": "${OPTS}"}}}
    assert expand_env(doc, "", env) == {"sink": {"path": "/lake/t"}, "spark": {"conf": {"x": ""}}}
    with pytest.raises(ConfigurationError, match=r"^sink\.path: environment variable EMPTY "):
        expand_env({"sink": {"path": "${EMPTY}/t"}}, "", env)
    with pytest.raises(ConfigurationError, match=r"^a\[0\]: environment variable NOPE .* not set"):
        expand_env({"a": ["x${NOPE}"]}, "", env)
