"""What the run asks Event Hubs directly (on the driver): partition ids, bounds, one event's time.

Everything else is read on Spark executors by the ``eventhubs`` data source. The driver only
makes management calls, which are cheap, and at most one single-event receive per lagging
partition to tell how old the oldest unprocessed event is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from resources.errors import ConfigurationError, EventHubUnavailableError, RangeError, redact
from resources.settings import EventHubSettings

__all__ = ["HubClient", "PartitionInfo", "SdkHubClient"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition's bounds at snapshot time (inclusive sequence numbers; -1 when empty)."""

    partition_id: str
    begin_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: str | None = None
    last_enqueued_time: datetime | None = None
    is_empty: bool = False


class HubClient(Protocol):
    """The few Event Hubs calls the run makes on the driver."""

    def partition_ids(self) -> list[str]:
        """Every partition id of the hub, in the service's order."""
        ...

    def hub_created_ms(self) -> int | None:
        """When the hub was created (ms since the epoch, the service's value), if known.

        Recorded with every checkpoint: a different value later means the hub was deleted and
        re-created under the same name, and sequence numbers restarted.
        """
        ...

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        """Bounds of each partition (one management call per partition)."""
        ...

    def enqueued_time_of(self, partition_id: str, sequence_number: int) -> datetime | None:
        """Enqueued time of one event, or None if it cannot be read quickly."""
        ...

    def enqueued_times(self, wanted: dict[str, int]) -> dict[str, datetime | None]:
        """:meth:`enqueued_time_of` for several partitions (partition -> sequence number)."""
        ...


def _utc(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _info(pid: str, props: Any) -> PartitionInfo:
    last = int(props["last_enqueued_sequence_number"])
    empty = bool(props.get("is_empty"))
    return PartitionInfo(
        partition_id=pid,
        # Nothing retained: the next event will be last + 1 (the service may report a stale
        # beginning then).
        begin_sequence_number=last + 1 if empty else int(props["beginning_sequence_number"]),
        last_enqueued_sequence_number=last,
        last_enqueued_offset=str(props.get("last_enqueued_offset") or "") or None,
        last_enqueued_time=_utc(props.get("last_enqueued_time_utc")),
        is_empty=empty,
    )


def _service_message(exc: BaseException) -> str:
    """The service's own words from an SDK error: its first line, redacted and bounded."""
    text = redact(str(exc)).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]


def _is_not_found(exc: BaseException) -> bool:
    text = str(exc)
    return (
        "amqp:not-found" in text
        or "NotFound" in text
        or "could not be found" in text
        or "Status code: 404" in text
    )


def _is_unauthorized(exc: BaseException) -> bool:
    text = str(exc)
    return "amqp:unauthorized-access" in text or "Status code: 401" in text


