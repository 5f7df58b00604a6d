"""The provider as Airflow sees it: registration, the connection form, ``test_connection``,
an existing ``wasb`` connection as the store, ``default_deferrable``, the Azure SDK's log level.

Against Azurite and the project's Event Hubs emulator where a service is asked.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.azure.credentials import parse_connection_string
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.airflow.conftest import ROOT, connection_env

pytestmark = [pytest.mark.airflow]

PACKAGE = "dagster-eventhub-ingest"
CONN_TYPE = "azure_eventhub_ingest"


def _python(code: str, env: dict[str, str] | None = None) -> str:
    """The last line ``code`` prints in a fresh interpreter of this venv."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_airflow_discovers_the_provider_its_hook_and_its_connection_form() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert PACKAGE in manager.providers
    info = manager.providers[PACKAGE].data
    assert info["connection-types"][0]["connection-type"] == CONN_TYPE
    assert manager.hooks[CONN_TYPE].hook_class_name == (
        "dagster_eventhub_ingest.airflow_provider.hooks.EventHubIngestHook"
    )
    widgets = manager.connection_form_widgets
    for field in ("consumer_group", "container", "format", "path", "table"):
        assert f"extra__{CONN_TYPE}__{field}" in widgets, field
    assert manager.field_behaviours[CONN_TYPE]["relabeling"]["password"] == (
        "Connection string (secret)"
    )
    # Every module the provider info names imports, and names what Airflow looks for there.
    import importlib

    for kind in ("hooks", "operators", "sensors", "triggers"):
        for module in info[kind][0]["python-modules"]:
            assert importlib.import_module(module).__all__
    assert "eventhub_ingest" in info["config"]


def test_importing_the_provider_for_discovery_loads_neither_airflow_nor_the_engine() -> None:
    code = (
        "import sys\n"
        "from dagster_eventhub_ingest.airflow_provider.get_provider_info import get_provider_info\n"
        "assert get_provider_info()['package-name'] == 'dagster-eventhub-ingest'\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'pyspark', "
        "'pydantic', 'dagster', 'azure'}))"
    )
    assert _python(code) == "[]"


def test_an_airflow_install_has_no_dagster_and_the_provider_needs_none() -> None:
    """This venv is an Airflow deployment's: the package with its ``airflow`` extra, no Dagster.
    The provider, its example DAG and the engine they run import without it."""
    import importlib.util

    assert importlib.util.find_spec("dagster") is None, "the Airflow tier's venv has Dagster"
    code = (
        "import sys\n"
        "import dagster_eventhub_ingest.airflow_provider.example_dags.eventhub_ingest\n"
        "import dagster_eventhub_ingest.airflow_provider.hooks, "
        "dagster_eventhub_ingest.airflow_provider.triggers\n"
        "import dagster_eventhub_ingest.ops.run.entry, "
        "dagster_eventhub_ingest.resources.eventhubs_source\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0].startswith('dagster')"
        " and not m.startswith('dagster_eventhub_ingest')))"
    )
    assert _python(code) == "[]"


def test_parsing_the_example_dag_imports_no_sdk_and_no_spark() -> None:
    """Airflow parses DAG files again and again (the DAG processor, every task's process): the
    operator and sensor modules load neither the Azure SDKs nor PySpark nor pyarrow until a
    task runs."""
    code = (
        "import sys\n"
        "import dagster_eventhub_ingest.airflow_provider.example_dags.eventhub_ingest\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'azure', 'pyspark', "
        "'pyarrow', 'py4j', 'aiohttp', 'uamqp'}))"
    )
    assert _python(code) == "[]"


