"""The CLI config file: ${ENV} interpolation, literal secrets rejected, errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dagster_eventhub_ingest.cli.config import load_config, parse_config
from dagster_eventhub_ingest.resources.errors import ConfigurationError

EH = "Endpoint=sb://ns.example/;SharedAccessKeyName=k;SharedAccessKey=topsecret"
ST = "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=topsecret;BlobEndpoint=http://x/a;"
ENV = {"EH_CONN": EH, "ST_CONN": ST}


def doc(**over) -> dict:
    base = {
        "eventhub": {
            "eventhub_name": "telemetry",
            "credential": {"connection_string_env": "EH_CONN"},
        },
        "store": {
            "container": "ehingest-state",
            "credential": {"connection_string_env": "ST_CONN"},
        },
        "sink": {"format": "parquet", "path": "/data/out", "partition_by": ["partition"]},
        "strategy": "jump_hash",
        "max_events_per_partition": 500,
        "lease_expiry_seconds": 30,
        "on_data_loss": "skip",
        "spark": {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": 2}},
    }
    base.update(over)
    return base


def test_example_config_in_docs_parses(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "example-config.yaml"
    env = {"EVENTHUB_CONNECTION_STRING": EH, "STORAGE_CONNECTION_STRING": ST}
    cfg = load_config(example, env)
    assert cfg.ingest.eventhub.eventhub_name and cfg.ingest.store.container


def test_full_config_builds_the_run_settings() -> None:
    cfg = parse_config(doc(), ENV)
    ing = cfg.ingest
    assert ing.eventhub.connection_string == EH and ing.eventhub.consumer_group == "$Default"
    assert ing.store.connection_string == ST and ing.sink.partition_by == ("partition",)
    assert (ing.strategy, ing.max_events_per_partition, ing.on_data_loss) == (
        "jump_hash",
        500,
        "skip",
    )
    assert ing.lease_expiry_seconds == 30.0
    assert (cfg.spark.effective_master, dict(cfg.spark.conf)) == (
        "local[1]",
        {"spark.sql.shuffle.partitions": "2"},
    )
    assert "topsecret" not in repr(cfg)


def test_join_grace_is_a_config_key() -> None:
    assert parse_config(doc(), ENV).ingest.join_grace_seconds == 1.0
    assert parse_config(doc(join_grace_seconds=0), ENV).ingest.join_grace_seconds == 0.0
    with pytest.raises(ConfigurationError, match="join_grace_seconds"):
        parse_config(doc(join_grace_seconds=-1), ENV)


def test_literal_secret_in_file_is_rejected_with_the_fix() -> None:
    raw = doc(store={"connection_string": ST, "container": "ehingest-state"})
    with pytest.raises(ConfigurationError) as err:
        parse_config(raw, ENV)
    msg = str(err.value)
    assert msg.startswith("store.connection_string: the config file holds a literal secret")
    assert "${STORE_CONNECTION_STRING}" in msg and "topsecret" not in msg


def test_missing_env_var_names_key_and_variable() -> None:
    with pytest.raises(
        ConfigurationError,
        match=r"eventhub.credential.connection_string_env: environment variable EH_CONN is not",
    ):
        parse_config(doc(), {"ST_CONN": ST})


@pytest.mark.parametrize(
    ("section", "message"),
    [
        # A key written one level too high: named, with the block it belongs in.
        (
            {"eventhub": {"eventhub_name": "h", "fully_qualified_namespace": "ns.example"}},
            "eventhub.fully_qualified_namespace: unknown key here; it belongs in credential: "
            "write credential: {fully_qualified_namespace: ...}",
        ),
        (
            {"store": {"container": "state", "connection_string_env": "ST_CONN"}},
            "store.connection_string_env: unknown key here; it belongs in credential: "
            "write credential: {connection_string_env: ...}",
        ),
        # A key that is close to one inside a block: the did-you-mean names its path.
        (
            {"eventhub": {"eventhub_name": "h", "connection_string": "${EH_CONN}"}},
            "eventhub.connection_string: unknown key; did you mean "
            "'credential.connection_string_env'? valid keys: eventhub_name, consumer_group, "
            "credential",
        ),
        # The credential is a mapping; its type selects DefaultAzureCredential.
        (
            {"eventhub": {"eventhub_name": "h", "credential": "default_azure_credential"}},
            "eventhub.credential: 'default_azure_credential' must be a mapping; write "
            "credential: {credential_type: default_azure_credential, ...}",
        ),
        (
            {"store": {"container": "state", "credential": {"account_url": "https://a.example"}}},
            "store.credential.account_url: a key of credential_type default_azure_credential; "
            "add credential_type: default_azure_credential",
        ),
    ],
)
def test_a_key_in_the_wrong_place_is_refused_with_where_it_belongs(
    section: dict, message: str
) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_config(doc(**section), ENV)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"strategy": "fastest"}, "strategy: 'fastest' is not valid; valid: greedy, balanced"),
        (
            {"max_events_per_partition": "lots"},
            "max_events_per_partition: 'lots' must be an integer",
        ),
        ({"max_events_per_partition": 0}, "max_events_per_partition: 0 must be an integer >= 1"),
        ({"on_data_loss": "ignore"}, "on_data_loss: 'ignore' is not valid; valid: 'fail', 'skip'"),
        (
            {"lease_expiry": 5},
            "lease_expiry: unknown key; did you mean 'lease_expiry_seconds'? valid keys:",
        ),
        ({"sink": {"path": "/a", "table": "t"}}, "sink: give exactly one of path or table"),
        (
            {"sink": {"path": "/a", "mode": "x"}},
            "sink.mode: unknown key; valid keys: format, path, table, partition_by, shared, "
            "storage_options",
        ),
        (
            {"store": {"credential": {"connection_string_env": "ST_CONN"}}},
            "store.container: required",
        ),
        (
            {"store": {"container": "Bad_Name"}},
            "store.container: 'Bad_Name' is not a valid Blob container name",
        ),
        (
            {"eventhub": {"eventhub_name": "h", "credential": {"credential_type": "password"}}},
            "eventhub.credential: credential_type 'password' is not valid; valid: "
            "connection_string, default_azure_credential",
        ),
        (
            {"eventhub": {"eventhub_name": "h", "credential": "password"}},
            "eventhub.credential: 'password' must be a mapping; write credential: "
            "{credential_type: connection_string, ...} (valid credential_type: "
            "connection_string, default_azure_credential)",
        ),
    ],
)
def test_bad_values_name_the_key_value_and_what_is_valid(over: dict, message: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_config(doc(**over), ENV)
    assert message in str(err.value)
    assert "topsecret" not in str(err.value)


def test_managed_identity_config_needs_no_secret() -> None:
    raw = doc(
        eventhub={
            "eventhub_name": "h",
            "credential": {
                "credential_type": "default_azure_credential",
                "fully_qualified_namespace": "ns.servicebus.windows.net",
                "managed_identity_client_id": "cid",
                "tenant_id": "tid",
                "exclude_cli_credential": True,
            },
        },
        store={
            "container": "state",
            "credential": {
                "credential_type": "default_azure_credential",
                "account_url": "https://acct.blob.core.windows.net",
            },
        },
    )
    cfg = parse_config(raw, {})
    assert cfg.ingest.eventhub.credential_type == "default_azure_credential"
    assert dict(cfg.ingest.eventhub.credential_options) == {
        "managed_identity_client_id": "cid",
        "tenant_id": "tid",
        "exclude_cli_credential": True,
    }
    assert cfg.ingest.store.account_url == "https://acct.blob.core.windows.net"


def test_unreadable_and_invalid_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("eventhub: [unclosed\n")
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(doc()))
    assert load_config(good, ENV).ingest.strategy == "jump_hash"


def test_spark_remote_is_exclusive_with_master_and_must_be_sc() -> None:
    cfg = parse_config(doc(spark={"remote": "sc://spark.example:15002"}, sink=_shared()), ENV)
    assert (cfg.spark.remote, cfg.spark.effective_master, cfg.spark.ship_code) == (
        "sc://spark.example:15002",
        None,
        True,
    )
    with pytest.raises(ConfigurationError, match=r"spark: give master .* or remote .*not both"):
        parse_config(doc(spark={"master": "local[1]", "remote": "sc://h:15002"}), ENV)
    with pytest.raises(ConfigurationError, match=r"spark.remote: 'http://h:15002' is not a Spark"):
        parse_config(doc(spark={"remote": "http://h:15002"}, sink=_shared()), ENV)


def test_sink_sources_is_one_unless_the_config_says_many() -> None:
    assert parse_config(doc(sink={"path": "/a"}), ENV).ingest.sink.sources == "one"
    shared = parse_config(doc(sink={"path": "/a", "sources": "many"}), ENV)
    assert shared.ingest.sink.sources == "many"
    with pytest.raises(ConfigurationError, match=r"^sink\.sources: 'all' is not valid; valid: one"):
        parse_config(doc(sink={"path": "/a", "sources": "all"}), ENV)


def _shared(**extra) -> dict:
    return {"format": "deltalake", "path": "/mnt/shared/out", "shared": True, **extra}


@pytest.mark.parametrize(
    "spark",
    [{"master": "spark://10.0.0.5:7077"}, {"master": "yarn"}, {"remote": "sc://h:15002"}],
)
def test_local_sink_path_on_a_cluster_is_refused_unless_declared_shared(spark: dict) -> None:
    for path in ("/data/out", "file:///data/out", "relative/out"):
        with pytest.raises(ConfigurationError) as err:
            parse_config(doc(spark=spark, sink={"format": "deltalake", "path": path}), ENV)
        text = str(err.value)
        assert text.startswith("sink.path: ") and repr(path) in text
        assert "shared: true" in text and "abfss://" in text
    assert parse_config(doc(spark=spark, sink=_shared()), ENV).ingest.sink.shared is True
    # Locations every node shares need no declaration.
    for sink in ({"path": "abfss://c@acct.dfs.core.windows.net/out"}, {"table": "bronze.t"}):
        assert parse_config(doc(spark=spark, sink=sink), ENV).ingest.sink.shared is False


def test_local_masters_take_local_paths_and_ship_code_is_a_bool() -> None:
    for master in ("local", "local[2]", "local[*]", "local-cluster[2,1,1024]"):
        parse_config(doc(spark={"master": master}), ENV)
    cfg = parse_config(doc(spark={"master": "local[1]", "ship_code": False}), ENV)
    assert cfg.spark.ship_code is False
    with pytest.raises(ConfigurationError, match=r"spark.ship_code: 'no' must be true or false"):
        parse_config(doc(spark={"ship_code": "no"}), ENV)
    with pytest.raises(ConfigurationError, match=r"sink.shared: 'yes' must be true or false"):
        parse_config(doc(sink={"path": "/x", "shared": "yes"}), ENV)


def test_sink_storage_options_take_secrets_from_the_environment_only() -> None:
    sink = {
        "format": "deltalake",
        "path": "abfss://events@acct.dfs.core.windows.net/telemetry",
        "storage_options": {"account_name": "acct", "account_key": "${SINK_KEY}"},
    }
    cfg = parse_config(doc(sink=sink), {**ENV, "SINK_KEY": "c2VjcmV0a2V5"})
    assert cfg.ingest.sink.storage_options == {
        "account_name": "acct",
        "account_key": "c2VjcmV0a2V5",
    }
    assert "c2VjcmV0a2V5" not in repr(cfg)
    for key in ("account_key", "sas_token", "client_secret", "azure_storage_account_key"):
        literal = {**sink, "storage_options": {key: "c2VjcmV0a2V5"}}
        with pytest.raises(ConfigurationError) as err:
            parse_config(doc(sink=literal), ENV)
        assert f"sink.storage_options.{key}: a secret must come from the environment" in str(
            err.value
        )
        assert "c2VjcmV0a2V5" not in str(err.value)
    with pytest.raises(ConfigurationError, match=r"storage_options: only for format 'deltalake'"):
        parse_config(doc(sink={**sink, "format": "parquet"}), {**ENV, "SINK_KEY": "k"})
