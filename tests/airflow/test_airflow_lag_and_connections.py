"""The lag trigger with the async SDK clients (Azurite + the emulator), and connection parsing.

No Spark here: checkpoints are moved through the store's own API, as a run would move them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.errors import ConfigurationError, RangeError
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.airflow.conftest import connection_env

pytestmark = [pytest.mark.airflow]


class Conn:
    """An Airflow-connection-shaped value for the pure parsing functions."""

    def __init__(
        self,
        conn_id: str = "c",
        *,
        password: str | None = None,
        schema: str | None = None,
        host: str | None = None,
        extra: dict[str, Any] | None = None,
        conn_type: str = "azure_eventhub_ingest",
        login: str | None = None,
    ) -> None:
        self.conn_id, self.password, self.schema, self.host = conn_id, password, schema, host
        self.conn_type, self.login = conn_type, login
        self.extra_dejson = extra or {}


EH = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey=S3CRET"


def test_eventhub_connection_fields() -> None:
    from dagster_eventhub_ingest.airflow_provider._connections import eventhub_settings

    s = eventhub_settings(Conn(password=EH, schema="telemetry", extra={"consumer_group": "cg"}))
    assert (s.eventhub_name, s.consumer_group, s.namespace) == (
        "telemetry",
        "cg",
        "ns.servicebus.windows.net",
    )
    # The hub may come from the connection string's EntityPath, as with the Azure SDK.
    s = eventhub_settings(Conn(password=EH + ";EntityPath=orders"))
    assert s.eventhub_name == "orders"
    s = eventhub_settings(
        Conn(
            host="ns.servicebus.windows.net",
            schema="t",
            extra={"credential": "default_azure_credential"},
        )
    )
    assert s.credential_type == "default_azure_credential"
    # DefaultAzureCredential's options as in YAML (resources/config/ IdentityOptions).
    s = eventhub_settings(
        Conn(
            host="ns.servicebus.windows.net",
            schema="t",
            extra={"credential": {"managed_identity_client_id": "cid", "tenant_id": "tn"}},
        )
    )
    assert (s.credential_type, s.fully_qualified_namespace) == (
        "default_azure_credential",
        "ns.servicebus.windows.net",
    )
    assert s.credential_options == (("managed_identity_client_id", "cid"), ("tenant_id", "tn"))


@pytest.mark.parametrize(
    ("conn", "message"),
    [
        (Conn("eh", password=EH), "Airflow connection 'eh' (Event Hubs): no Event Hub name"),
        (
            Conn("eh", schema="t", extra={"eventhub_name": "t", "connection_string": EH}),
            "extra.connection_string is not a known key",
        ),
        (
            Conn("eh", schema="t", extra={"consumer_group": EH}),
            "extra.consumer_group holds a secret; put the connection string in the connection's "
            "password field",
        ),
        (
            Conn(
                "eh",
                schema="t",
                password="Endpoint=127.0.0.1;SharedAccessKeyName=a;SharedAccessKey=S3CRET",
            ),
            "Airflow connection 'eh' (Event Hubs): connection_string: Invalid Endpoint",
        ),
        (
            # No hub named: EntityPath is read by the SDK's parser, as EventHubSettings reads it.
            Conn("eh", password="Endpoint=sb://ns/;SharedAccessKeyName=a;SharedAcessKey=S3CRET"),
            "Airflow connection 'eh' (Event Hubs): connection_string: Invalid connection string",
        ),
        (
            Conn(
                "eh",
                schema="t",
                password=EH,
                extra={"credential": "default_azure_credential"},
            ),
            "Airflow connection 'eh' (Event Hubs): give either a connection string (password) "
            "or extra.credential with a namespace (host), not both",
        ),
        (
            Conn("eh", schema="t", extra={"credential": "managed"}),
            "extra.credential='managed' is not valid; valid: default_azure_credential",
        ),
        (
            Conn(
                "eh",
                schema="t",
                host="ns.servicebus.windows.net",
                extra={"credential": {"managed_identity_clientid": "x"}},
            ),
            "Airflow connection 'eh' (Event Hubs): extra.credential.managed_identity_clientid: "
            "unknown key; did you mean 'managed_identity_client_id'?",
        ),
        (
            Conn("eh", schema="t", extra={"credential": "default_azure_credential"}),
            "Airflow connection 'eh' (Event Hubs): extra.credential.fully_qualified_namespace: "
            "required",
        ),
    ],
)
def test_bad_eventhub_connection_names_the_field_never_the_secret(conn: Conn, message: str) -> None:
    from dagster_eventhub_ingest.airflow_provider._connections import eventhub_settings

    with pytest.raises(ConfigurationError) as err:
        eventhub_settings(conn)
    assert message in str(err.value)
    assert "S3CRET" not in str(err.value)


def test_store_connection_credentials_are_read_as_the_event_hubs_ones() -> None:
    from dagster_eventhub_ingest.airflow_provider._connections import store_settings

    url = "https://acct.blob.core.windows.net"
    s = store_settings(
        Conn(
            host=url,
            extra={"container": "leases", "credential": {"managed_identity_client_id": "cid"}},
        )
    )
    assert (s.credential_type, s.account_url, s.connection_string) == (
        "default_azure_credential",
        url,
        None,
    )
    assert s.credential_options == (("managed_identity_client_id", "cid"),)
    s = store_settings(
        Conn(
            extra={
                "container": "leases",
                "account_url": url,
                "credential": "default_azure_credential",
            }
        )
    )
    assert (s.credential_type, s.account_url) == ("default_azure_credential", url)
    with pytest.raises(ConfigurationError) as err:
        store_settings(
            Conn(
                "st",
                password="AccountName=a;AccountKey=S3CRET",
                extra={"container": "leases", "credential": "default_azure_credential"},
            )
        )
    assert str(err.value) == (
        "Airflow connection 'st' (storage): give either a connection string (password) or "
        "extra.credential with an account URL (host), not both"
    )
    with pytest.raises(ConfigurationError) as err:
        store_settings(Conn("st", extra={"container": "leases", "credential": {"tenant": "x"}}))
    assert str(err.value).startswith(
        "Airflow connection 'st' (storage): extra.credential.tenant: unknown key; did you mean "
        "'tenant_id'?"
    )


def test_store_sink_and_options() -> None:
    from dagster_eventhub_ingest.airflow_provider._connections import (
        ingest_settings,
        sink_settings,
        store_settings,
    )

    with pytest.raises(ConfigurationError, match=r"'st' \(storage\): extra.container is required"):
        store_settings(Conn("st", password="AccountName=a;AccountKey=k"))
    store = store_settings(
        Conn("st", password="AccountName=a;AccountKey=k", extra={"container": "leases"})
    )
    with pytest.raises(ConfigurationError, match="give exactly one of path or table"):
        sink_settings(Conn("sk", extra={"path": "/p", "table": "t"}))
    sink = sink_settings(
        Conn("sk", extra={"format": "deltalake", "path": "/p", "partition_by": "partition"})
    )
    assert sink.partition_by == ("partition",) and sink.sources == "one"
    # Every key of the CLI's sink block is a sink extra, sources included.
    assert sink_settings(Conn("sk", extra={"path": "/p", "sources": "many"})).sources == "many"
    from dagster_eventhub_ingest.airflow_provider._connections import eventhub_settings

    hub = eventhub_settings(Conn(password=EH, schema="t"))
    config = ingest_settings(
        hub, store, sink, {"strategy": "jump_hash", "max_events_per_partition": 7}
    )
    assert (config.strategy, config.max_events_per_partition) == ("jump_hash", 7)
    # The run options, the sink and extra.spark are the CLI's models (resources/config/).
    with pytest.raises(
        ConfigurationError,
        match=r"^options\.max_events: unknown key; did you mean 'max_events_per_cycle'\? "
        r"valid keys: strategy, strategy_options, max_events_per_partition,",
    ):
        ingest_settings(hub, store, sink, {"max_events": 7})
    with pytest.raises(
        ConfigurationError,
        match=r"^Airflow connection 'sk' \(sink\): extra\.format: 'parqet' is not a known "
        r"format; did you mean 'parquet'\?",
    ):
        sink_settings(Conn("sk", extra={"path": "/p", "format": "parqet"}))
    with pytest.raises(
        ConfigurationError,
        match=r"^Airflow connection 'sk' \(sink\): extra\.spark\.mastr: unknown key; did you "
        r"mean 'master'\? valid keys: master, remote, app_name, conf, ship_code$",
    ):
        sink_settings(Conn("sk", extra={"path": "/p", "spark": {"mastr": "local[2]"}}))
    with pytest.raises(ConfigurationError, match=r"options\.strategy: 'fastest' is not valid"):
        ingest_settings(hub, store, sink, {"strategy": "fastest"})
    with pytest.raises(ConfigurationError, match=r"options\.max_events_per_partition: 0 must be"):
        ingest_settings(hub, store, sink, {"max_events_per_partition": 0})


def test_owner_ids_of_tries() -> None:
    from dagster_eventhub_ingest.airflow_provider.operators import earlier_try_is_dead, owner_id_for

    key = ("dag", "scheduled__2026-01-01T00:05:00+00:00", "ingest", 3)
    try1, try2 = owner_id_for(*key, 1), owner_id_for(*key, 2)
    assert try1 != try2 and try1.endswith("-try1") and "/" not in try1
    is_dead = earlier_try_is_dead(*key, 2)
    assert is_dead(try1) and not is_dead(try2)
    assert not is_dead(owner_id_for("dag", key[1], "ingest", 4, 1))  # a mapped peer is alive
    assert not is_dead(owner_id_for("dag", "other-run", "ingest", 3, 1))


def _set_connections(monkeypatch: pytest.MonkeyPatch, hub: Any, store: StoreSettings) -> None:
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
            password=store.connection_string,
            extra={"container": store.container},
        )
    )


async def _first_event(trigger: Any, timeout: float) -> Any:
    return await asyncio.wait_for(anext(trigger.run()), timeout)


@pytest.mark.integration
def test_lag_trigger_waits_until_caught_up_with_async_clients(
    airflow_db: str,
    monkeypatch: pytest.MonkeyPatch,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
) -> None:
    from dagster_eventhub_ingest.airflow_provider._lag import alag_per_partition, lag_per_partition
    from dagster_eventhub_ingest.airflow_provider.triggers import EventHubLagTrigger

    hub = make_eventhub(partitions=3)
    _set_connections(monkeypatch, hub, blob_store_settings)
    for pid in hub.partition_ids:
        hub.send(pid, [f"e{i}" for i in range(10)])
    hub.send("1", ["extra"])

    # There is work: fires at once with the lag of every partition (no container yet).
    work = EventHubLagTrigger(min_lag_events=11, poll_interval=0.2)
    event = asyncio.run(_first_event(work, 30))
    assert event.payload == {"status": "success", "lag": {"0": 10, "1": 11, "2": 10}}

    # Caught up: nothing is checkpointed, so it keeps polling...
    caught_up = EventHubLagTrigger(max_lag_events=0, poll_interval=0.2, partition_ids=["0", "1"])
    classpath, kwargs = caught_up.serialize()
    assert classpath == "dagster_eventhub_ingest.airflow_provider.triggers.EventHubLagTrigger"
    assert "SharedAccessKey" not in json.dumps(kwargs)  # the trigger row holds conn ids only

    store = PartitionStore(
        AzureBlobBackend.from_settings(blob_store_settings), hub.settings().hub_ref()
    )

    async def scenario() -> Any:
        task = asyncio.ensure_future(_first_event(EventHubLagTrigger(**kwargs), 60))
        await asyncio.sleep(2.0)
        assert not task.done(), "fired although nothing was checkpointed"
        # ...until a run checkpoints both partitions (lease, then fenced checkpoint).
        for pid, last in (("0", 9), ("1", 10)):
            own = await asyncio.to_thread(store.claim, pid, "owner-a", None)
            assert own is not None
            await asyncio.to_thread(store.checkpoint, own, last, None)
        return await task

    event = asyncio.run(scenario())
    assert event.payload == {"status": "success", "lag": {"0": 0, "1": 0}}
    # The async path and the sync path (sensor in poke mode) read the same lag.
    lag_async = asyncio.run(alag_per_partition(hub.settings(), blob_store_settings))
    assert (
        lag_async
        == lag_per_partition(hub.settings(), blob_store_settings)
        == {"0": 0, "1": 0, "2": 10}
    )


@pytest.mark.integration
def test_the_deferrable_sensor_looks_first_and_defers_only_to_wait(
    airflow_db: str,
    monkeypatch: pytest.MonkeyPatch,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
) -> None:
    """A hub that already has work ends the sensor in its slot, no trigger; one without work
    defers to the lag trigger with the sensor's thresholds; a broken setup fails at once."""
    from airflow.sdk.exceptions import TaskDeferred

    from dagster_eventhub_ingest.airflow_provider import EventHubLagSensor, EventHubLagTrigger

    hub = make_eventhub(partitions=2)
    _set_connections(monkeypatch, hub, blob_store_settings)
    hub.send("1", ["a", "b"])

    has_work = EventHubLagSensor(task_id="has_work", min_lag_events=1, deferrable=True)
    assert has_work.execute({}) == {"0": 0, "1": 2}

    more = EventHubLagSensor(
        task_id="more", min_lag_events=3, deferrable=True, poke_interval=7, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        more.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, EventHubLagTrigger)
    assert (trigger.min_lag_events, trigger.poll_interval) == (3, 7.0)
    assert deferred.value.method_name == "execute_complete"

    unknown = EventHubLagSensor(
        task_id="unknown", min_lag_events=1, deferrable=True, partition_ids=["7"]
    )
    with pytest.raises(RangeError, match="partition\\(s\\) 7 do not exist"):
        unknown.execute({})