@pytest.mark.parametrize(("setting", "expected"), [(None, False), ("True", True), ("False", False)])
def test_the_sensor_defers_by_airflows_default_deferrable(
    setting: str | None, expected: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"}
    if setting is not None:
        env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = setting
    code = (
        "from dagster_eventhub_ingest.airflow_provider import EventHubLagSensor\n"
        "print(EventHubLagSensor(task_id='t', min_lag_events=1).deferrable, "
        "EventHubLagSensor(task_id='u', min_lag_events=1, deferrable=True).deferrable)"
    )
    assert _python(code, env).split() == [str(expected), "True"]


def _azure_records(records: list[logging.LogRecord]) -> list[str]:
    return [r.name for r in records if r.name.startswith("azure.")]


@pytest.mark.integration
@pytest.mark.parametrize("level", [None, "INFO", "loud"])
def test_azure_sdk_logs_stay_at_warning_unless_the_setting_raises_them(
    level: str | None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
) -> None:
    """One idle lag poll (what the sensor does every poke) logs nothing from the Azure SDK at
    the default level; ``[eventhub_ingest] azure_log_level = INFO`` brings its lines back."""
    from dagster_eventhub_ingest.airflow_provider._lag import lag_per_partition
    from dagster_eventhub_ingest.airflow_provider.hooks import AZURE_LOGGERS, EventHubIngestHook

    env = "AIRFLOW__EVENTHUB_INGEST__AZURE_LOG_LEVEL"
    if level is None:
        monkeypatch.delenv(env, raising=False)
    else:
        monkeypatch.setenv(env, level)
    for name in AZURE_LOGGERS:  # whatever an earlier test left
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    hub = make_eventhub(partitions=2)
    caplog.set_level(logging.INFO)
    EventHubIngestHook()
    expected = logging.INFO if level == "INFO" else logging.WARNING
    assert [logging.getLogger(n).level for n in AZURE_LOGGERS] == [expected] * len(AZURE_LOGGERS)
    if level == "loud":
        assert "azure_log_level = 'loud' is not a log level" in caplog.text
    caplog.clear()
    assert lag_per_partition(hub.settings(), blob_store_settings) == {"0": 0, "1": 0}
    logged = _azure_records(caplog.records)
    if level == "INFO":
        assert len(logged) > 10, logged  # every request and response, every link
    else:
        assert logged == []


@pytest.mark.integration
def test_test_connection_asks_each_service_and_never_shows_a_secret(
    airflow_db: str,
    monkeypatch: pytest.MonkeyPatch,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
    tmp_path: Any,
) -> None:
    """The UI's Test button and ``airflow connections test``: Airflow finds the hook by the
    connection type and calls its ``test_connection``."""
    from airflow.models.connection import Connection

    hub = make_eventhub(partitions=3)
    conns = {
        "t_eh": {"conn_type": CONN_TYPE, "password": hub.connection_string, "schema": hub.name},
        "t_eh_bad": {
            "conn_type": CONN_TYPE,
            "password": hub.connection_string,
            "schema": "no-such-hub",
        },
        "t_store": {
            "conn_type": CONN_TYPE,
            "password": blob_store_settings.connection_string,
            "extra": {"container": blob_store_settings.container},
        },
        "t_store_missing": {
            "conn_type": CONN_TYPE,
            "password": blob_store_settings.connection_string,
            "extra": {"container": f"missing-{uuid.uuid4().hex[:8]}", "create_container": False},
        },
        "t_sink": {"conn_type": CONN_TYPE, "extra": {"path": str(tmp_path), "format": ""}},
        "t_sink_bad": {"conn_type": CONN_TYPE, "extra": {"path": "/p", "format": "parqet"}},
    }
    for conn_id, fields in conns.items():
        monkeypatch.setenv(*connection_env(conn_id, **fields))

    def test(conn_id: str) -> tuple[bool, str]:
        result: tuple[bool, str] = Connection.get_connection_from_secrets(conn_id).test_connection()
        return result

    ok, message = test("t_eh")
    assert ok and f"Event Hub {hub.name!r} answered: 3 partitions" in message, message
    ok, message = test("t_store")
    assert ok and "does not exist yet (the first run creates it)" in message, message
    AzureBlobBackend.from_settings(blob_store_settings).close()  # creates it
    ok, message = test("t_store")
    assert ok and f"container {blob_store_settings.container!r} exists" in message, message
    ok, message = test("t_sink")
    assert ok and f"sink settings are valid: parquet at path {str(tmp_path)!r}" in message
    ok, message = test("t_store_missing")
    assert not ok and "does not exist yet and create_container is false" in message, message
    ok, message = test("t_sink_bad")
    assert not ok and "extra.format: 'parqet' is not a known format" in message, message
    ok, message = test("t_eh_bad")
    assert not ok, message
    key = parse_connection_string(hub.connection_string, "x")["SharedAccessKey"]
    store_key = parse_connection_string(blob_store_settings.connection_string or "", "x")
    for _, text in (test(c) for c in conns):
        assert key not in text and store_key.get("AccountKey", "-") not in text


def _azurite(settings: StoreSettings) -> dict[str, str]:
    return parse_connection_string(settings.connection_string or "", "store")


def _wasb_cases(settings: StoreSettings) -> dict[str, dict[str, Any]]:
    """The ways a ``wasb`` connection of the Azure provider reaches Azurite."""
    from datetime import datetime, timedelta, timezone

    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    parts = _azurite(settings)
    endpoint = parts["BlobEndpoint"]
    sas = generate_account_sas(
        parts["AccountName"],
        parts["AccountKey"],
        ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=datetime.now(timezone.utc) + timedelta(hours=1),
    )
    return {
        "connection_string": {"extra": {"connection_string": settings.connection_string}},
        "account_key": {
            "login": parts["AccountName"],
            "password": parts["AccountKey"],
            "host": endpoint,
        },
        "shared_access_key": {
            "login": parts["AccountName"],
            "host": endpoint,
            "extra": {"shared_access_key": parts["AccountKey"]},
        },
        "sas_token": {"host": endpoint, "extra": {"sas_token": sas}},
    }


@pytest.mark.integration
@pytest.mark.parametrize(
    "case", ["connection_string", "account_key", "shared_access_key", "sas_token"]
)
def test_an_existing_wasb_connection_serves_as_the_store(
    case: str, monkeypatch: pytest.MonkeyPatch, blob_store_settings: StoreSettings
) -> None:
    """What the store writes through a ``wasb`` connection is what ``WasbHook`` sees there."""
    from airflow.providers.microsoft.azure.hooks.wasb import WasbHook

    from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook
    from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
    from dagster_eventhub_ingest.resources.store.records import HubRef

    fields = {"conn_type": "wasb", **_wasb_cases(blob_store_settings)[case]}
    monkeypatch.setenv(*connection_env("my_wasb", **fields))
    container = f"wasb-{case.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    settings = EventHubIngestHook(
        store_conn_id="my_wasb", store_container=container
    ).get_store_settings()
    assert settings.container == container
    hub = HubRef("ns.servicebus.windows.net", "telemetry", "$Default")
    store = PartitionStore(AzureBlobBackend.from_settings(settings), hub)
    own = store.claim("0", "owner-a", None)
    assert own is not None
    store.checkpoint(own, 41, None)

    assert WasbHook(wasb_conn_id="my_wasb").check_for_blob(
        container, f"{hub.prefix('checkpoint')}0"
    )
    assert store.list_sdk_checkpoints()["0"].sequence_number == 41


