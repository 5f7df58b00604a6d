"""The project's stand-in for azure-eventhub's ``tests/conftest.py``: runs the SDK's own live tests
(``tests/livetest/synctests`` and ``asynctests``, unmodified) against ``ehingest emulator serve``.

``scripts/sdk_conformance.sh`` starts the emulator and sets (all required):

* ``CONFORMANCE_HOST`` ``127.0.0.1:<port>`` -- the namespace the tests use (plain AMQP);
* ``CONFORMANCE_WS_PORT`` -- the emulator's AMQP-over-WebSockets port;
* ``CONFORMANCE_HUBS`` ``<prefix>:<count>`` -- hubs of 2 partitions the emulator serves; each
  test takes a fresh one (sync and async runs use different prefixes, pytest-xdist workers
  different slices);
* ``CONFORMANCE_KEY_NAME`` / ``CONFORMANCE_KEY`` -- the emulator's shared access key;
* ``CONFORMANCE_JWT_SECRET`` -- its Entra ID test-mode secret (``get_credential`` issues JWTs
  signed with it through :class:`dagster_eventhub_ingest.emulator.auth.TestTokenCredential`).

Fixture names and shapes are upstream's. ``client_args`` is where upstream puts its AMQP proxy's
endpoint; here it carries ``use_tls=False`` (the emulator's plain-AMQP mode, what
``UseDevelopmentEmulator=true`` does) and, for the tests that choose AmqpOverWebsocket, the
WebSocket endpoint. Tests that build clients without ``client_args`` dial the namespace's
public endpoint (port 5671/443, TLS verified against certifi's public CAs): those are skipped
with that reason (see ``NEEDS_PUBLIC_TLS``). Everything else that upstream skips is skipped the
same way (no storage account, no fault injector, no ARM).
"""

from __future__ import annotations

import inspect
import itertools
import os
import threading
import warnings
from functools import partial
from typing import Any

import pytest
from azure.eventhub import EventHubProducerClient, TransportType
from azure.eventhub._pyamqp import ReceiveClient
from azure.eventhub._pyamqp.authentication import SASTokenAuth

from dagster_eventhub_ingest.emulator.auth import AsyncTestTokenCredential, TestTokenCredential

PARTITION_COUNT = 2
CONN_STR = "Endpoint=sb://{}/;SharedAccessKeyName={};SharedAccessKey={};EntityPath={}"

_PUBLIC_TLS = (
    "needs the namespace's public TLS endpoint: builds clients without client_args, so they dial "
    "<namespace>:5671/443 and verify the server against certifi's public CA bundle (or check "
    "ssl_context/connection_verify errors that only happen there); a local emulator has no "
    "certificate trusted by public CAs"
)
NEEDS_PUBLIC_TLS = {
    "test_client_with_ssl_context": _PUBLIC_TLS,
    "test_client_with_ssl_context_async": _PUBLIC_TLS,
    "test_send_with_long_interval_sync": _PUBLIC_TLS + " (its ReceiveClient)",
    "test_send_with_long_interval_async": _PUBLIC_TLS + " (its ReceiveClientAsync)",
    "test_client_invalid_credential": _PUBLIC_TLS + " (its connection_verify='cacert.pem' part)",
    "test_client_invalid_credential_async": _PUBLIC_TLS
    + " (its connection_verify='cacert.pem' part)",
    "test_send_connection_idle_timeout_and_reconnect_async": _PUBLIC_TLS
    + " (its second client, 'with retry, should work')",
}
# Same names in asynctests pass client_args properly and run.
NEEDS_PUBLIC_TLS_SYNC_ONLY = {
    "test_get_partition_properties": _PUBLIC_TLS
    + " (passes client_args=client_args, not **client_args)",
    "test_send_amqp_annotated_message": _PUBLIC_TLS + " (its EventHubConsumerClient)",
}


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise pytest.UsageError(
            f"{name} is not set: run these tests through scripts/sdk_conformance.sh, which "
            "starts the emulator and sets CONFORMANCE_*"
        )
    return value


HOST = _env("CONFORMANCE_HOST")
WS_PORT = int(_env("CONFORMANCE_WS_PORT"))
_PREFIX, _, _COUNT = _env("CONFORMANCE_HUBS").partition(":")
KEY_NAME = _env("CONFORMANCE_KEY_NAME")
KEY = _env("CONFORMANCE_KEY")
JWT_SECRET = _env("CONFORMANCE_JWT_SECRET")
_hub_numbers = itertools.count()
_hub_lock = threading.Lock()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sleep", action="store", default="True", help="sleep on reconnect test: True or False"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "liveTest: mark test to be a live test only")
    config.addinivalue_line("markers", "no_amqpproxy: mark test to opt out of amqp proxy recording")