@pytest.mark.integration
def test_lag_trigger_reports_a_bad_setup_as_an_error_event(
    airflow_db: str,
    monkeypatch: pytest.MonkeyPatch,
    make_eventhub: Callable[..., Any],
    blob_store_settings: StoreSettings,
) -> None:
    from dagster_eventhub_ingest.airflow_provider.triggers import EventHubLagTrigger

    hub = make_eventhub(partitions=2)
    _set_connections(monkeypatch, hub, blob_store_settings)
    event = asyncio.run(_first_event(EventHubLagTrigger(min_lag_events=1, partition_ids=["7"]), 30))
    assert event.payload["status"] == "error" and event.payload["kind"] == "configuration"
    assert "partition(s) 7 do not exist in hub" in event.payload["message"]

    missing = EventHubLagTrigger(min_lag_events=1, eventhub_conn_id="no_such_conn")
    event = asyncio.run(_first_event(missing, 30))
    assert event.payload["kind"] == "configuration"
    assert (
        "Airflow connection 'no_such_conn' (Event Hubs) is not defined" in event.payload["message"]
    )
    assert "AIRFLOW_CONN_NO_SUCH_CONN" in event.payload["message"]


@pytest.mark.integration
def test_the_async_store_client_retries_throttling_as_the_sync_one(
    blob_store_settings: StoreSettings, azurite_connection_string: str
) -> None:
    """The triggerer's listing (azure.storage.blob.aio) through the HTTP fault proxy: 503s and
    429s with Retry-After are retried, and a wait past the budget is refused, counted."""
    import re
    import time

    from dagster_eventhub_ingest.resources.errors import StoreUnavailableError
    from dagster_eventhub_ingest.resources.store.azure_blob import alist_blobs
    from dagster_eventhub_ingest.resources.store.records import HubRef
    from tests.support.faultproxy import HttpFaultProxy

    hub = HubRef("ns.example", "hub", "$Default")
    store = PartitionStore(AzureBlobBackend.from_settings(blob_store_settings), hub)
    assert store.claim("0", "me", None) is not None
    match = re.search(r"BlobEndpoint=http://127\.0\.0\.1:(\d+)/", azurite_connection_string)
    assert match is not None
    upstream = int(match.group(1))
    with HttpFaultProxy(("127.0.0.1", upstream)) as proxy:
        settings = StoreSettings(
            container=blob_store_settings.container,
            connection_string=azurite_connection_string.replace(f":{upstream}/", f":{proxy.port}/"),
        )
        proxy.throttle_next(1, 503, retry_after=None)
        proxy.throttle_next(1, 429, retry_after=1)
        started = time.monotonic()
        records = asyncio.run(alist_blobs(settings, hub.prefix("ownership")))
        assert [r.name.rsplit("/", 1)[-1] for r in records] == ["0"]
        assert [r.status for r in proxy.log] == [503, 429, None]
        assert time.monotonic() - started >= 1.0  # the Retry-After was waited for
        proxy.throttle_next(1, 429, retry_after=60)
        with pytest.raises(StoreUnavailableError) as err:
            asyncio.run(alist_blobs(settings, hub.prefix("ownership")))
        assert "without a retry (the next wait, 60.0 s, would pass" in str(err.value)
