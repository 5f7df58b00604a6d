"""The one Event Hubs management client: partition ids, hub and partition properties.

The run (on the driver), the ``eventhubs`` Spark source (its planner on the driver, its readers
on executors), the status and lag views, the Dagster resources and Airflow's lag trigger (on an
event loop: :meth:`EventHubClient.asnapshot`) all ask the service through
:class:`EventHubClient`. Executor-safe: no pydantic, no Dagster; the SDK is imported by
:meth:`~dagster_eventhub_ingest.resources.settings.EventHubSettings.consumer_client`
(``azure.eventhub.aio`` only by ``asnapshot``, so nothing here needs aiohttp until it is used).

Partition ids are always in :func:`sort_partition_ids` order ("2" before "10").
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    EventHubUnavailableError,
    RangeError,
    redact,
)
from dagster_eventhub_ingest.resources.failures import (
    NOT_FOUND,
    PERMISSION_DENIED,
    UNAUTHORIZED,
    classify,
    exception_chain,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings

if TYPE_CHECKING:
    from azure.eventhub import EventHubConsumerClient

__all__ = [
    "EventHubClient",
    "HubSnapshot",
    "PartitionInfo",
    "partition_id_key",
    "partition_info_from_properties",
    "sort_partition_ids",
    "utc",
]

logger = logging.getLogger(__name__)


def partition_id_key(pid: str) -> tuple[int, int, str]:
    """Sort key of a partition id: numbers in numeric order, then any other ids by name."""
    return (0, int(pid), pid) if pid.isdigit() else (1, 0, pid)


def sort_partition_ids(ids: Iterable[str]) -> list[str]:
    """Event Hub partition ids in numeric order when they are numbers ("2" before "10")."""
    return sorted(ids, key=partition_id_key)


@dataclass(frozen=True)
class PartitionInfo:
    """One partition's bounds at snapshot time (inclusive sequence numbers; no secrets).

    ``begin_sequence_number`` is the first sequence number still retained: ``last + 1`` when
    the partition retains nothing (the service may report a stale beginning then).
    """

    partition_id: str
    begin_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: str | None = None
    last_enqueued_time: datetime | None = None
    is_empty: bool = False


def utc(value: Any) -> datetime | None:
    """``value`` as an aware UTC datetime (naive ones are UTC); None if it is not a datetime."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def partition_info_from_properties(pid: str, props: Mapping[str, Any]) -> PartitionInfo:
    """:class:`PartitionInfo` of what ``get_partition_properties`` returned for ``pid``."""
    last = int(props["last_enqueued_sequence_number"])
    empty = bool(props.get("is_empty"))
    return PartitionInfo(
        partition_id=pid,
        begin_sequence_number=last + 1 if empty else int(props["beginning_sequence_number"]),
        last_enqueued_sequence_number=last,
        last_enqueued_offset=str(props.get("last_enqueued_offset") or "") or None,
        last_enqueued_time=utc(props.get("last_enqueued_time_utc")),
        is_empty=empty,
    )


def _hub_ids(props: Mapping[str, Any]) -> tuple[list[str], int | None]:
    """Sorted partition ids and creation time (ms) of what ``get_eventhub_properties`` returned."""
    created = utc(props.get("created_at"))
    created_ms = int(created.timestamp() * 1000) if created is not None else None
    return sort_partition_ids(str(p) for p in props["partition_ids"]), created_ms


@dataclass(frozen=True)
class HubSnapshot:
    """What :meth:`EventHubClient.asnapshot` read: every partition id (sorted), the hub's
    creation time (ms since the epoch, if known) and the bounds of the partitions asked for."""

    partition_ids: list[str]
    created_ms: int | None
    partitions: dict[str, PartitionInfo]


def _service_message(exc: BaseException) -> str:
    """The service's own words from an SDK error: its first line, redacted and bounded."""
    text = redact(str(exc)).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:300]


def _is_not_found(exc: BaseException) -> bool:
    """Whether the service said the hub or consumer group is not there (``amqp:not-found``)."""
    failure = classify(exc)
    return failure is not None and failure.kind is NOT_FOUND


_STATUS_RE = re.compile(r"Status code: (\d{3})")


