"""A busy storage account (tests/support/faultproxy.py's HTTP proxy in front of Azurite): 429 and
503 with Retry-After are retried within each call's budget, and errors count the retries made.

The runs at 20 % throttling that land every event once are in
tests/integration/test_faults_integration.py.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from dagster_eventhub_ingest.resources.errors import StoreUnavailableError
from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend, container_client
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.records import LEASE_MARGIN, HubRef
from dagster_eventhub_ingest.resources.store.retry import StoreRetryPolicy
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.faultproxy import HttpFaultProxy

pytestmark = [pytest.mark.integration]

HUB = HubRef("ns.example", "hub", "$Default")


@pytest.fixture
def proxy(azurite_connection_string: str) -> Iterator[HttpFaultProxy]:
    match = re.search(r"BlobEndpoint=http://127\.0\.0\.1:(\d+)/", azurite_connection_string)
    assert match is not None
    with HttpFaultProxy(("127.0.0.1", int(match.group(1))), seed=37) as fault_proxy:
        yield fault_proxy


@pytest.fixture
def settings(
    proxy: HttpFaultProxy, azurite_connection_string: str, container_name: str
) -> StoreSettings:
    """Store settings whose every request goes through the proxy."""
    upstream = proxy.upstream[1]
    conn = azurite_connection_string.replace(f":{upstream}/", f":{proxy.port}/")
    return StoreSettings(container=container_name, connection_string=conn)


def test_store_calls_finish_at_20_percent_throttling(
    proxy: HttpFaultProxy, settings: StoreSettings
) -> None:
    """Two owners claim, record intents, checkpoint and release 8 partitions each, three times
    over, while a fifth of all requests is answered 429 or 503: every call succeeds."""
    proxy.throttle, proxy.retry_after = 0.2, 0.2
    errors: list[BaseException] = []

    def owner(name: str, partitions: list[str]) -> None:
        backend = AzureBlobBackend.from_settings(settings)
        store = PartitionStore(backend, HUB, lease_expiry=timedelta(seconds=30))
        try:
            for cycle in range(3):
                for pid in partitions:
                    own = store.claim(pid, name, store.get_ownership(pid))
                    assert own is not None, (name, pid, cycle)
                    own = store.renew(store.record_intent(own, cycle * 10, cycle * 10 + 9))
                    own = store.checkpoint(own, cycle * 10 + 9, str(cycle * 900))
                    assert store.release(own)
        except BaseException as exc:
            errors.append(exc)
        finally:
            backend.close()

    threads = [
        threading.Thread(target=owner, args=(f"owner-{i}", [f"{i}{p}" for p in range(8)]))
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    statuses = {r.status for r in proxy.log if r.status is not None}
    assert proxy.throttled >= 20 and statuses == {429, 503}, (proxy.throttled, statuses)
    proxy.throttle = 0.0
    store = PartitionStore(AzureBlobBackend.from_settings(settings), HUB)
    cps = store.list_checkpoints()
    assert {p: c.sequence_number for p, c in cps.items()} == {
        f"{i}{p}": 29 for i in range(2) for p in range(8)
    }
    owners = store.list_ownership()
    assert all(o.is_released and o.intent is None for o in owners.values())


@pytest.mark.parametrize("header", ["Retry-After", "x-ms-retry-after-ms"])
def test_retry_after_is_honoured(
    proxy: HttpFaultProxy, settings: StoreSettings, header: str
) -> None:
    store = PartitionStore(AzureBlobBackend.from_settings(settings), HUB)
    own = store.claim("0", "me", None)
    assert own is not None
    before = len(proxy.log)
    proxy.throttle_next(1, 429, retry_after=1.5, header=header)
    assert store.get_ownership("0") == own
    throttled, retried = proxy.log[before:]
    assert throttled.status == 429 and retried.status is None
    # The next attempt waited what the answer asked for, not the immediate first retry.
    assert 1.5 <= retried.at - throttled.at < 2.5


def test_messages_count_the_retries_that_really_happened(
    proxy: HttpFaultProxy, settings: StoreSettings
) -> None:
    backend = AzureBlobBackend(
        container_client(settings, retry_policy=StoreRetryPolicy(call_budget=4))
    )
    backend.ensure_container(create=True)
    store = PartitionStore(backend, HUB)
    # One 429 asking for longer than the call may wait: no retry, and the message says so.
    before = len(proxy.log)
    proxy.throttle_next(1, 429, retry_after=60)
    with pytest.raises(StoreUnavailableError) as err:
        store.get_ownership("0")
    assert len(proxy.log) - before == 1
    message = str(err.value)
    assert "without a retry (the next wait, 60.0 s, would pass this call's 4 s budget)" in message
    assert "HTTP 429" in message and "after 3 retries" not in message
    # The service stays busy (503 without Retry-After): retried with back-off until the budget
    # ends; the count in the message is the requests made minus one.
    before = len(proxy.log)
    proxy.throttle, proxy.statuses, proxy.retry_after = 1.0, (503,), None
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as err:
        store.get_ownership("0")
    assert time.monotonic() - started < 4.5
    made = len(proxy.log) - before
    assert made >= 4
    assert f"after {made - 1} retries over" in str(err.value) and "HTTP 503" in str(err.value)
    assert err.value.retryable
    backend.close()


def test_a_renewal_is_retried_only_while_its_lease_is_valid(
    proxy: HttpFaultProxy, settings: StoreSettings
) -> None:
    """A throttled renewal gives up before the lease could expire, and says so; it does not
    keep retrying (the default budget is 30 s) while a peer may already hold the lease."""
    expiry = timedelta(seconds=6)
    store = PartitionStore(AzureBlobBackend.from_settings(settings), HUB, lease_expiry=expiry)
    own = store.claim("0", "me", None)
    assert own is not None
    claimed = time.monotonic()
    proxy.throttle, proxy.statuses, proxy.retry_after = 1.0, (503,), 1
    with pytest.raises(StoreUnavailableError) as err:
        store.renew(own)
    valid_for = (expiry - LEASE_MARGIN).total_seconds()
    # Every retry started while the lease was valid (with the margin), on this clock.
    assert proxy.log[-1].at - claimed < valid_for + 0.5
    assert time.monotonic() - claimed < valid_for + 1.5
    assert "would pass this call's" in str(err.value) and "retries over" in str(err.value)
    proxy.throttle = 0.0
    # Nobody took it meanwhile: the same lease renews once the service answers again.
    assert store.renew(own).owner_id == "me"


def test_a_write_whose_answer_was_a_500_but_was_applied_is_confirmed(
    proxy: HttpFaultProxy, settings: StoreSettings
) -> None:
    """A 500 ``OperationTimedOut`` after the service applied a conditional write: the retry
    fails its condition (the ETag moved), the store reads back its own write and goes on;
    a peer's write in the same situation is still a lost race."""
    store = PartitionStore(AzureBlobBackend.from_settings(settings), HUB)
    own = store.claim("0", "me", None)
    assert own is not None
    own = store.record_intent(own, 0, 9)
    proxy.fail_after_forwarding(1, 500)
    after = store.checkpoint(own, 9, "900")
    assert [r.status for r in proxy.log if r.status is not None] == [500]
    assert after.intent is None and after.progress is not None
    assert after.progress.sequence_number == 9
    assert store.list_checkpoints()["0"].sequence_number == 9
    # The lease is still this owner's (its ETag the current one): a renewal succeeds.
    after = store.renew(after)
    # A peer takes over; our next write, answered 500 and retried, is refused as lost.
    peer = PartitionStore(AzureBlobBackend.from_settings(settings), HUB)
    assert peer.claim("0", "peer", peer.get_ownership("0")) is not None
    proxy.fail_after_forwarding(1, 500)
    from dagster_eventhub_ingest.resources.errors import OwnershipLostError

    with pytest.raises(OwnershipLostError):
        store.renew(after)
    assert store.get_ownership("0").owner_id == "peer"  # type: ignore[union-attr]