class SdkHubClient:
    """:class:`HubClient` over ``azure-eventhub``; fails fast with a clear error when unreachable.

    Args:
        settings: the hub to talk to.
        retry_total: attempts per management call before giving up (the SDK default of 3 with
            exponential backoff takes ~6 s to report a closed port).
        peek_timeout: seconds to wait for one event in :meth:`enqueued_time_of`.
    """

    def __init__(
        self, settings: EventHubSettings, *, retry_total: int = 2, peek_timeout: float = 5.0
    ) -> None:
        self.settings = settings
        self.retry_total = retry_total
        self.peek_timeout = peek_timeout
        self._ids: list[str] | None = None
        self._created_ms: int | None = None

    def _client(self) -> Any:
        return self.settings.consumer_client(
            retry_total=self.retry_total, retry_backoff_factor=0.2, retry_backoff_max=2
        )

    def _unavailable(
        self, what: str, exc: Exception
    ) -> EventHubUnavailableError | ConfigurationError:
        hub = f"{self.settings.namespace}/{self.settings.eventhub_name}"
        cause = _service_message(exc)
        if _is_not_found(exc):
            # The service answered: the hub is not there. A retry cannot fix a name.
            return ConfigurationError(
                f"eventhub.eventhub_name: Event Hubs {hub}: the hub does not exist ({what}: "
                f"{cause}). Check eventhub_name and the namespace of the connection string."
            )
        if _is_unauthorized(exc):
            return ConfigurationError(
                f"eventhub: Event Hubs {hub}: access denied ({what}: {cause}). Check the "
                "credential: it needs the Listen right on this hub."
            )
        return EventHubUnavailableError(
            f"Event Hubs {hub}: {what} failed: {type(exc).__name__}: {cause}. Check that the "
            "namespace is reachable from here; retrying later may help."
        )

    def _properties(self) -> None:
        try:
            with self._client() as client:
                props = client.get_eventhub_properties()
        except Exception as exc:
            raise self._unavailable("reading the hub's properties", exc) from exc
        self._ids = [str(p) for p in props["partition_ids"]]
        created = _utc(props.get("created_at"))
        self._created_ms = int(created.timestamp() * 1000) if created is not None else None

    def partition_ids(self) -> list[str]:
        """Every partition id of the hub (cached for this client's lifetime).

        Raises:
            ConfigurationError: the hub does not exist or the credential may not read it.
            EventHubUnavailableError: the namespace cannot be reached.
        """
        if self._ids is None:
            self._properties()
        assert self._ids is not None
        return list(self._ids)

    def hub_created_ms(self) -> int | None:
        """When the hub was created (ms since the epoch), from the hub's properties."""
        if self._ids is None:
            self._properties()
        return self._created_ms

    def check_consumer_group(self, timeout: float = 15.0) -> None:
        """Fail fast with a ConfigurationError if the consumer group does not exist.

        Management calls do not name a consumer group; only a receiver does. So this opens one
        receiver at the end of the first partition and waits until it is attached (or refused).
        ``$Default`` always exists and is not checked. Inconclusive (no answer in ``timeout``)
        counts as fine: the read will tell.
        """
        group = self.settings.consumer_group
        if group.lower() == "$default":
            return
        pid = self.partition_ids()[0]
        outcome: list[BaseException | None] = []
        done = threading.Event()
        client = self.settings.consumer_client(retry_total=0)

        def on_event(_context: Any, _event: Any) -> None:
            outcome.append(None)  # attached: an event or an empty max_wait_time tick
            done.set()

        def on_error(_context: Any, error: BaseException) -> None:
            outcome.append(error)
            done.set()

        def receive() -> None:
            try:
                client.receive(
                    on_event,
                    partition_id=pid,
                    starting_position="@latest",
                    on_error=on_error,
                    max_wait_time=0.5,
                    prefetch=1,
                )
            except Exception as exc:
                outcome.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=receive, name="check-consumer-group", daemon=True)
        thread.start()
        done.wait(timeout)
        client.close()
        thread.join(5)
        error = next((e for e in outcome if e is not None), None) if outcome else None
        if outcome and outcome[0] is None:
            return
        if error is not None and _is_not_found(error):
            hub = f"{self.settings.namespace}/{self.settings.eventhub_name}"
            raise ConfigurationError(
                f"eventhub.consumer_group: {group!r} does not exist in Event Hubs {hub} "
                f"({_service_message(error)}). Create it on the hub or fix consumer_group."
            )

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        """Bounds of each partition; unknown ids raise :class:`RangeError` naming the valid ones.

        Every management call opens its own AMQP connection in the SDK (0.5-1.5 s of handshake,
        most of it the SDK's 50 ms polls), whichever client makes it: the calls run concurrently
        on one client, so a snapshot of 32 partitions costs about one round trip.
        """
        if not partition_ids:
            return {}
        known = self.partition_ids()
        unknown = [p for p in partition_ids if p not in known]
        if unknown:
            raise RangeError(
                f"partition(s) {', '.join(unknown)} do not exist in hub "
                f"{self.settings.eventhub_name!r}; valid partition ids: {', '.join(known)}"
            )
        try:
            with self._client() as client:

                def one(pid: str) -> PartitionInfo:
                    return _info(pid, client.get_partition_properties(pid))

                with ThreadPoolExecutor(max_workers=min(16, len(partition_ids))) as pool:
                    infos = list(pool.map(one, partition_ids))
        except Exception as exc:
            raise self._unavailable("reading partition properties", exc) from exc
        return {info.partition_id: info for info in infos}

    def enqueued_time_of(self, partition_id: str, sequence_number: int) -> datetime | None:
        """Enqueued time of event ``sequence_number`` (None if not received in time)."""
        got: list[datetime | None] = []
        done = threading.Event()
        client = self._client()

        def on_event(_context: Any, event: Any) -> None:
            if event is not None and not done.is_set():
                got.append(_utc(event.enqueued_time))
                done.set()

        def receive() -> None:
            try:
                client.receive(
                    on_event,
                    partition_id=partition_id,
                    starting_position=sequence_number,
                    starting_position_inclusive=True,
                    prefetch=1,
                    max_wait_time=self.peek_timeout,
                )
            except Exception:  # lag is informational; the caller shows None
                logger.debug("peek failed partition=%s", partition_id, exc_info=True)
            finally:
                done.set()

        thread = threading.Thread(target=receive, name=f"peek-{partition_id}", daemon=True)
        thread.start()
        done.wait(self.peek_timeout)
        client.close()
        thread.join(self.peek_timeout)
        return got[0] if got else None

    def enqueued_times(self, wanted: dict[str, int]) -> dict[str, datetime | None]:
        """:meth:`enqueued_time_of` for several partitions at once (threads, bounded)."""
        if not wanted:
            return {}
        with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
            futures = {p: pool.submit(self.enqueued_time_of, p, s) for p, s in wanted.items()}
            return {p: f.result() for p, f in futures.items()}