def _status(exc: BaseException) -> int | None:
    """The status an SDK error names, for its message."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    found = _STATUS_RE.search(str(exc))
    return int(found.group(1)) if found else None


def _is_unauthorized(exc: BaseException) -> bool:
    """Whether the service refused the credential (retrying cannot help), by type and status.

    An ``azure.core`` ``ClientAuthenticationError`` (a credential that cannot get a token,
    e.g. ``DefaultAzureCredential`` with nothing configured), an AMQP ``unauthorized-access``
    (a management request refused), a CBS handshake answered 401 or 403, or an
    ``azure.eventhub`` ``AuthenticationError`` nothing deeper explains. An authentication error
    whose cause is a timeout, an internal error or a 5xx is not a refusal: the caller reports
    it as unavailable.
    """
    failure = classify(exc)
    return failure is not None and failure.kind in (UNAUTHORIZED, PERMISSION_DENIED)


def _refusal(exc: BaseException) -> str:
    """What the service said when it refused a credential: status and description, redacted."""
    status = next((s for s in map(_status, exception_chain(exc)) if s is not None), None)
    text = redact(str(exc))
    described = re.search(r"Description: ([^\n]+)", text)
    detail = described.group(1) if described else _service_message(exc)
    detail = re.sub(r"\s*TrackingId:\S+", "", detail).strip()
    return (f"HTTP {status} " if status is not None else "") + f"{type(exc).__name__}: {detail}"[
        :300
    ]


@dataclass
class Received:
    """What :func:`receive_one` saw: the first event, whether the receiver attached, an error."""

    event: Any | None = None
    #: The receiver attached: an event arrived, or an empty ``max_wait_time`` tick did.
    attached: bool = False
    error: BaseException | None = None


def receive_one(
    client: EventHubConsumerClient,
    partition_id: str,
    starting_position: Any,
    *,
    wait_seconds: float,
    inclusive: bool = False,
    max_wait_time: float | None = None,
    join_seconds: float = 5.0,
) -> Received:
    """Receive at most one event of ``partition_id`` at ``starting_position``, then close
    ``client``.

    The SDK's ``receive`` blocks, so it runs on a daemon thread; this waits until the first
    callback (an event, or an empty tick every ``max_wait_time`` seconds), an error, or
    ``wait_seconds``, whichever comes first. Used for a partition's first event at a position,
    the age of the oldest unprocessed event, and whether a consumer group exists.
    """
    out = Received()
    done = threading.Event()

    def on_event(_context: Any, event: Any) -> None:
        if not done.is_set():
            out.attached, out.event = True, event
            done.set()

    def on_error(_context: Any, error: BaseException) -> None:
        out.error = out.error or error
        done.set()

    def receive() -> None:
        try:
            client.receive(
                on_event,
                partition_id=partition_id,
                starting_position=starting_position,
                starting_position_inclusive=inclusive,
                on_error=on_error,
                max_wait_time=max_wait_time,
                prefetch=1,
            )
        except Exception as exc:  # handed to the caller
            out.error = out.error or exc
        finally:
            done.set()

    thread = threading.Thread(target=receive, name=f"receive-one-{partition_id}", daemon=True)
    thread.start()
    done.wait(wait_seconds)
    try:
        client.close()
    except Exception:  # closing must not mask the result
        logger.debug("closing the receiver of partition %s failed", partition_id, exc_info=True)
    thread.join(join_seconds)
    return out


class EventHubClient:
    """Management calls of one hub over ``azure-eventhub``, failing with clear errors.

    Every management call of the SDK opens its own AMQP connection with its own CBS handshake,
    whichever client makes it, so the calls of one snapshot run concurrently: with the
    partitions named, the id listing and every partition's properties are one round trip.
    The clients come from :meth:`EventHubSettings.consumer_client`, whose handshakes go at the
    network's pace (:mod:`dagster_eventhub_ingest.resources.azure.transport`: 13 ms a call on
    loopback, 0.41 s with the SDK's 50 ms polls per frame).

    Args:
        settings: the hub to talk to.
        retry_total: attempts per management call before giving up (the default 2, with short
            backoff, reports a closed port in ~2 s; the SDK's own 3 with exponential backoff
            takes ~6 s). None keeps the SDK's retry policy.
        peek_timeout: seconds to wait for one event in :meth:`enqueued_time_of`.
    """

    def __init__(
        self,
        settings: EventHubSettings,
        *,
        retry_total: int | None = 2,
        peek_timeout: float = 5.0,
    ) -> None:
        self.settings = settings
        self.retry_total = retry_total
        self.peek_timeout = peek_timeout
        self._ids: list[str] | None = None
        self._created_ms: int | None = None

    def _client_kwargs(self) -> dict[str, Any]:
        # The sync and aio clients take the same retry options.
        if self.retry_total is None:
            return {}
        return {
            "retry_total": self.retry_total,
            "retry_backoff_factor": 0.2,
            "retry_backoff_max": 2,
        }

    def _client(self) -> EventHubConsumerClient:
        return self.settings.consumer_client(**self._client_kwargs())

    def _unavailable(
        self, what: str, exc: BaseException
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
            if self.settings.credential_type == "connection_string":
                fix = (
                    "Check eventhub.connection_string: SharedAccessKeyName must name a policy "
                    "of this namespace or hub with the Listen right, and SharedAccessKey must be "
                    "its current key (a regenerated key invalidates the old one)"
                )
            else:
                fix = (
                    "Check the identity DefaultAzureCredential picks here (its environment, "
                    "managed identity or login) and that it has the 'Azure Event Hubs Data "
                    "Receiver' role on this hub or namespace"
                )
            return ConfigurationError(
                f"eventhub: Event Hubs {hub} refused the credential ({what}: "
                f"{_refusal(exc)}). {fix}. Retrying cannot help."
            )
        return EventHubUnavailableError(
            f"Event Hubs {hub}: {what} failed: {type(exc).__name__}: {cause}. Check that the "
            "namespace is reachable from here; retrying later may help."
        )

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        """An SDK call's failure as one of ours (:meth:`_unavailable`), sync or awaited alike."""
        try:
            yield
        except Exception as exc:
            raise self._unavailable(what, exc) from exc

    def _check_known(self, partition_ids: Sequence[str], known: Sequence[str]) -> None:
        unknown = [p for p in partition_ids if p not in known]
        if unknown:
            raise RangeError(
                f"partition(s) {', '.join(unknown)} do not exist in hub "
                f"{self.settings.eventhub_name!r}; valid partition ids: {', '.join(known)}"
            )

    def _hub_properties(self, client: EventHubConsumerClient) -> tuple[list[str], int | None]:
        """Sorted partition ids and creation time (ms) from ``get_eventhub_properties``."""
        with self._translated("reading the hub's properties"):
            props = client.get_eventhub_properties()
        return _hub_ids(props)

    def _partition_properties(self, client: EventHubConsumerClient, pid: str) -> PartitionInfo:
        with self._translated(f"reading the properties of partition {pid}"):
            props = client.get_partition_properties(pid)
        return partition_info_from_properties(pid, props)

    def partition_ids(self) -> list[str]:
        """Every partition id of the hub, sorted (cached for this client's lifetime).

        Raises:
            ConfigurationError: the hub does not exist or the credential may not read it.
            EventHubUnavailableError: the namespace cannot be reached.
        """
        if self._ids is None:
            with self._client() as client:
                self._ids, self._created_ms = self._hub_properties(client)
        return list(self._ids)

    def hub_created_ms(self) -> int | None:
        """When the hub was created (ms since the epoch, the service's value), if known.

        Recorded with every checkpoint: a different value later means the hub was deleted and
        re-created under the same name, and sequence numbers restarted.
        """
        if self._ids is None:
            self.partition_ids()
        return self._created_ms

    def snapshot(
        self,
        partition_ids: Sequence[str] | None = None,
        *,
        client: EventHubConsumerClient | None = None,
    ) -> tuple[list[str], dict[str, PartitionInfo]]:
        """The hub's partition ids (fresh) and the properties of ``partition_ids`` (default: all).

        One round of concurrent management calls with ``partition_ids`` given, two without (ids,
        then properties). Properties of ids that turn out not to exist are left out (callers
        name them). ``client`` is an SDK client to make the calls on (default: a new one).
        """
        own = client is None
        cl = client if client is not None else self._client()
        wanted = list(dict.fromkeys(partition_ids)) if partition_ids is not None else None
        pool = ThreadPoolExecutor(
            max_workers=min(16, 1 + len(wanted or ())), thread_name_prefix="eventhubs-mgmt"
        )
        wait = True
        try:
            ids_future = pool.submit(self._hub_properties, cl)
            futures: dict[str, Future[PartitionInfo]] = {}
            if wanted is not None:
                futures = {pid: pool.submit(self._partition_properties, cl, pid) for pid in wanted}
            try:
                all_ids, _ = ids_future.result()
            except BaseException:
                wait = False
                raise
            if wanted is None:
                wanted = all_ids
                futures = {pid: pool.submit(self._partition_properties, cl, pid) for pid in wanted}
            elif any(pid not in all_ids for pid in wanted):
                # The properties call of an unknown id may be retrying; nobody needs its answer.
                wait = False
            infos: dict[str, PartitionInfo] = {}
            for pid, future in futures.items():
                if pid not in all_ids:
                    continue
                try:
                    infos[pid] = future.result()
                except BaseException:
                    wait = False
                    raise
            return all_ids, infos
        finally:
            pool.shutdown(wait=wait, cancel_futures=not wait)
            if own:
                cl.close()

    def partition_info(self, partition_ids: Sequence[str]) -> dict[str, PartitionInfo]:
        """Bounds of each partition; unknown ids raise :class:`RangeError` naming the valid ones.

        The ids are checked against :meth:`partition_ids` (cached), then every partition's
        properties are read concurrently on one client.
        """
        if not partition_ids:
            return {}
        self._check_known(partition_ids, self.partition_ids())
        with (
            self._client() as client,
            ThreadPoolExecutor(max_workers=min(16, len(partition_ids))) as pool,
        ):
            infos = list(
                pool.map(lambda pid: self._partition_properties(client, pid), partition_ids)
            )
        return {info.partition_id: info for info in infos}

    async def asnapshot(self, partition_ids: Sequence[str] | None = None) -> HubSnapshot:
        """:meth:`partition_ids` and :meth:`partition_info` read with ``azure.eventhub.aio``,
        for an event loop (Airflow's triggerer): the ids, then every partition's properties
        concurrently, on one client.

        Raises:
            RangeError: a partition of ``partition_ids`` (default: all) is not in the hub.
            ConfigurationError: the hub does not exist or the credential may not read it.
            EventHubUnavailableError: the namespace cannot be reached.
        """
        try:
            async with self.settings.aio_consumer_client(**self._client_kwargs()) as client:
                with self._translated("reading the hub's properties"):
                    hub_props = await client.get_eventhub_properties()
                known, created_ms = _hub_ids(hub_props)
                targets = list(partition_ids) if partition_ids else known
                self._check_known(targets, known)

                async def properties(pid: str) -> PartitionInfo:
                    with self._translated(f"reading the properties of partition {pid}"):
                        props = await client.get_partition_properties(pid)
                    return partition_info_from_properties(pid, props)

                infos = await asyncio.gather(*(properties(p) for p in targets))
        except EventHubIngestError:
            raise
        except Exception as exc:  # opening or closing the client: a poll loop retries it
            raise self._unavailable("reading partition properties", exc) from exc
        return HubSnapshot(known, created_ms, {info.partition_id: info for info in infos})

    def check_consumer_group(
        self,
        timeout: float = 15.0,
        *,
        option: str = "eventhub.consumer_group",
        partition_id: str | None = None,
    ) -> None:
        """Fail fast with a ConfigurationError if the consumer group does not exist.

        Management calls do not name a consumer group; only a receiver does. So this opens one
        receiver at the end of ``partition_id`` (default: the first partition) and waits until it
        is attached (or refused). ``$Default`` always exists and is not checked. Inconclusive
        (no answer in ``timeout``) counts as fine: the read will tell. The message names the
        setting as ``option`` (how the caller's user spelled it).
        """
        group = self.settings.consumer_group
        if group.lower() == "$default":
            return
        pid = partition_id if partition_id is not None else self.partition_ids()[0]
        got = receive_one(
            self.settings.consumer_client(retry_total=0),
            pid,
            "@latest",
            wait_seconds=timeout,
            max_wait_time=0.5,
        )
        if got.attached:
            return
        error = got.error
        if error is not None and _is_not_found(error):
            hub = f"{self.settings.namespace}/{self.settings.eventhub_name}"
            raise ConfigurationError(
                f"{option}: {group!r} does not exist in Event Hubs {hub} "
                f"({_service_message(error)}). Create it on the hub or fix {option}."
            )

    def enqueued_time_of(self, partition_id: str, sequence_number: int) -> datetime | None:
        """Enqueued time of event ``sequence_number`` (None if not received in time)."""
        got = receive_one(
            self._client(),
            partition_id,
            sequence_number,
            wait_seconds=self.peek_timeout,
            inclusive=True,
            max_wait_time=self.peek_timeout,
            join_seconds=self.peek_timeout,
        )
        if got.error is not None:  # lag is informational; the caller shows None
            logger.debug("peek failed partition=%s: %r", partition_id, got.error)
        return utc(got.event.enqueued_time) if got.event is not None else None

    def enqueued_times(self, wanted: dict[str, int]) -> dict[str, datetime | None]:
        """:meth:`enqueued_time_of` for several partitions at once (threads, bounded)."""
        if not wanted:
            return {}
        with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
            futures = {p: pool.submit(self.enqueued_time_of, p, s) for p, s in wanted.items()}
            return {p: f.result() for p, f in futures.items()}