# Tests that sleep minutes whatever --sleep says: started first, so they overlap the rest.
START_FIRST = {"test_long_sleep"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        reason = NEEDS_PUBLIC_TLS.get(name)
        if reason is None and item.path.parent.name == "synctests":
            reason = NEEDS_PUBLIC_TLS_SYNC_ONLY.get(name)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=lambda item: getattr(item, "originalname", item.name) not in START_FIRST)


@pytest.fixture
def sleep(request: pytest.FixtureRequest) -> bool:
    return str(request.config.getoption("--sleep")).lower() in ("true", "yes", "1", "y")


@pytest.fixture(scope="session", params=[False], ids=["pyamqp"])
def uamqp_transport(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)  # uamqp is not installed: pure-Python AMQP only, as upstream


@pytest.fixture(
    scope="session",
    params=[TransportType.Amqp, TransportType.AmqpOverWebsocket],
    ids=["amqp", "ws"],
)
def socket_transport(request: pytest.FixtureRequest) -> TransportType:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def timeout_factor(uamqp_transport: bool) -> int:
    return 1000 if uamqp_transport else 1


# -- what upstream skips without Azure resources ---------------------------------------------------


@pytest.fixture(scope="session")
def storage_url() -> str:
    warnings.warn(UserWarning("AZURE_STORAGE_ACCOUNT undefined"), stacklevel=1)
    pytest.skip("AZURE_STORAGE_ACCOUNT undefined (upstream's skip: needs an Azure storage account)")


@pytest.fixture
def checkpoint_store(storage_url: str) -> Any:
    raise AssertionError("unreachable: storage_url skips")


@pytest.fixture
def checkpoint_store_aio(storage_url: str) -> Any:
    raise AssertionError("unreachable: storage_url skips")


@pytest.fixture
def resource_mgmt_client() -> Any:
    pytest.skip("AZURE_SUBSCRIPTION_ID undefined (upstream's skip: needs Azure Resource Manager)")


@pytest.fixture
def faultinjector() -> Any:
    pytest.skip("Fault injector not enabled (upstream's skip: USE_FAULTINJECTOR is not 'true')")


# -- the hub under test ---------------------------------------------------------------------------


@pytest.fixture
def live_eventhub() -> dict[str, str]:
    """A fresh hub of 2 partitions on the emulator, in upstream's dictionary shape."""
    # pytest-xdist workers share the pool: worker k takes its own slice of it.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
    per_worker = int(_COUNT) // workers
    with _hub_lock:
        number = next(_hub_numbers)
    if number >= per_worker:
        raise RuntimeError(
            f"the emulator serves {_COUNT} hubs '{_PREFIX}N' for {workers} workers and this "
            "worker used its share: raise POOL in scripts/sdk_conformance.sh"
        )
    name = f"{_PREFIX}{worker * per_worker + number}"
    return {
        "resource_group": "emulator",
        "hostname": HOST,
        "key_name": KEY_NAME,
        "access_key": KEY,
        "namespace": HOST.split(":")[0],
        "event_hub": name,
        "consumer_group": "$Default",
        "partition": "0",
        "connection_str": CONN_STR.format(HOST, KEY_NAME, KEY, name),
    }


@pytest.fixture
def connection_str(live_eventhub: dict[str, str]) -> str:
    return CONN_STR.format(
        live_eventhub["hostname"],
        live_eventhub["key_name"],
        live_eventhub["access_key"],
        live_eventhub["event_hub"],
    )


@pytest.fixture
def invalid_hostname(live_eventhub: dict[str, str]) -> str:
    return CONN_STR.format(
        "invalid123.servicebus.windows.net",
        live_eventhub["key_name"],
        live_eventhub["access_key"],
        live_eventhub["event_hub"],
    )


@pytest.fixture
def invalid_key(live_eventhub: dict[str, str]) -> str:
    return CONN_STR.format(
        live_eventhub["hostname"], live_eventhub["key_name"], "invalid", live_eventhub["event_hub"]
    )


@pytest.fixture
def invalid_policy(live_eventhub: dict[str, str]) -> str:
    return CONN_STR.format(
        live_eventhub["hostname"],
        "invalid",
        live_eventhub["access_key"],
        live_eventhub["event_hub"],
    )


