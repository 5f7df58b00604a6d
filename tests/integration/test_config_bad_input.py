"""Bad configurations fail at load, before any Azure call, with an exact message; nothing written.

Each case is a real ``ehingest run --config`` (in-process through click) against a real hub on
the emulator (with events to read) and a real Azurite store: had a mistake slipped past the
load, the run would have claimed partitions and recorded intents (blobs) before failing, as
``partition_by: [partition_id]`` used to. So "no blob written" is a check that can fail.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.storage.blob import BlobServiceClient
from click.testing import CliRunner

from dagster_eventhub_ingest.cli.main import main

pytestmark = [pytest.mark.integration]

VALID_ROOT = ("eventhub", "store", "sink")


def _base(hub_name: str, container: str, sink: str) -> dict[str, Any]:
    return {
        "eventhub": {"eventhub_name": hub_name, "credential": {"connection_string_env": "EH"}},
        "store": {"container": container, "credential": {"connection_string_env": "ST"}},
        "sink": {"format": "parquet", "path": sink},
        "strategy": "greedy",
        "join_grace_seconds": 0,
    }


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = value


_DELETE = object()
RUN_KEYS = (
    "strategy, strategy_options, max_events_per_partition, max_events_per_cycle, "
    "lease_expiry_seconds, on_data_loss, on_checkpoint_ahead, receive_timeout_seconds, "
    "prefetch, max_readers_per_partition, "
    "run_timeout_seconds, join_grace_seconds, report_lag_seconds, read_progress_seconds"
)
TOP_KEYS = f"{RUN_KEYS}, eventhub, store, sink, spark"
COLUMNS = "partition, offset, sequenceNumber, enqueuedTime, publisher, partitionKey"
FORMATS = "parquet, delta, orc, avro, json, iceberg, hudi, deltalake"
IDENTITY_KEYS = (
    "managed_identity_client_id, tenant_id, exclude_environment_credential, "
    "exclude_workload_identity_credential, exclude_managed_identity_credential, "
    "exclude_shared_token_cache_credential, exclude_cli_credential, "
    "exclude_developer_cli_credential, exclude_powershell_credential, "
    "exclude_visual_studio_code_credential, exclude_broker_credential, "
    "exclude_interactive_browser_credential, credential_type"
)

# (id, {dotted key: value}, extra env, exact message)
CASES: list[tuple[str, dict[str, Any], dict[str, str], str]] = [
    (
        "strategy-typo",
        {"strategy": "greedyy"},
        {},
        "strategy: 'greedyy' is not valid; did you mean 'greedy'? valid: greedy, balanced, eph, "
        "equal, jump_hash, delay_race",
    ),
    (
        "unknown-top-key",
        {"stratgy": "greedy"},
        {},
        f"stratgy: unknown key; did you mean 'strategy'? valid keys: {TOP_KEYS}",
    ),
    (
        "format-typo",
        {"sink.format": "parqet"},
        {},
        "sink.format: 'parqet' is not a known format; did you mean 'parquet'? valid: "
        f"{FORMATS}, or a data source's fully qualified class name",
    ),
    (
        "partition-by-partition-id",
        {"sink.partition_by": ["partition_id"]},
        {},
        "sink.partition_by: 'partition_id' is not a column of the output; did you mean "
        f"'partition'? valid: {COLUMNS}",
    ),
    (
        "partition-by-body",
        {"sink.partition_by": "body"},
        {},
        f"sink.partition_by: 'body' is not a column of the output; valid: {COLUMNS}",
    ),
    (
        "partition-by-twice",
        {"sink.partition_by": ["partition", "partition"]},
        {},
        "sink.partition_by: ['partition', 'partition'] names a column twice",
    ),
    ("prefetch-zero", {"prefetch": 0}, {}, "prefetch: 0 must be 1..10000"),
    ("prefetch-huge", {"prefetch": 20000}, {}, "prefetch: 20000 must be 1..10000"),
    (
        "readers-over-limit",
        {"max_readers_per_partition": 9},
        {},
        "max_readers_per_partition: 9 must be 1..5 (Event Hubs allows 5 readers per partition "
        "and consumer group)",
    ),
    (
        "max-events-zero",
        {"max_events_per_partition": 0},
        {},
        "max_events_per_partition: 0 must be an integer >= 1",
    ),
    (
        "max-events-text",
        {"max_events_per_partition": "lots"},
        {},
        "max_events_per_partition: 'lots' must be an integer",
    ),
    (
        "max-events-float",
        {"max_events_per_partition": 10.5},
        {},
        "max_events_per_partition: 10.5 must be an integer",
    ),
    (
        "lease-zero",
        {"lease_expiry_seconds": 0},
        {},
        "lease_expiry_seconds: 0 must be > 0 (60 is typical)",
    ),
    (
        "receive-negative",
        {"receive_timeout_seconds": -1},
        {},
        "receive_timeout_seconds: -1 must be > 0 (30 is typical)",
    ),
    (
        "on-data-loss",
        {"on_data_loss": "ignore"},
        {},
        "on_data_loss: 'ignore' is not valid; valid: 'fail', 'skip'",
    ),
    (
        "grace-negative",
        {"join_grace_seconds": -1},
        {},
        "join_grace_seconds: -1 must be >= 0 (1 is the default; 0 for one owner)",
    ),
    (
        "run-timeout-negative",
        {"run_timeout_seconds": -5},
        {},
        "run_timeout_seconds: -5 must be >= 0 (0 gives up at once; unset waits while peers "
        "renew leases)",
    ),
    (
        "report-lag-text",
        {"report_lag_seconds": "yes"},
        {},
        "report_lag_seconds: 'yes' must be true or false",
    ),
    (
        "strategy-options-not-taken",
        {"strategy_options": {"delay": 1}},
        {},
        "strategy_options: strategy 'greedy' takes no options (got delay); only delay_race does",
    ),
    (
        "strategy-options-unknown-key",
        {"strategy": "delay_race", "strategy_options": {"min_grab": 5}},
        {},
        "strategy_options.min_grab: unknown key; did you mean 'min_grab_time'? valid keys: "
        "delay, min_grab_time, lookahead",
    ),
    (
        "strategy-options-bad-value",
        {"strategy": "delay_race", "strategy_options": {"delay": 0}},
        {},
        "strategy_options.delay: 0 must be > 0 (seconds)",
    ),
    (
        "sink-path-and-table",
        {"sink.table": "db.t"},
        {},
        "sink: give exactly one of path or table (got path='<sink>', table='db.t')",
    ),
    (
        "deltalake-table",
        {"sink.format": "deltalake", "sink.path": _DELETE, "sink.table": "db.t"},
        {},
        "sink: format 'deltalake' needs a path (a Delta table location), not table='db.t'; or "
        "use format 'delta' with a Spark catalog that has Delta",
    ),
    (
        "sink-sources",
        {"sink.sources": "several"},
        {},
        "sink.sources: 'several' is not valid; valid: one, many",
    ),
    (
        "sink-unknown-key",
        {"sink.mode": "append"},
        {},
        "sink.mode: unknown key; valid keys: format, path, table, partition_by, shared, "
        "storage_options, sources",
    ),
    (
        "container-name",
        {"store.container": "Bad_Name"},
        {},
        "store.container: 'Bad_Name' is not a valid Blob container name (3-63 lower-case "
        "letters, digits and single hyphens, starting with a letter or digit)",
    ),
    ("container-missing", {"store.container": _DELETE}, {}, "store.container: required"),
    ("eventhub-missing", {"eventhub": _DELETE}, {}, "eventhub: required"),
    (
        "credential-type",
        {"eventhub.credential": {"credential_type": "password"}},
        {},
        "eventhub.credential: credential_type 'password' is not valid; valid: "
        "connection_string, default_azure_credential",
    ),
    (
        "identity-without-namespace",
        {"eventhub.credential": {"credential_type": "default_azure_credential"}},
        {},
        "eventhub.credential.fully_qualified_namespace: required",
    ),
    (
        "identity-option-typo",
        {
            "store.credential": {
                "credential_type": "default_azure_credential",
                "account_url": "https://a.blob.core.windows.net",
                "managed_identity_id": "x",
            }
        },
        {},
        "store.credential.managed_identity_id: unknown key; did you mean "
        f"'managed_identity_client_id'? valid keys: {IDENTITY_KEYS}, account_url",
    ),
    (
        "env-var-unset",
        {"eventhub.credential": {"connection_string_env": "NOT_SET_ANYWHERE"}},
        {},
        "eventhub.credential.connection_string_env: environment variable NOT_SET_ANYWHERE is "
        "not set (or empty); export the connection string in it before running",
    ),
    (
        "malformed-connection-string",
        {"eventhub.credential": {"connection_string_env": "BAD_EH"}},
        {"BAD_EH": "Endpoint=127.0.0.1;SharedAccessKeyName=k;SharedAccessKey=topsecret"},
        "eventhub.connection_string: Invalid Endpoint on the Connection String (the value is not "
        "shown, it may hold a secret); copy it from the Azure portal (Event Hubs namespace or "
        "hub > Shared access policies > Connection string-primary key)",
    ),
    (
        "spark-conf-list",
        {"spark": {"conf": {"spark.sql.shuffle.partitions": [1, 2]}}},
        {},
        "spark.conf: spark.sql.shuffle.partitions: [1, 2] must be a string, number or boolean "
        "(a Spark setting)",
    ),
    (
        "spark-master-typo",
        {"spark": {"master": "locl[2]"}},
        {},
        "spark.master: 'locl[2]' is not a Spark master; expected local, local[n], local[*], "
        "spark://host:7077, yarn, k8s://https://host:port or mesos://host:5050 (a Spark Connect "
        "URL goes in remote)",
    ),
    (
        "create-container-text",
        {"store.create_container": "yes"},
        {},
        "store.create_container: 'yes' must be true or false",
    ),
    (
        "path-empty-variable",
        {"sink.path": "${SINK_ROOT}/telemetry"},
        {"SINK_ROOT": ""},
        "sink.path: environment variable SINK_ROOT (from '${SINK_ROOT}') is empty inside "
        "'${SINK_ROOT}/telemetry': a path built from it would point somewhere else (e.g. "
        "'${SINK_ROOT}/x' becomes '/x', at the root of the file system). Set it, or write the "
        "value without it",
    ),
    (
        "path-only-an-empty-variable",
        {"sink.path": "${SINK_ROOT}"},
        {"SINK_ROOT": " "},
        "sink.path: ' ' is empty; give the folder or URI events land in",
    ),
    (
        "path-root",
        {"sink.path": "/"},
        {},
        "sink.path: '/' is the root of the file system; give a folder of its own (was it built "
        "from an empty variable?)",
    ),
    (
        "path-glob",
        {"sink.path": "/data/telemetry[2026]"},
        {},
        "sink.path: '/data/telemetry[2026]' holds '[' ']', which Spark reads as a glob pattern: "
        "the batch would be written, then never found when verified. Name the folder without "
        "'*', '?', '[', ']', '{', '}', '\\\\'",
    ),
    (
        "literal-secret",
        {"store.note": "AccountKey=topsecret"},
        {},
        "store.note: the config file holds a literal secret (the AccountKey value). Secrets come "
        "only from environment variables: set e.g. STORE_NOTE=... in the environment and write "
        "'note: ${STORE_NOTE}' in the file.",
    ),
]


@pytest.fixture(scope="module")
def hub(eventhub_emulator: Any) -> Any:
    """One hub with events for every case (each case fails before touching it)."""
    created = eventhub_emulator.create_hub(partitions=2)
    for pid in created.partition_ids:
        created.send(pid, [b"x"] * 5)
    return created


@pytest.fixture
def setting(hub: Any, azurite_connection_string: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "hub": hub,
        "env": {"EH": hub.connection_string, "ST": azurite_connection_string},
        "service": BlobServiceClient.from_connection_string(azurite_connection_string),
        "tmp": tmp_path,
    }


def _containers(service: BlobServiceClient) -> set[str]:
    return {c.name for c in service.list_containers()}


def test_at_least_25_cases() -> None:
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("changes", "extra_env", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_config_fails_at_load_with_the_exact_message_and_writes_nothing(
    setting: dict[str, Any], changes: dict[str, Any], extra_env: dict[str, str], message: str
) -> None:
    container = f"t-{uuid.uuid4().hex[:20]}"
    sink = setting["tmp"] / "out"
    doc = copy.deepcopy(_base(setting["hub"].name, container, str(sink)))
    for key, value in changes.items():
        _set(doc, key, value)
    path = setting["tmp"] / "ehingest.yaml"
    path.write_text(yaml.safe_dump(doc))
    before = _containers(setting["service"])
    result = CliRunner().invoke(
        main, ["run", "--config", str(path)], env={**setting["env"], **extra_env}
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {message.replace('<sink>', str(sink))}"
    assert "topsecret" not in result.output and "SharedAccessKey=" not in result.stderr
    # Nothing was written: no container (so no ownership, intent or checkpoint blob), no sink.
    assert _containers(setting["service"]) == before
    assert container not in before
    assert not sink.exists()


def test_the_base_document_is_valid(setting: dict[str, Any]) -> None:
    """Each case fails only for its one mistake (the base loads; that such a file then runs and
    writes blobs is tests/integration/test_example_configs.py's end-to-end run of
    docs/example-config.yaml).
    """
    from dagster_eventhub_ingest.cli.config import parse_config

    doc = _base(setting["hub"].name, "t-valid", str(setting["tmp"] / "out"))
    cfg = parse_config(doc, setting["env"])
    assert cfg.ingest.eventhub.eventhub_name == setting["hub"].name


def _alias_bomb(levels: int = 9) -> str:
    """A billion laughs: under 400 bytes that expand to 9**levels values."""
    lines = ['lol0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once_and_writes_nothing(setting: dict[str, Any]) -> None:
    """Nine nested aliases (~400 bytes, 387 million values once expanded) beside a valid
    config: refused in well under a second, before any Azure call; the check walks each
    distinct value once."""
    import time

    container = f"t-{uuid.uuid4().hex[:20]}"
    sink = setting["tmp"] / "out"
    doc = yaml.safe_dump(_base(setting["hub"].name, container, str(sink)))
    bomb = _alias_bomb()
    assert len(bomb) < 1024
    path = setting["tmp"] / "ehingest.yaml"
    path.write_text(doc + bomb)
    before = _containers(setting["service"])
    started = time.monotonic()
    result = CliRunner().invoke(main, ["run", "--config", str(path)], env=setting["env"])
    took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"error: --config {str(path)!r}: its aliases (*name) expand to more than 10,000 "
        "values; a configuration holds a few hundred. Write the values out, or use fewer nested "
        "aliases"
    )
    assert took < 2.0, took
    assert _containers(setting["service"]) == before and not sink.exists()