def test_wasb_connections_the_store_cannot_use_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook

    def settings(container: str | None = "leases", **fields: Any) -> StoreSettings:
        monkeypatch.setenv(*connection_env("w", conn_type="wasb", **fields))
        return EventHubIngestHook(store_conn_id="w", store_container=container).get_store_settings()

    with pytest.raises(ConfigurationError, match=r"has no container field; give the task's "):
        settings(None, login="acct", password="a2V5")
    with pytest.raises(ConfigurationError, match=r"a service principal \(tenant_id"):
        settings(login="app-id", password="S3CRET", extra={"tenant_id": "t"})
    with pytest.raises(ConfigurationError, match=r"no storage account; set login"):
        settings(extra={"sas_token": "sv=2024&sig=S3CRET"})
    # A SAS URL (WasbHook takes an https one whole).
    sas_url = settings(extra={"sas_token": "https://acct.blob.core.windows.net/?sv=1&sig=x"})
    assert sas_url.connection_string == (
        "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=1&sig=x"
    )
    # Neither a secret nor a tenant: DefaultAzureCredential with the connection's identity.
    identity = settings(login="acct", extra={"managed_identity_client_id": "cid"})
    assert (identity.credential_type, identity.account_url, identity.credential_options) == (
        "default_azure_credential",
        "https://acct.blob.core.windows.net",
        (("managed_identity_client_id", "cid"),),
    )
    from dagster_eventhub_ingest.resources.store.azure_blob import container_client

    with pytest.raises(ConfigurationError, match="AccountKey is not valid base64") as err:
        container_client(settings(login="acct", password="not base64 S3CRET"))
    assert "S3CRET" not in str(err.value)


def test_the_store_container_of_the_task_and_of_the_connection_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook

    monkeypatch.setenv(
        *connection_env(
            "st",
            conn_type=CONN_TYPE,
            password="AccountName=a;AccountKey=a2V5",
            extra={"container": "leases", "consumer_group": "", "path": None},
        )
    )
    assert EventHubIngestHook(store_conn_id="st").get_store_settings().container == "leases"
    same = EventHubIngestHook(store_conn_id="st", store_container="leases")
    assert same.get_store_settings().container == "leases"
    with pytest.raises(ConfigurationError, match=r"extra\.container='leases' but the task's "):
        EventHubIngestHook(store_conn_id="st", store_container="other").get_store_settings()