@pytest.fixture
def skip_amqp_proxy() -> bool:
    return True  # no recording proxy here


@pytest.fixture
def client_args(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Plain AMQP to the emulator; the WebSocket endpoint for tests that pick WebSockets."""
    args: dict[str, Any] = {"use_tls": False}
    source = inspect.getsource(request.function)
    if "custom_endpoint_address" in source:
        return args  # the test sets its own (and would get it twice)
    if "AmqpOverWebsocket" in source:
        args["custom_endpoint_address"] = f"sb://127.0.0.1:{WS_PORT}"
    return args


@pytest.fixture(scope="session")
def get_credential() -> Any:
    return lambda *a, **k: TestTokenCredential(JWT_SECRET)


@pytest.fixture(scope="session")
def get_credential_async() -> Any:
    return lambda *a, **k: AsyncTestTokenCredential(JWT_SECRET)


@pytest.fixture
def auth_credentials(live_eventhub: dict[str, str], get_credential: Any) -> Any:
    return live_eventhub["hostname"], live_eventhub["event_hub"], get_credential


@pytest.fixture
def auth_credentials_async(live_eventhub: dict[str, str], get_credential_async: Any) -> Any:
    return live_eventhub["hostname"], live_eventhub["event_hub"], get_credential_async


def _receivers(live_eventhub: dict[str, str], timeout: int) -> list[Any]:
    receivers = []
    for p in range(PARTITION_COUNT):
        uri = "sb://{}/{}".format(live_eventhub["hostname"], live_eventhub["event_hub"])
        source = "amqps://{}/{}/ConsumerGroups/{}/Partitions/{}".format(
            live_eventhub["hostname"],
            live_eventhub["event_hub"],
            live_eventhub["consumer_group"],
            p,
        )
        auth = SASTokenAuth(uri, uri, live_eventhub["key_name"], live_eventhub["access_key"])
        receiver = ReceiveClient(
            live_eventhub["hostname"],
            source,
            auth=auth,
            network_trace=False,
            timeout=timeout,
            link_credit=500,
            use_tls=False,
        )
        receiver.open()
        receivers.append(receiver)
    return receivers


@pytest.fixture
def connstr_receivers(live_eventhub: dict[str, str]) -> Any:
    receivers = _receivers(live_eventhub, 0)
    yield live_eventhub["connection_str"], receivers
    for r in receivers:
        r.close()


@pytest.fixture
def auth_credential_receivers(live_eventhub: dict[str, str], get_credential: Any) -> Any:
    receivers = _receivers(live_eventhub, 30)
    yield live_eventhub["hostname"], live_eventhub["event_hub"], get_credential, receivers
    for r in receivers:
        r.close()


@pytest.fixture
def auth_credential_receivers_async(
    live_eventhub: dict[str, str], get_credential_async: Any
) -> Any:
    receivers = _receivers(live_eventhub, 30)
    yield live_eventhub["hostname"], live_eventhub["event_hub"], get_credential_async, receivers
    for r in receivers:
        r.close()


def _senders(live_eventhub: dict[str, str], credential: Any, uamqp_transport: bool) -> Any:
    client = EventHubProducerClient(
        fully_qualified_namespace=live_eventhub["hostname"],
        eventhub_name=live_eventhub["event_hub"],
        credential=credential,
        uamqp_transport=uamqp_transport,
        use_tls=False,
    )
    senders = [client._create_producer(partition_id=p) for p in client.get_partition_ids()]
    return client, senders


@pytest.fixture
def auth_credential_senders(
    live_eventhub: dict[str, str], get_credential: Any, uamqp_transport: bool
) -> Any:
    client, senders = _senders(live_eventhub, get_credential(), uamqp_transport)
    yield live_eventhub["hostname"], live_eventhub["event_hub"], get_credential, senders
    for s in senders:
        s.close()
    client.close()


@pytest.fixture
def auth_credential_senders_async(
    live_eventhub: dict[str, str], get_credential: Any, uamqp_transport: bool
) -> Any:
    client, senders = _senders(live_eventhub, get_credential(), uamqp_transport)
    yield (
        live_eventhub["hostname"],
        live_eventhub["event_hub"],
        partial(get_credential_async_factory),
        senders,
    )
    for s in senders:
        s.close()
    client.close()


def get_credential_async_factory(*args: Any, **kwargs: Any) -> AsyncTestTokenCredential:
    return AsyncTestTokenCredential(JWT_SECRET)
