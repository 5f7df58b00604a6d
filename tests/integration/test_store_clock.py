"""Lease expiry is judged on the service's clock, never on the client's wall clock.

A client whose wall clock is 10 minutes off must judge leases exactly as its peers do. The skew
is simulated in this process by shifting every wall-clock source Python code can reach
(``time.time``, ``time.time_ns``, ``datetime.now``/``utcnow``/``today``, also where modules
imported them by name) while ``time.monotonic`` keeps running, as on a machine whose clock is
off. A control run with a store that reads the local clock shows the skew really bites, so the
tests would fail if the implementation used the local clock.
"""

from __future__ import annotations

import contextlib
import sys
import time
import types
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.store.azure_blob import AzureBlobBackend
from dagster_eventhub_ingest.resources.store.partition_store import PartitionStore
from dagster_eventhub_ingest.resources.store.settings import StoreSettings
from tests.support.fixtures.store import PartitionStoreFactory

# Held one level down: the patch below rewrites module attributes, and must not rewrite these.
_REAL = types.SimpleNamespace(time=time.time, time_ns=time.time_ns, datetime=datetime)


@contextlib.contextmanager
def skewed_wall_clock(skew: timedelta) -> Iterator[None]:
    """Shift this process's wall clock by ``skew`` (monotonic time is untouched)."""
    seconds = skew.total_seconds()
    real_time, real_time_ns, real_datetime = _REAL.time, _REAL.time_ns, _REAL.datetime

    class _Meta(type):
        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, real_datetime)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, real_datetime)

    class SkewedDatetime(real_datetime, metaclass=_Meta):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return real_datetime.now(tz) + skew

        @classmethod
        def utcnow(cls) -> datetime:  # type: ignore[override]
            return real_datetime.utcnow() + skew

        @classmethod
        def today(cls) -> datetime:  # type: ignore[override]
            return real_datetime.today() + skew

    replacements: dict[Any, Any] = {
        real_time: lambda: real_time() + seconds,
        real_time_ns: lambda: real_time_ns() + int(seconds * 1e9),
        real_datetime: SkewedDatetime,
    }
    patched: list[tuple[dict[str, Any], str, Any]] = []
    for module in list(sys.modules.values()):
        if not isinstance(module, types.ModuleType):
            continue
        namespace = vars(module)
        for name, value in list(namespace.items()):
            try:
                fake = replacements.get(value)
            except Exception:  # unhashable or odd module attribute: not a clock
                continue
            if fake is not None:
                patched.append((namespace, name, value))
                namespace[name] = fake
    try:
        yield
    finally:
        for namespace, name, value in patched:
            namespace[name] = value


class LocalClockBackend(AzureBlobBackend):
    """The mistake these tests must catch: judging expiry on the local wall clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


def test_skew_patch_reaches_the_wall_clock_but_not_monotonic() -> None:
    before_mono = time.monotonic()
    with skewed_wall_clock(timedelta(minutes=10)):
        assert time.time() - _REAL.time() > 590
        assert datetime.now(timezone.utc) - _REAL.datetime.now(timezone.utc) > timedelta(
            seconds=590
        )
        assert time.monotonic() - before_mono < 60
    assert abs(time.time() - _REAL.time()) < 5


@pytest.mark.integration
def test_clock_ahead_does_not_take_a_live_lease(
    partition_store_factory: PartitionStoreFactory, blob_store_settings: StoreSettings
) -> None:
    expiry = timedelta(seconds=30)
    holder = partition_store_factory()
    live = holder.claim("0", "owner-healthy", None)
    assert live is not None

    with skewed_wall_clock(timedelta(minutes=10)):
        ahead = partition_store_factory()  # built entirely under the skew
        seen = ahead.get_ownership("0")
        assert seen is not None
        service_now = ahead.now()
        assert abs(service_now - holder.now()) < timedelta(seconds=5)
        assert not seen.is_expired(service_now, expiry)

        # Control: the same judgement on the local clock would steal the live lease.
        wrong = PartitionStore(LocalClockBackend.from_settings(blob_store_settings), ahead.hub)
        assert seen.is_expired(wrong.now(), expiry)

    assert holder.renew(live).owner_id == "owner-healthy"


@pytest.mark.integration
def test_clock_behind_still_sees_an_expired_lease(
    partition_store_factory: PartitionStoreFactory, blob_store_settings: StoreSettings
) -> None:
    expiry = timedelta(seconds=2)
    crashed = partition_store_factory()
    assert crashed.claim("0", "owner-crashed", None) is not None
    time.sleep(expiry.total_seconds() + 1.5)  # the owner never renews

    with skewed_wall_clock(timedelta(minutes=-10)):
        behind = partition_store_factory()
        seen = behind.get_ownership("0")
        assert seen is not None
        assert seen.is_expired(behind.now(), expiry)
        taken = behind.claim("0", "owner-behind", seen)
        assert taken is not None and taken.epoch == 2

        wrong = PartitionStore(LocalClockBackend.from_settings(blob_store_settings), behind.hub)
        assert not seen.is_expired(wrong.now(), expiry)


def _response(date: datetime) -> Any:
    headers = {"Date": format_datetime(date, usegmt=True)}
    return types.SimpleNamespace(http_response=types.SimpleNamespace(headers=headers))


def test_now_advances_the_service_date_with_the_monotonic_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Unit test of the clock arithmetic, no network: responses carry Date headers.
    backend = AzureBlobBackend.__new__(AzureBlobBackend)
    AzureBlobBackend.__init__(
        backend,
        types.SimpleNamespace(container_name="c", url="http://h/a/c?sig=SECRET"),  # type: ignore[arg-type]
        clock_refresh_seconds=30,
    )
    assert "SECRET" not in backend.endpoint
    mono = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: mono[0])
    service = datetime(2030, 6, 1, 12, 0, 0, tzinfo=timezone.utc)
    backend._on_response(_response(service))
    assert backend.now() == service
    mono[0] += 2.5
    assert backend.now() == service + timedelta(seconds=2.5)
    # A later response stamped within the same second is a weaker bound: now() never goes back.
    backend._on_response(_response(service + timedelta(seconds=2)))
    assert backend.now() == service + timedelta(seconds=2.5)
    # A later second is a better bound: taken.
    mono[0] += 0.2
    backend._on_response(_response(service + timedelta(seconds=4)))
    assert backend.now() == service + timedelta(seconds=4)
    assert backend.operations == 3
